"""What the tests observe on the node, independently of the installer's own code."""

from __future__ import annotations

import re
import subprocess

from integration.installer.installer_node import RELAY_SOCKET, RUNTIME_ENDPOINT, kubelet_log, wait_for

RELAY_ENDPOINT = f"unix://{RELAY_SOCKET}"
UNIT = "cri-resource-manager.service"


def kubelet_endpoint(node) -> tuple[str, bool]:
    """(endpoint the kubelet stand-in's latest run uses, whether that run connected)."""
    lines = kubelet_log(node).splitlines()
    starts = [i for i, line in enumerate(lines) if "kubelet-standin: runtime endpoint" in line]
    if not starts:
        return "", False
    m = re.search(r"runtime endpoint (\S+)", lines[starts[-1]])
    endpoint = m.group(1) if m else ""
    connected = any(f"connected to {endpoint}:" in line for line in lines[starts[-1]:])
    return endpoint, connected


def kubelet_on(node, endpoint: str) -> bool:
    active = node.systemctl("is-active", "kubelet.service", check=False).stdout.strip() == "active"
    got, connected = kubelet_endpoint(node)
    return active and connected and got == endpoint


def kubelet_on_relay(node) -> bool:
    return kubelet_on(node, RELAY_ENDPOINT)


def kubelet_on_runtime(node) -> bool:
    return kubelet_on(node, RUNTIME_ENDPOINT)


def wait_kubelet_on(node, endpoint: str, timeout: float = 60.0) -> None:
    """Wait until kubelet's latest run has connected to ``endpoint``. The installer returns once kubelet's
    process runs with the new endpoint (its pid steady for a second); the stand-in logs its endpoint and its
    first connection only after its imports and one CRI Version, which on a loaded machine comes later, and
    until then its journal still shows the previous run."""
    try:
        wait_for(lambda: kubelet_on(node, endpoint), f"kubelet's latest run to connect to {endpoint}", timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; latest run: {kubelet_endpoint(node)}") from None


def wait_kubelet_on_relay(node) -> None:
    wait_kubelet_on(node, RELAY_ENDPOINT)


def wait_kubelet_on_runtime(node) -> None:
    wait_kubelet_on(node, RUNTIME_ENDPOINT)


def unit_state(node) -> str:
    return node.systemctl("show", UNIT, "--property=ActiveState", "--value", check=False).stdout.strip()


def unit_loaded(node) -> bool:
    return node.systemctl("show", UNIT, "--property=LoadState", "--value", check=False).stdout.strip() == "loaded"


def crictl_via_relay(crictl: str, node, *args: str) -> subprocess.CompletedProcess:
    sock = node.root / RELAY_SOCKET.replace("/var/run/", "run/")
    return subprocess.run([crictl, "--runtime-endpoint", f"unix://{sock}", "--image-endpoint", f"unix://{sock}",
                           "--timeout", "10s", *args], capture_output=True, text=True, timeout=60)
