"""Adopting a node set up by the Go intel/gardener-extension-cri-resmgr.

Its installation script leaves: the binaries under ``/opt/intel``, the unit
``cri-resource-manager.service`` (``ExecStart=/opt/intel/bin/cri-resmgr ...``),
``/etc/default/cri-resource-manager``, ``/etc/cri-resmgr/{fallback,force,EXTRA_OPTIONS}.cfg`` and
the cache in ``/var/lib/cri-resmgr``. It points kubelet at the relay by deleting every line of
``kubelet.service`` that mentions containerd and adding
``--container-runtime-endpoint=/var/run/cri-resmgr/cri-resmgr.sock``; its own removal turns that
path back into ``unix:///run/containerd/containerd.sock`` and re-adds ``After=containerd.service``.

There is no journal of ours on such a node, so the installer first undoes the Go setup the way
the Go removal would (kubelet.service back on the runtime, its files gone), and then installs as
on a fresh node: uninstall later restores that kubelet.service and leaves no Go leftovers. The
Go relay keeps serving kubelet until our unit (same name) replaces it.
"""

from __future__ import annotations

import logging
import re
import shlex

from installer import systemd
from installer.host import Host

log = logging.getLogger("installer.go_adoption")

GO_BINARY = "/opt/intel/bin/cri-resmgr"
GO_UNIT_FILE = "/etc/systemd/system/cri-resource-manager.service"
GO_DEFAULT_FILE = "/etc/default/cri-resource-manager"
GO_DIRS = ("/opt/intel", "/etc/cri-resmgr", "/var/lib/cri-resmgr")
KUBELET_UNIT_FILE = "/etc/systemd/system/kubelet.service"
GO_RELAY_PATHS = ("unix:///var/run/cri-resmgr/cri-resmgr.sock", "/var/run/cri-resmgr/cri-resmgr.sock",
                  "unix:///run/cri-resmgr/cri-resmgr.sock", "/run/cri-resmgr/cri-resmgr.sock")
# What the Go removal writes back, and cri-resmgr's default --runtime-socket.
GO_RUNTIME_ENDPOINT = "unix:///run/containerd/containerd.sock"
_ENDPOINT_FLAG = re.compile(r"(--container-runtime-endpoint[= ])(\S+?)(\\?)$", re.MULTILINE)


def go_installation(host: Host) -> bool:
    """Whether the Go extension's installation is (still) on this node."""
    if host.exists(GO_BINARY):
        return True
    unit = host.read_if_exists(GO_UNIT_FILE)
    return unit is not None and b"/opt/intel/" in unit


def go_runtime_endpoint(host: Host) -> str:
    """The runtime the Go relay forwards to: its --runtime-socket, else cri-resmgr's default."""
    raw = host.read_if_exists(GO_DEFAULT_FILE)
    words: list[str] = []
    for line in (raw or b"").decode(errors="replace").splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            try:
                words += shlex.split(line.split("=", 1)[1])
            except ValueError:
                continue
    for i, word in enumerate(words):
        value = word.split("=", 1)[1] if word.startswith("--runtime-socket=") else (
            words[i + 1] if word == "--runtime-socket" and i + 1 < len(words) else "")
        if value:
            return value if "://" in value else f"unix://{value}"
    return GO_RUNTIME_ENDPOINT


def kubelet_unit_without_go(text: str, runtime_endpoint: str) -> str:
    """kubelet.service without the Go setup's edit, pointing at ``runtime_endpoint`` again.

    The Go script appends its endpoint line after ``... $KUBELET_EXTRA_ARGS``, where a flag would
    override kubelet's extra args (the last value wins). In gardener-node-agent's layout the
    endpoint goes back where node-agent writes it: its own line before that one. Any other shape
    gets what the Go removal writes: the relay path replaced in place. After=containerd.service,
    deleted by the Go script with every line that mentions containerd, comes back.
    """
    lines = text.split("\n")
    for i in range(1, len(lines)):
        m = re.fullmatch(r"\s*--container-runtime-endpoint[= ](\S+?)\\?\s*", lines[i])
        if m and m.group(1) in GO_RELAY_PATHS and lines[i - 1].rstrip().endswith("$KUBELET_EXTRA_ARGS \\"):
            indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
            extra_args_line = lines[i - 1].rstrip()[:-2].rstrip()
            lines[i - 1:i + 1] = [f"{indent}--container-runtime-endpoint={runtime_endpoint} \\", extra_args_line]
            text = "\n".join(lines)
            break
    else:
        def back(m: re.Match[str]) -> str:
            return m.group(1) + runtime_endpoint + m.group(3) if m.group(2) in GO_RELAY_PATHS else m.group(0)

        text = _ENDPOINT_FLAG.sub(back, text)
    if "After=containerd.service" not in text and "[Unit]" in text:
        text = text.replace("[Unit]\n", "[Unit]\nAfter=containerd.service\n", 1)
    return text


def adopt(host: Host) -> str:
    """Undo the Go setup as its removal would, keeping its relay serving; returns the runtime endpoint."""
    runtime = go_runtime_endpoint(host)
    log.warning("this node was set up by the Go gardener-extension-cri-resmgr: adopting it (its relay keeps "
                "serving kubelet until this installer's relay replaces it)", extra={"endpoint": runtime})
    raw = host.read_if_exists(KUBELET_UNIT_FILE)
    if raw is not None:
        text = raw.decode()
        fixed = kubelet_unit_without_go(text, runtime)
        if fixed != text:
            host.write_atomic(KUBELET_UNIT_FILE, fixed.encode(), host.mode(KUBELET_UNIT_FILE) or 0o644)
            log.info("kubelet.service points at %s again, as the Go removal would leave it", runtime,
                     extra={"path": KUBELET_UNIT_FILE, "change": "adopt"})
    for path in (GO_UNIT_FILE, GO_DEFAULT_FILE):
        if host.remove(path):
            log.info("removed the Go extension's %s", path, extra={"path": path, "change": "adopt"})
    for path in GO_DIRS:
        if host.remove_tree(path):
            log.info("removed the Go extension's %s", path, extra={"path": path, "change": "adopt"})
    systemd.daemon_reload(host)
    return runtime
