"""Kubelet's container runtime endpoint: where it comes from, what it is, and how to change it.

Three layouts are supported (see DESIGN):

* ``gardener``: gardener-node-agent's ``kubelet.service`` with one flag per line, including
  ``--container-runtime-endpoint=...``, plus ``EnvironmentFile=-/var/lib/kubelet/extra_args`` and
  ``$KUBELET_EXTRA_ARGS`` at the end of ExecStart. We write the flag into ``extra_args``: kubelet's
  flag parser keeps the last value, and gardener-node-agent rewrites ``kubelet.service`` but not
  ``extra_args``, so the change survives a rewrite of the unit.
* ``kubeadm``: ``KUBELET_KUBEADM_ARGS`` in ``/var/lib/kubelet/kubeadm-flags.env``.
* ``config``: ``containerRuntimeEndpoint`` in the KubeletConfiguration file given by ``--config``
  (only when no flag sets the endpoint, since a flag overrides the file).

Every plan is checked by computing kubelet's effective endpoint from the *planned* files before
anything is written; a layout we cannot change reliably is an error that changes nothing.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import yaml

from installer.host import Host
from installer.systemd import show

log = logging.getLogger("installer.kubelet")

KUBELET_UNIT = "kubelet.service"
ENDPOINT_FLAG = "--container-runtime-endpoint"
CONFIG_FLAG = "--config"
CONFIG_KEY = "containerRuntimeEndpoint"
# kubelet's default since the dockershim removal.
DEFAULT_ENDPOINT = "unix:///run/containerd/containerd.sock"
GARDENER_EXTRA_ARGS = "/var/lib/kubelet/extra_args"
GARDENER_VAR = "KUBELET_EXTRA_ARGS"
KUBEADM_FLAGS = "/var/lib/kubelet/kubeadm-flags.env"
KUBEADM_VAR = "KUBELET_KUBEADM_ARGS"

_VAR_WORD = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")
_VAR_BRACED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class KubeletLayoutError(RuntimeError):
    """Kubelet's configuration is not one we can repoint safely; nothing was changed."""


# ----- systemd unit and environment file syntax ---------------------------------------------

def parse_unit_text(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) triples of a unit file, continuation lines joined like systemd does."""
    entries: list[tuple[str, str, str]] = []
    section = ""
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#;"):
            continue
        if pending and line and line[0] in "#;":
            continue  # systemd skips comment lines inside a continuation
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        if sep:
            entries.append((section, key.strip(), value.strip()))
    if pending:
        key, sep, value = pending.partition("=")
        if sep:
            entries.append((section, key.strip(), value.strip()))
    return entries


def parse_env_file(text: str) -> dict[str, str]:
    """KEY=VALUE lines of a systemd EnvironmentFile (quotes removed, continuation lines joined)."""
    env: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#;"):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        line, pending = pending + line, ""
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        if not sep:
            continue
        value = value.strip()
        if value[:1] in "\"'":
            try:
                value = " ".join(shlex.split(value))
            except ValueError:
                value = value.strip("\"'")
        env[key.strip()] = value
    return env


def set_env_var_tokens(text: str, var: str, edit: Callable[[list[str]], list[str]]) -> str:
    """Rewrite the one line that assigns ``var`` (or append it), passing its words through ``edit``.

    Every other byte of the file is kept as it is.
    """
    lines = text.splitlines(keepends=True)
    pattern = re.compile(rf"^\s*(?:export\s+)?{re.escape(var)}\s*=")
    for i, line in enumerate(lines):
        if pattern.match(line) and not line.rstrip("\n").endswith("\\"):
            current = parse_env_file(line).get(var, "")
            new_value = " ".join(edit(current.split()))
            ending = "\n" if line.endswith("\n") else ""
            lines[i] = f'{var}="{new_value}"{ending}'
            return "".join(lines)
    new_value = " ".join(edit([]))
    prefix = "" if not text or text.endswith("\n") else "\n"
    return text + f'{prefix}{var}="{new_value}"\n'


def replace_flag(words: list[str], flag: str, value: str) -> list[str]:
    """Drop every ``flag=x`` / ``flag x`` and append ``flag=value``."""
    return strip_flag(words, flag) + [f"{flag}={value}"]


def strip_flag(words: list[str], flag: str) -> list[str]:
    out: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
            continue
        if w == flag:
            skip = True
            continue
        if w.startswith(flag + "="):
            continue
        out.append(w)
    return out


def last_flag_value(argv: Sequence[str], flag: str) -> str | None:
    value = None
    for i, w in enumerate(argv):
        if w.startswith(flag + "="):
            value = w[len(flag) + 1:]
        elif w == flag and i + 1 < len(argv):
            value = argv[i + 1]
    return value


def config_file_endpoint(text: str) -> str | None:
    try:
        doc = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise KubeletLayoutError(f"kubelet config file is not valid YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise KubeletLayoutError("kubelet config file is not a mapping")
    value = doc.get(CONFIG_KEY)
    return str(value) if value else None


def set_config_endpoint(text: str, endpoint: str) -> str:
    """Set ``containerRuntimeEndpoint`` in a KubeletConfiguration, touching only that line."""
    lines = text.splitlines(keepends=True)
    pattern = re.compile(rf"^{CONFIG_KEY}\s*:")
    for i, line in enumerate(lines):
        if pattern.match(line):
            ending = "\n" if line.endswith("\n") else ""
            lines[i] = f"{CONFIG_KEY}: {endpoint}{ending}"
            new = "".join(lines)
            break
    else:
        prefix = "" if not text or text.endswith("\n") else "\n"
        new = text + f"{prefix}{CONFIG_KEY}: {endpoint}\n"
    try:
        ok = config_file_endpoint(new) == endpoint
    except KubeletLayoutError:
        ok = False
    if not ok:
        raise KubeletLayoutError("cannot set containerRuntimeEndpoint in the kubelet config file by a line edit "
                                 "(is it JSON or flow-style YAML?)")
    return new


# ----- kubelet's unit as systemd sees it ----------------------------------------------------

@dataclass
class EnvFileRef:
    path: str
    optional: bool


@dataclass
class KubeletUnit:
    """ExecStart and environment of kubelet.service, merged over its fragment and drop-ins."""

    unit_files: list[str]
    exec_start: str
    environment: dict[str, str] = field(default_factory=dict)
    env_files: list[EnvFileRef] = field(default_factory=list)

    def exec_words(self) -> list[str]:
        words = shlex.split(self.exec_start)
        while words and words[0][:1] in "-@+!:":
            words[0] = words[0][1:]  # systemd's executable prefixes
        return words

    def uses_var(self, var: str) -> bool:
        return any(_VAR_WORD.match(w) and w[1:] == var or "${" + var + "}" in w for w in self.exec_words())

    def env_file(self, path: str) -> EnvFileRef | None:
        return next((e for e in self.env_files if e.path == path), None)


def load_kubelet_unit(host: Host, unit: str = KUBELET_UNIT) -> KubeletUnit:
    """Ask the node's systemd which files make up kubelet's unit, and merge them."""
    props = show(host, unit, "FragmentPath", "DropInPaths", "LoadState")
    if props.get("LoadState") != "loaded" or not props.get("FragmentPath"):
        raise KubeletLayoutError(f"{unit} is not loaded on the node (LoadState={props.get('LoadState')!r})")
    # systemd's view lags until a daemon-reload: a drop-in removed meanwhile is no longer read.
    files = [props["FragmentPath"]] + [p for p in props.get("DropInPaths", "").split() if p and host.exists(p)]
    return kubelet_unit_from_files(host, files, unit)


def kubelet_unit_from_files(host: Host, files: list[str], unit: str = KUBELET_UNIT) -> KubeletUnit:
    """Merge a unit fragment and its drop-ins (in systemd's order) into ExecStart and environment."""
    exec_start: list[str] = []
    environment: dict[str, str] = {}
    env_files: list[EnvFileRef] = []
    for path in files:
        for section, key, value in parse_unit_text(host.read_text(path)):
            if section != "Service":
                continue
            if key == "ExecStart":
                exec_start = [] if not value else exec_start + [value]
            elif key == "Environment":
                for assignment in shlex.split(value):
                    k, _, v = assignment.partition("=")
                    environment[k] = v
            elif key == "EnvironmentFile":
                if not value:
                    env_files = []
                else:
                    env_files.append(EnvFileRef(value.lstrip("-"), value.startswith("-")))
    if len(exec_start) != 1:
        raise KubeletLayoutError(f"{unit} has {len(exec_start)} effective ExecStart lines in {files}; expected one")
    return KubeletUnit(files, exec_start[0], environment, env_files)


# ----- effective endpoint -------------------------------------------------------------------

FileReader = Callable[[str], "bytes | None"]


def unit_environment(unit: KubeletUnit, read: FileReader) -> dict[str, str]:
    env = dict(unit.environment)
    for ref in unit.env_files:  # EnvironmentFile= overrides Environment=, later files win
        data = read(ref.path)
        if data is None:
            if not ref.optional:
                raise KubeletLayoutError(f"kubelet's EnvironmentFile {ref.path} is missing")
            continue
        env.update(parse_env_file(data.decode()))
    return env


def expand_argv(unit: KubeletUnit, env: dict[str, str]) -> list[str]:
    """ExecStart words after systemd's variable expansion: ``$X`` splits, ``${X}`` does not."""
    argv: list[str] = []
    for word in unit.exec_words():
        m = _VAR_WORD.match(word)
        if m:
            argv.extend(env.get(m.group(1), "").split())
        else:
            argv.append(_VAR_BRACED.sub(lambda mm: env.get(mm.group(1), ""), word))
    return argv


def endpoint_from_argv(argv: Sequence[str], read: FileReader) -> tuple[str, str]:
    """(endpoint, where it came from) for a kubelet command line: flag, then --config file, then default."""
    flag = last_flag_value(argv, ENDPOINT_FLAG)
    if flag:
        return flag, "flag"
    config = last_flag_value(argv, CONFIG_FLAG)
    if config:
        data = read(config)
        if data is None:
            raise KubeletLayoutError(f"kubelet config file {config} (from --config) is missing")
        value = config_file_endpoint(data.decode())
        if value:
            return value, f"config:{config}"
    return DEFAULT_ENDPOINT, "default"


def effective_endpoint(unit: KubeletUnit, read: FileReader) -> tuple[str, str]:
    return endpoint_from_argv(expand_argv(unit, unit_environment(unit, read)), read)


# ----- plans --------------------------------------------------------------------------------

@dataclass
class RepointPlan:
    layout: str
    files: dict[str, bytes]  # node path -> new content
    previous_endpoint: str
    previous_source: str


def _overlay_reader(host: Host, overlay: dict[str, bytes]) -> FileReader:
    def read(path: str) -> bytes | None:
        return overlay[path] if path in overlay else host.read_if_exists(path)
    return read


def candidate_plans(host: Host, unit: KubeletUnit, target: str) -> list[tuple[str, dict[str, bytes]]]:
    """Each supported layout that applies to this unit, with the file edit it would make."""
    plans: list[tuple[str, dict[str, bytes]]] = []
    if unit.env_file(GARDENER_EXTRA_ARGS) and unit.uses_var(GARDENER_VAR):
        current = (host.read_if_exists(GARDENER_EXTRA_ARGS) or b"").decode()
        new = set_env_var_tokens(current, GARDENER_VAR, lambda w: replace_flag(w, ENDPOINT_FLAG, target))
        plans.append(("gardener", {GARDENER_EXTRA_ARGS: new.encode()}))
    if unit.env_file(KUBEADM_FLAGS) and unit.uses_var(KUBEADM_VAR):
        current = (host.read_if_exists(KUBEADM_FLAGS) or b"").decode()
        new = set_env_var_tokens(current, KUBEADM_VAR, lambda w: replace_flag(w, ENDPOINT_FLAG, target))
        plans.append(("kubeadm", {KUBEADM_FLAGS: new.encode()}))
    argv = expand_argv(unit, unit_environment(unit, host.read_if_exists))
    config = last_flag_value(argv, CONFIG_FLAG)
    if config and last_flag_value(argv, ENDPOINT_FLAG) is None:
        data = host.read_if_exists(config)
        if data is not None:
            plans.append(("config", {config: set_config_endpoint(data.decode(), target).encode()}))
    return plans


def plan_repoint(host: Host, unit: KubeletUnit, target: str,
                 same: Callable[[str, str], bool]) -> RepointPlan:
    """The first supported layout whose edit makes kubelet's effective endpoint ``target``."""
    previous, source = effective_endpoint(unit, host.read_if_exists)
    tried = []
    for layout, files in candidate_plans(host, unit, target):
        got, _ = effective_endpoint(unit, _overlay_reader(host, files))
        if same(got, target):
            return RepointPlan(layout, files, previous, source)
        tried.append(f"{layout} (would give {got})")
    raise KubeletLayoutError(
        f"cannot repoint kubelet to {target}: unit files {unit.unit_files}, ExecStart {unit.exec_start!r}; "
        f"tried: {', '.join(tried) or 'no supported layout found'} (supported: gardener extra_args "
        f"EnvironmentFile with ${GARDENER_VAR}, kubeadm {KUBEADM_FLAGS} with ${KUBEADM_VAR}, "
        f"KubeletConfiguration {CONFIG_KEY} via --config)")


def running_endpoint(host: Host, argv: Sequence[str]) -> tuple[str, str]:
    """Effective endpoint of a running kubelet from its command line (and its --config file)."""
    return endpoint_from_argv(argv, host.read_if_exists)
