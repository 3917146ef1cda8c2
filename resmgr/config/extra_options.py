"""EXTRA_OPTIONS: extra cri-resmgr flags from the static config, checked against cri-resmgr's own flag table
and cri-resource-manager's (upstream's) flag table.

The installer writes the result into the unit's EnvironmentFile; the extension checks it before anything
reaches a node. Both use ``check_extra_options``, which knows this cri-resmgr's flags from ``resmgr.options``
(argparse only) and upstream's from ``UPSTREAM_FLAGS``, so a line one accepts the other accepts too.

Upstream's flags are Go ``flag`` flags: one or two dashes, ``-name=value`` or ``-name value``, booleans
as ``-name`` or ``-name=false``. Each is implemented (rewritten to this cri-resmgr's flag), accepted and
ignored (dropped, with a warning that names it), or refused with the reason (it would break the node
contract the installer keeps, or stop cri-resmgr from serving).
"""

from __future__ import annotations

import argparse
import logging
import re
import shlex
from dataclasses import dataclass, field

from resmgr.config.validation import did_you_mean
from resmgr.options import build_parser

log = logging.getLogger("resmgr.config")

EXTRA_OPTIONS_KEY = "EXTRA_OPTIONS"
# Flags EXTRA_OPTIONS may not set: the installer sets them in the unit, the agent and kubelet rely on
# the socket paths, and uninstall must know where the state and pid file are to remove them. The front end
# too: the installer points kubelet at the relay socket, which NRI mode does not serve.
MANAGED_FLAGS = ("--fallback-config", "--force-config", "--relay-socket", "--runtime-socket", "--image-socket",
                 "--config-socket", "--agent-socket", "--metrics-socket", "--relay-dir", "--pid-file",
                 "--frontend", "--nri", "--nri-socket")
# Flags that make cri-resmgr exit or do a one-off job instead of serving.
ONE_SHOT_FLAGS = ("--help", "-h", "--version", "--list-policies", "--reset-policy", "--reset-config")
MAX_EXTRA_OPTIONS_BYTES = 16 * 1024
# What systemd's $VAR expansion splits correctly and needs no quoting in an EnvironmentFile.
_SAFE_TOKEN = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?EXTRA_OPTIONS\s*=(.*)$")
_GO_DURATION = re.compile(r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+$|^0$")

IMPLEMENTED, IGNORED, REFUSED = "implemented", "accepted, ignored", "refused"
NODE_CONTRACT = "set by the installer: sockets, state and config files are part of the node contract"
ONE_SHOT = "makes cri-resmgr exit instead of serving"
NO_KLOG = "klog flag; this cri-resmgr logs with --log-level/--log-format/--debug"


@dataclass(frozen=True)
class UpstreamFlag:
    """One flag of cri-resource-manager's ``cri-resmgr`` (as registered there, without dashes)."""

    name: str
    status: str
    kind: str = "string"  # bool, string, duration
    ours: str = ""  # the flag of this cri-resmgr an implemented flag becomes
    why: str = ""


# Every flag.* registration linked into upstream's cmd/cri-resmgr (its own, pkg/cri/resource-manager,
# pkg/cgroups, pkg/cgroupstats, pkg/avx, the visualizer, pkg/version, and klog's flags re-registered
# by pkg/log/klogcontrol).
UPSTREAM_FLAGS: tuple[UpstreamFlag, ...] = (
    UpstreamFlag("force-config-signal", IMPLEMENTED, ours="--force-config-signal"),
    UpstreamFlag("disable-policy-switch", IMPLEMENTED, "bool", ours="--disable-policy-switch"),
    UpstreamFlag("host-root", IMPLEMENTED, ours="--sysfs-root",
                 why="the prefix under which the host's sysfs is read"),
    UpstreamFlag("metrics-interval", IGNORED, "duration",
                 why="metrics are computed when /metrics is scraped; there is nothing to poll"),
    UpstreamFlag("rebalance-interval", IMPLEMENTED, "duration", ours="--rebalance-interval"),
    UpstreamFlag("allow-untested-runtimes", IGNORED, "bool", why="every CRI runtime is relayed"),
    UpstreamFlag("disable-ui", IGNORED, "bool", why="there is no visualization UI"),
    UpstreamFlag("external-visualizers", IGNORED, why="there is no visualization UI"),
    UpstreamFlag("cgroup-mount", IGNORED, why="cgroups are changed through the runtime (UpdateContainerResources)"),
    UpstreamFlag("cgroup-v2-dir", IGNORED, why="cgroups are changed through the runtime (UpdateContainerResources)"),
    UpstreamFlag("kubelet-cgroup-root", IGNORED,
                 why="cgroups are changed through the runtime (UpdateContainerResources)"),
    UpstreamFlag("cgroup-path", IGNORED, why="no cgroup statistics collector"),
    UpstreamFlag("bpf-install-path", IGNORED, why="no AVX (eBPF) collector"),
    *(UpstreamFlag(name, IGNORED, "bool" if name in ("add_dir_header", "alsologtostderr", "logtostderr",
                                                     "one_output", "skip_headers", "skip_log_headers")
                   else "string", why=NO_KLOG)
      for name in ("add_dir_header", "alsologtostderr", "log_backtrace_at", "log_dir", "log_file",
                   "log_file_max_size", "logtostderr", "one_output", "skip_headers", "skip_log_headers",
                   "stderrthreshold", "v", "vmodule")),
    *(UpstreamFlag(name, REFUSED, why=NODE_CONTRACT)
      for name in ("runtime-socket", "image-socket", "relay-socket", "relay-dir", "agent-socket", "config-socket",
                   "pid-file", "fallback-config", "force-config")),
    *(UpstreamFlag(name, REFUSED, "bool", why=ONE_SHOT)
      for name in ("reset-config", "reset-policy", "print-config", "list-policies", "version")),
)
_UPSTREAM = {f.name: f for f in UPSTREAM_FLAGS}


class ExtraOptionsError(ValueError):
    """EXTRA_OPTIONS is invalid; str() names the key and the problem."""


@dataclass
class ExtraOptions:
    """The flags cri-resmgr gets (``tokens``) and the upstream flags accepted but ignored (``ignored``)."""

    tokens: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """'' or the one wording every component reports ignored flags with."""
        if not self.ignored:
            return ""
        return ("EXTRA_OPTIONS: accepted, not implemented by this cri-resmgr, ignored: "
                + ", ".join(f"{flag} ({_UPSTREAM[flag.lstrip('-').split('=')[0]].why})" for flag in self.ignored))


def _parser_error(message: str) -> None:
    raise ExtraOptionsError(message)


def resmgr_parser() -> argparse.ArgumentParser:
    """cri-resmgr's own parser, made to raise instead of printing and exiting."""
    parser = build_parser()
    parser.error = _parser_error  # type: ignore[method-assign]
    return parser


def known_flags(parser: argparse.ArgumentParser | None = None) -> dict[str, argparse.Action]:
    parser = parser or resmgr_parser()
    return {opt: action for action in parser._actions for opt in action.option_strings}


def _split_lines(text: str) -> list[str]:
    tokens: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _ENV_LINE.match(line)
        body = m.group(1) if m else line
        try:
            words = shlex.split(body, comments=True)
        except ValueError as exc:
            raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY} line {lineno}: cannot split {body.strip()!r}: {exc}") \
                from exc
        tokens.extend(words)
    for tok in tokens:
        if not _SAFE_TOKEN.match(tok):
            raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY}: {tok!r} contains characters that cannot be passed "
                                    "through a systemd EnvironmentFile (spaces, quotes, $, backslashes, ...)")
    return tokens


def _bool_value(flag: UpstreamFlag, value: str) -> bool:
    # Go's strconv.ParseBool
    if value in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if value in ("0", "f", "F", "false", "FALSE", "False"):
        return False
    raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY}: -{flag.name}: invalid boolean value {value!r}")


def _translate(tokens: list[str], ours: dict[str, argparse.Action]) -> ExtraOptions:
    """Rewrite upstream's flags into this cri-resmgr's, drop the ignored ones, refuse the rest."""
    out = ExtraOptions()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.startswith("-") or tok in ("-", "--"):
            out.tokens.append(tok)
            continue
        written, eq, value = tok.partition("=")
        name = written.lstrip("-")
        flag = _UPSTREAM.get(name)
        if f"--{name}" in MANAGED_FLAGS:
            raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY}: --{name} is fixed by the installer (configs go in the "
                                    "fallback.cfg/force.cfg keys; socket and state paths are part of the "
                                    "node contract); remove it")
        if written in ONE_SHOT_FLAGS or (flag is not None and flag.status == REFUSED):
            raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY}: {written} would stop cri-resmgr from serving; remove it")
        if flag is None or (written in ours and flag.ours == written):
            if written not in ours:
                candidates = [f for f in ours if f.startswith("--") and f not in MANAGED_FLAGS
                              and f not in ONE_SHOT_FLAGS] + [f"-{f.name}" for f in UPSTREAM_FLAGS
                                                              if f.status != REFUSED]
                raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY}: unknown cri-resmgr flag {written!r}"
                                        f"{did_you_mean(written, candidates)}; known flags: "
                                        f"{', '.join(sorted(candidates))}")
            out.tokens.append(tok)  # this cri-resmgr's own flag; its parser checks the value
            continue
        if flag.kind == "bool":
            on = _bool_value(flag, value) if eq else True
        else:
            if not eq:
                if i >= len(tokens):
                    raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY}: {written} needs a value")
                value = tokens[i]
                i += 1
            if flag.kind == "duration" and not _GO_DURATION.match(value):
                raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY}: {written}: invalid duration {value!r} "
                                        "(Go syntax, e.g. 10s, 1m30s)")
        if flag.status == IGNORED:
            out.ignored.append(f"-{flag.name}")
        elif flag.kind == "bool":
            if on:
                out.tokens.append(flag.ours)
        else:
            out.tokens.append(f"{flag.ours}={value}")
    return out


def check_extra_options(text: str, parser: argparse.ArgumentParser | None = None) -> ExtraOptions:
    """Validate EXTRA_OPTIONS: the flags for cri-resmgr, and the upstream flags accepted but ignored.

    Accepts plain flags (``--log-level=debug --shutdown-grace 10``) or the environment-file
    form ``EXTRA_OPTIONS="..."``. Comment lines (``#``) and blank lines are ignored.
    """
    if len(text.encode()) > MAX_EXTRA_OPTIONS_BYTES:
        raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY}: {len(text.encode())} bytes, over the limit of "
                                f"{MAX_EXTRA_OPTIONS_BYTES}")
    parser = parser or resmgr_parser()
    result = _translate(_split_lines(text), known_flags(parser))
    # Let cri-resmgr's parser check values (types, choices) and stray positional words.
    try:
        parser.parse_args(result.tokens)
    except ExtraOptionsError as exc:
        raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY}: {exc}") from exc
    except SystemExit as exc:  # argparse paths that exit directly
        raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY}: rejected by cri-resmgr's argument parser") from exc
    return result


def parse_extra_options(text: str, parser: argparse.ArgumentParser | None = None) -> list[str]:
    """The flags cri-resmgr gets from EXTRA_OPTIONS; ignored upstream flags are logged as a warning."""
    result = check_extra_options(text, parser)
    if result.ignored:
        log.warning("%s", result.summary(), extra={"ignored_flags": result.ignored})
    return result.tokens
