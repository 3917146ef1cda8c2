"""One containerd unit serves the landscape's nodes and the installer's test nodes."""

from __future__ import annotations

from devland import node
from devland.systemd_node import containerd_unit


def test_the_landscape_runs_the_os_containerd_as_is():
    assert node.CONTAINERD_UNIT == containerd_unit()
    assert "\nExecStart=/usr/bin/containerd\n" in node.CONTAINERD_UNIT


def test_a_config_file_and_a_description():
    unit = containerd_unit("--config /etc/containerd/config.toml", description="containerd (test node)")
    assert unit.startswith("[Unit]\nDescription=containerd (test node)\nAfter=network.target\n")
    assert "\nExecStart=/usr/bin/containerd --config /etc/containerd/config.toml\n" in unit
    # what containerd needs under systemd: readiness by sd_notify, its own cgroup subtree, and shims that
    # outlive a restart of containerd
    for line in ("Type=notify", "Delegate=yes", "KillMode=process", "Restart=always", "LimitNOFILE=1048576"):
        assert f"\n{line}\n" in unit
    assert unit.endswith("[Install]\nWantedBy=multi-user.target\n")
