"""Mode nri on a real systemd node (systemd-nspawn) that runs the relay: the installer takes the relay off without
a drain (kubelet back on containerd, the unit and its files gone) but keeps cri-resmgr's cache and makes the NRI
plugin's directories; an uninstall then leaves the node as it was before the relay came (docs/operations/
nri-mode-switch.md)."""

from __future__ import annotations

import pytest
from integration.installer.node_checks import unit_loaded, wait_kubelet_on_relay, wait_kubelet_on_runtime

from devland.node_checks import snapshot

pytestmark = pytest.mark.integration


def test_switch_to_nri_keeps_the_cache_and_uninstall_restores_the_node(installer_node) -> None:
    n = installer_node("gardener")
    node = n.node
    before = snapshot(node)
    n.install()
    wait_kubelet_on_relay(node)
    node.write_file("/var/lib/cri-resmgr/marker", "the relay's cache\n")

    r = n.install("--mode", "nri", expect_rc=None)
    assert "switching this node from the relay to NRI mode" in r.stderr, r.stderr[-3000:]
    assert "pointing kubelet back at" in r.stderr and "switch to NRI" in r.stderr
    wait_kubelet_on_runtime(node)
    assert not unit_loaded(node)
    assert not node.exists("/opt/cri-resmgr/bin/cri-resmgr")
    assert node.run(["cat", "/var/lib/cri-resmgr/marker"]).stdout == "the relay's cache\n"  # kept for the plugin
    assert node.run(["stat", "-c", "%a %g", "/var/run/cri-resmgr/agent"]).stdout.strip() == "2770 65532"
    nri_on = node.run(["test", "-S", "/var/run/nri/nri.sock"], check=False).returncode == 0
    # --once: 0 with containerd's NRI on, 1 (nri-unavailable, said how to turn it on) with it off.
    assert r.returncode == (0 if nri_on else 1), r.stderr[-3000:]
    if not nri_on:
        assert "containerd's NRI is off on this node" in r.stderr
    again = n.install("--mode", "nri", expect_rc=None)
    assert "switching this node" not in again.stderr  # idempotent: nothing of the relay is left

    n.uninstall()
    wait_kubelet_on_runtime(node)
    after = snapshot(node)
    assert after.keys() == before.keys(), (sorted(after.keys() - before.keys()), sorted(before.keys() - after.keys()))
    assert after == before
