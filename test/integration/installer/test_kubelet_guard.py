"""A relay that cannot start never keeps kubelet from running: the guard before kubelet's start.

On a real systemd node, per kubelet layout: with kubelet pointed at the relay, the relay's
binary is broken (it exits 1, as a bad release would) and kubelet is started again, as at boot.
No installer runs meanwhile, as at boot. The guard must start kubelet on containerd; once the
relay is fixed the installer points kubelet at it again, and uninstall still restores every file.
"""

from __future__ import annotations

import time

import pytest
from integration.installer.installer_node import LAYOUTS
from integration.installer.node_checks import (
    kubelet_endpoint,
    kubelet_log,
    wait_kubelet_on_relay,
    wait_kubelet_on_runtime,
)

from devland.node_checks import snapshot
from installer import node_files

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_kubelet_starts_on_the_runtime_when_the_relay_cannot(installer_node, layout: str) -> None:
    n = installer_node(layout)
    node = n.node
    before = snapshot(node)
    n.install()
    wait_kubelet_on_relay(node)

    node.write_file(node_files.BINARY, "#!/bin/sh\necho broken release >&2\nexit 1\n", mode=0o755)
    node.systemctl("restart", "cri-resource-manager", check=False)
    restart_kubelet(node)  # the guard runs first, as at every kubelet start
    wait_kubelet_on_runtime(node)
    assert node.exists(node_files.KUBELET_GUARD_MARKER)
    guard_log = node.run(["journalctl", "-u", "kubelet", "--no-pager", "-o", "cat"]).stdout
    assert "does not serve" in guard_log and "kubelet starts on" in guard_log

    # Fixed by a new rollout: the installer puts its binary back and points kubelet at the relay again.
    n.install()
    wait_kubelet_on_relay(node)
    restart_kubelet(node)  # a healthy relay: the guard lets kubelet be
    wait_kubelet_on_relay(node)
    assert not node.exists(node_files.KUBELET_GUARD_MARKER)

    n.uninstall()
    wait_kubelet_on_runtime(node)
    assert snapshot(node) == before


def restart_kubelet(node, timeout: float = 60) -> None:
    """Restart kubelet and wait until the new run has logged which endpoint it connected to."""
    runs = kubelet_log(node).count("kubelet-standin: runtime endpoint")
    node.run(["systemctl", "restart", "kubelet"], timeout=120)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = kubelet_log(node)
        if log.count("kubelet-standin: runtime endpoint") > runs and kubelet_endpoint(node)[1]:
            return
        time.sleep(0.2)
    raise AssertionError(f"kubelet's new run did not connect within {timeout}s: {kubelet_endpoint(node)}")
