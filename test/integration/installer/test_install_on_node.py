"""cri-resmgr-installer on a real systemd node (systemd-nspawn) with containerd and each kubelet layout."""

from __future__ import annotations

import pytest
from integration.installer.installer_node import LAYOUTS
from integration.installer.node_checks import (
    crictl_via_relay,
    unit_loaded,
    unit_state,
    wait_kubelet_on_relay,
    wait_kubelet_on_runtime,
)

from devland.node_checks import snapshot
from installer import release

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_install_twice_then_uninstall_restores_everything(installer_node, tools, layout: str) -> None:
    n = installer_node(layout)
    node = n.node
    before = snapshot(node)

    n.install()
    assert unit_state(node) == "active"
    version = crictl_via_relay(tools.crictl, node, "version")
    assert version.returncode == 0 and "RuntimeName:  containerd" in version.stdout, version.stderr
    pods = crictl_via_relay(tools.crictl, node, "pods", "-q")
    assert pods.returncode == 0, pods.stderr
    wait_kubelet_on_relay(node)
    # It serves under the hardened unit: read-only system, bounded memory and tasks, its own TMPDIR.
    props = dict(line.split("=", 1) for line in node.systemctl(
        "show", "cri-resource-manager", "-p", "NoNewPrivileges,ProtectSystem,MemoryMax,TasksMax,MainPID",
        check=False).stdout.splitlines() if "=" in line)
    assert (props["NoNewPrivileges"], props["ProtectSystem"]) == ("yes", "strict"), props
    assert (props["MemoryMax"], props["TasksMax"]) == (str(512 * 1024 * 1024), "512"), props
    environ = node.run(["cat", f"/proc/{props['MainPID']}/environ"]).stdout.split("\0")
    assert "TMPDIR=/var/lib/cri-resmgr/tmp" in environ
    # The agent's socket directory: setgid, its group's, closed to others; the relay's sockets for the agent
    # are in it with that group, the CRI socket is not.
    def stat(path: str) -> str:
        return node.run(["stat", "-c", "%a %g %F", path]).stdout.strip()
    assert stat("/var/run/cri-resmgr/agent") == "2770 65532 directory"
    agent_dir = node.run(["ls", "/var/run/cri-resmgr/agent"]).stdout.split()
    assert "cri-resmgr-config.sock" in agent_dir and "cri-resmgr-metrics.sock" in agent_dir, agent_dir
    assert stat("/var/run/cri-resmgr/agent/cri-resmgr-config.sock") == "660 65532 socket"
    assert stat("/var/run/cri-resmgr/cri-resmgr.sock").endswith(" 0 socket")
    installed = snapshot(node)
    # The program is a release named by its digest; the stable path the unit runs is a symlink to it.
    digest = release.manifest_of(n.binary).digest
    assert installed["/opt/cri-resmgr/bin/cri-resmgr"] == f"-> /opt/cri-resmgr/releases/{digest}/cri-resmgr"
    assert installed[f"/opt/cri-resmgr/releases/{digest}/cri-resmgr"] == n.binary.read_bytes()
    assert [p for p in installed if p.startswith("/opt/cri-resmgr/releases/")] == [
        f"/opt/cri-resmgr/releases/{digest}/cri-resmgr"]
    assert b"--metrics-address=off" in installed["/etc/cri-resmgr/extra-options.env"]

    second = n.install()
    assert snapshot(node) == installed
    assert "not restarting it" in second.stderr and "kubelet already runs against the relay" in second.stderr
    assert "install complete: 0 change(s)" in second.stderr

    n.uninstall()
    wait_kubelet_on_runtime(node)
    assert not unit_loaded(node)
    after = snapshot(node)
    assert after.keys() == before.keys(), (sorted(after.keys() - before.keys()), sorted(before.keys() - after.keys()))
    for path in LAYOUTS[layout].files:
        assert after[path] == before[path], f"{path} not restored byte for byte"
    assert after == before
    # Uninstall again on a clean node is a no-op that still succeeds.
    assert "nothing to uninstall" in n.uninstall().stderr
