"""A systemd-nspawn node boots to running and starts a unit written into it."""

from __future__ import annotations


def test_node_running_and_unit_starts(systemd_node):
    assert systemd_node.run(["systemctl", "is-system-running"], check=False).stdout.strip() in ("running",
                                                                                                  "degraded")
    systemd_node.write_file("/etc/systemd/system/smoke.service", """[Unit]
Description=smoke test unit

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'echo started > /run/smoke.out'
""")
    systemd_node.systemctl("daemon-reload")
    systemd_node.systemctl("start", "smoke.service")
    assert systemd_node.systemctl("is-active", "smoke.service").stdout.strip() == "active"
    assert systemd_node.read_file("/run/smoke.out") == b"started\n"


def test_overlay_keeps_base_rootfs_clean(systemd_node, node_rootfs):
    systemd_node.write_file("/etc/smoke-marker", "x")
    assert systemd_node.exists("/etc/smoke-marker")
    assert not (node_rootfs / "etc" / "smoke-marker").exists()
