"""What the installer puts on the node for cri-resmgr: paths, and the files rendered from templates."""

from __future__ import annotations

from dataclasses import dataclass

import jinja2

from installer.static_config import FALLBACK_KEY, FORCE_KEY, StaticConfig
from resmgr import __version__
from resmgr.options import (
    AGENT_DIR_AGENT_SOCKET,
    AGENT_DIR_CONFIG_SOCKET,
    AGENT_DIR_METRICS_SOCKET,
    AGENT_SOCKET_DIR,
    AGENT_SOCKET_GROUP,
    DEFAULT_RELAY_SOCKET,
    RELAY_ENVIRONMENT,
)

UNIT = "cri-resource-manager.service"
BINARY = "/opt/cri-resmgr/bin/cri-resmgr"
UNIT_FILE = f"/etc/systemd/system/{UNIT}"
DEFAULT_FILE = "/etc/default/cri-resource-manager"
CONFIG_DIR = "/etc/cri-resmgr"
FALLBACK_FILE = f"{CONFIG_DIR}/{FALLBACK_KEY}"
FORCE_FILE = f"{CONFIG_DIR}/{FORCE_KEY}"
EXTRA_OPTIONS_FILE = f"{CONFIG_DIR}/extra-options.env"
RELAY_SOCKET = DEFAULT_RELAY_SOCKET
RELAY_ENDPOINT = f"unix://{RELAY_SOCKET}"
RELAY_RUNTIME_DIR = "/var/run/cri-resmgr"
RELAY_STATE_DIR = "/var/lib/cri-resmgr"
RELAY_TMP_DIR = f"{RELAY_STATE_DIR}/tmp"  # the relay's TMPDIR (a writable temp dir under ProtectSystem=strict)
RUNTIME_UNIT = "containerd.service"
KUBELET_GUARD = "/opt/cri-resmgr/bin/kubelet-guard"
KUBELET_GUARD_DROPIN = "/etc/systemd/system/kubelet.service.d/90-cri-resmgr-guard.conf"
KUBELET_GUARD_MARKER = "/run/cri-resmgr/kubelet-guard-fallback"  # the guard fell back at the last kubelet start
KUBELET_GUARD_WAIT_S = 20

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("installer", "templates"),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,
)


@dataclass(frozen=True)
class UnitSettings:
    runtime_endpoint: str
    runtime_unit: str = RUNTIME_UNIT
    restart_sec: int = 2
    start_limit_interval_s: int = 60
    start_limit_burst: int = 10
    memory_max: str = "512M"  # systemd MemoryMax= of the relay
    tasks_max: int = 512  # systemd TasksMax=: two threads per client connection, plus workers


def render(template: str, **values: object) -> bytes:
    return _env.get_template(template).render(installer_version=__version__, **values).encode()


def render_unit(settings: UnitSettings) -> bytes:
    return render("cri-resource-manager.service.j2", binary=BINARY, default_file=DEFAULT_FILE,
                  extra_options_file=EXTRA_OPTIONS_FILE, runtime_unit=settings.runtime_unit,
                  restart_sec=settings.restart_sec, start_limit_interval_s=settings.start_limit_interval_s,
                  start_limit_burst=settings.start_limit_burst, tmp_dir=RELAY_TMP_DIR,
                  state_dir_name=RELAY_STATE_DIR.removeprefix("/var/lib/"),
                  runtime_dir_name=RELAY_RUNTIME_DIR.removeprefix("/var/run/"),
                  agent_dir=AGENT_SOCKET_DIR,
                  agent_socket_group=AGENT_SOCKET_GROUP, environment=RELAY_ENVIRONMENT,
                  memory_max=settings.memory_max, tasks_max=settings.tasks_max)


def config_options(static: StaticConfig) -> list[str]:
    if static.force is not None:
        return [f"--force-config={FORCE_FILE}"]
    if static.fallback is not None:
        return [f"--fallback-config={FALLBACK_FILE}"]
    return []


def render_default(static: StaticConfig, settings: UnitSettings) -> bytes:
    # The agent's sockets (its API, the Config API it pushes to, the /metrics it forwards to vpn-shoot) lie in
    # the one directory the agent mounts; the CRI socket stays outside it.
    relay = [f"--relay-socket={RELAY_SOCKET}", f"--runtime-socket={settings.runtime_endpoint}",
             f"--config-socket={AGENT_DIR_CONFIG_SOCKET}", f"--agent-socket={AGENT_DIR_AGENT_SOCKET}",
             f"--metrics-socket={AGENT_DIR_METRICS_SOCKET}"]
    return render("cri-resource-manager.default.j2", unit=UNIT, config_options=config_options(static),
                  relay_options=relay)


def render_extra_options(static: StaticConfig) -> bytes:
    return render("extra-options.env.j2", extra_options=static.extra_options)


def desired_config_files(static: StaticConfig, settings: UnitSettings) -> dict[str, bytes]:
    """Every small file of the cri-resmgr installation, by node path (the executable aside)."""
    files = {
        UNIT_FILE: render_unit(settings),
        DEFAULT_FILE: render_default(static, settings),
        EXTRA_OPTIONS_FILE: render_extra_options(static),
    }
    if static.force is not None:
        files[FORCE_FILE] = static.force
    elif static.fallback is not None:
        files[FALLBACK_FILE] = static.fallback
    return files


@dataclass(frozen=True)
class GuardedFile:
    """A kubelet file the installer changed: what the guard checks and restores."""

    path: str
    ours: str  # sha256 of the installer's content
    orig: str | None  # sha256 of the original (None: the installer created the file)
    backup: str | None
    mode: str  # octal, for chmod


def render_kubelet_guard(files: list[GuardedFile], runtime_endpoint: str,
                         wait_s: int = KUBELET_GUARD_WAIT_S) -> dict[str, bytes]:
    """The guard script and kubelet's drop-in that runs it, for the current repoint."""
    return {
        KUBELET_GUARD: render("kubelet-guard.sh.j2", files=files, runtime=runtime_endpoint, wait_s=wait_s,
                              unit=UNIT, socket=RELAY_SOCKET, marker=KUBELET_GUARD_MARKER,
                              dropin=KUBELET_GUARD_DROPIN),
        KUBELET_GUARD_DROPIN: render("kubelet-guard.conf.j2", guard=KUBELET_GUARD),
    }
