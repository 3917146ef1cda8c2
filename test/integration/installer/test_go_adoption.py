"""A node left as the Go gardener-extension-cri-resmgr's installation leaves it is taken over.

The fixture reproduces the Go setup's end state on a real systemd node (gardener-node-agent's
kubelet layout): its relay runs from /opt/intel/bin as cri-resource-manager.service with its
/etc/default and /etc/cri-resmgr files, and kubelet.service has lost every line mentioning
containerd and gained the relay endpoint after $KUBELET_EXTRA_ARGS, so kubelet runs on that relay.
"""

from __future__ import annotations

import time

import pytest
from integration.installer.node_checks import (
    kubelet_endpoint,
    kubelet_log,
    wait_kubelet_on_relay,
    wait_kubelet_on_runtime,
)

from installer import node_files

pytestmark = pytest.mark.integration

GO_UNIT = """[Unit]
Description=A CRI proxy with (hardware) resource aware container placement policies.
After=network.target
Before=kubelet.service
[Service]
Type=simple
EnvironmentFile=/etc/default/cri-resource-manager
EnvironmentFile=/etc/cri-resmgr/EXTRA_OPTIONS.cfg
ExecStart=/opt/intel/bin/cri-resmgr $CONFIG_OPTIONS $POLICY_OPTIONS $EXTRA_OPTIONS
Restart=always
[Install]
WantedBy=multi-user.target
"""
GO_DEFAULT = 'POLICY_OPTIONS=""\nCONFIG_OPTIONS="--fallback-config /etc/cri-resmgr/fallback.cfg"\n'
GO_RELAY = "/var/run/cri-resmgr/cri-resmgr.sock"


def go_kubelet_unit(text: str) -> str:
    """What the Go setup does to kubelet.service: drop lines mentioning containerd, add its endpoint last."""
    out = []
    for line in text.splitlines():
        if "containerd" in line:
            continue
        if line.endswith("$KUBELET_EXTRA_ARGS"):
            out += [line + " \\", f"    --container-runtime-endpoint={GO_RELAY}\\"]
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def wait_kubelet_run(node, runs: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while kubelet_log(node).count("kubelet-standin: runtime endpoint") <= runs or not kubelet_endpoint(node)[1]:
        assert time.monotonic() < deadline, f"kubelet did not restart and connect: {kubelet_endpoint(node)}"
        time.sleep(0.2)


def test_node_from_the_go_extension_is_adopted_and_cleaned_on_uninstall(installer_node) -> None:
    n = installer_node("gardener")
    node = n.node
    kubelet_unit = "/etc/systemd/system/kubelet.service"
    original = node.read_file(kubelet_unit).decode()

    # The Go extension's installation.
    node.write_file("/opt/intel/bin/cri-resmgr", n.binary.read_bytes(), mode=0o755)
    node.write_file("/etc/systemd/system/cri-resource-manager.service", GO_UNIT)
    node.write_file("/etc/default/cri-resource-manager", GO_DEFAULT)
    node.write_file("/etc/cri-resmgr/fallback.cfg", "policy:\n  Active: none\n")
    node.write_file("/etc/cri-resmgr/EXTRA_OPTIONS.cfg", 'EXTRA_OPTIONS="--metrics-address=off"\n')
    node.write_file(kubelet_unit, go_kubelet_unit(original))
    node.systemctl("daemon-reload")
    node.systemctl("enable", "--now", "cri-resource-manager")
    deadline = time.monotonic() + 60
    while not node.exists(GO_RELAY):
        assert time.monotonic() < deadline, node.run("journalctl -u cri-resource-manager -n 20", check=False).stdout
        time.sleep(0.2)
    runs = kubelet_log(node).count("kubelet-standin: runtime endpoint")
    node.systemctl("restart", "kubelet")
    wait_kubelet_run(node, runs)
    assert kubelet_endpoint(node) == (GO_RELAY, True)  # on the Go relay (its flag has no unix://)

    install = n.install()
    assert "set up by the Go gardener-extension-cri-resmgr: adopting it" in install.stderr
    wait_kubelet_on_relay(node)  # now on ours
    unit = node.read_file(node_files.UNIT_FILE).decode()
    assert f"ExecStart={node_files.BINARY} " in unit and "/opt/intel" not in unit
    for leftover in ("/opt/intel", "/etc/cri-resmgr/EXTRA_OPTIONS.cfg"):
        assert not node.exists(leftover), leftover
    assert GO_RELAY not in node.read_file(kubelet_unit).decode()

    n.uninstall()
    wait_kubelet_on_runtime(node)
    for leftover in ("/opt/intel", "/etc/cri-resmgr", "/etc/default/cri-resource-manager",
                     "/etc/systemd/system/cri-resource-manager.service", "/var/lib/cri-resmgr"):
        assert not node.exists(leftover), leftover
    restored = node.read_file(kubelet_unit).decode()
    assert "cri-resmgr" not in restored and "After=containerd.service" in restored
    assert "--container-runtime-endpoint=unix:///run/containerd/containerd.sock \\" in restored
    # Apart from where After= sits, kubelet.service is what it was before the Go extension came.
    assert sorted(restored.splitlines()) == sorted(original.splitlines())
