"""Static config from the ConfigMap: configs validated by resmgr.config, EXTRA_OPTIONS by cri-resmgr's parser."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.config_bombs import BOMBS

from installer import node_files
from installer.static_config import StaticConfigError, read_config_dir

GOOD_CFG = b"policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 750m\n"


def write_dir(tmp_path: Path, **keys: bytes | str) -> Path:
    d = tmp_path / "cfg"
    d.mkdir(parents=True)
    for key, value in keys.items():
        name = key.replace("_cfg", ".cfg")
        (d / name).write_bytes(value if isinstance(value, bytes) else value.encode())
    return d


def test_missing_dir_means_no_static_config(tmp_path: Path) -> None:
    static = read_config_dir(tmp_path / "absent")
    assert static.fallback is None and static.force is None and static.extra_options == []
    assert node_files.config_options(static) == []


def test_fallback_and_force(tmp_path: Path) -> None:
    static = read_config_dir(write_dir(tmp_path, fallback_cfg=GOOD_CFG, EXTRA_OPTIONS="--workers=4"))
    assert static.fallback == GOOD_CFG and static.force is None
    assert node_files.config_options(static) == ["--fallback-config=/etc/cri-resmgr/fallback.cfg"]
    files = node_files.desired_config_files(static, node_files.UnitSettings("unix:///run/c.sock"))
    assert files["/etc/cri-resmgr/fallback.cfg"] == GOOD_CFG
    assert b'EXTRA_OPTIONS="--workers=4"' in files["/etc/cri-resmgr/extra-options.env"]
    assert b"--runtime-socket=unix:///run/c.sock" in files["/etc/default/cri-resource-manager"]
    # The agent's sockets (its API, the Config API, the /metrics it forwards to vpn-shoot) lie in the one
    # directory the agent mounts.
    for flag in ("--config-socket=/var/run/cri-resmgr/agent/cri-resmgr-config.sock",
                 "--agent-socket=/var/run/cri-resmgr/agent/cri-resmgr-agent.sock",
                 "--metrics-socket=/var/run/cri-resmgr/agent/cri-resmgr-metrics.sock"):
        assert flag.encode() in files["/etc/default/cri-resource-manager"]
    # force.cfg wins over fallback.cfg and replaces the flag.
    static = read_config_dir(write_dir(tmp_path / "2", fallback_cfg=GOOD_CFG, force_cfg=GOOD_CFG))
    assert static.force == GOOD_CFG and static.fallback is None
    assert node_files.config_options(static) == ["--force-config=/etc/cri-resmgr/force.cfg"]


def test_unit_is_ordered_after_containerd_before_kubelet_and_restarts_on_failure() -> None:
    unit = node_files.render_unit(node_files.UnitSettings("unix:///run/c.sock")).decode()
    for line in ("After=containerd.service", "Before=kubelet.service", "Restart=on-failure",
                 "ExecStart=/opt/cri-resmgr/bin/cri-resmgr $CONFIG_OPTIONS $RELAY_OPTIONS $EXTRA_OPTIONS",
                 "EnvironmentFile=/etc/default/cri-resource-manager",
                 "EnvironmentFile=-/etc/cri-resmgr/extra-options.env", "WantedBy=multi-user.target",
                 "NoNewPrivileges=yes", "ProtectSystem=strict", "StateDirectory=cri-resmgr",
                 "RuntimeDirectory=cri-resmgr", "ExecStartPre=+/bin/mkdir -p /var/run/cri-resmgr/agent",
                 "ExecStartPre=+/bin/chgrp 65532 /var/run/cri-resmgr/agent",
                 "ExecStartPre=+/bin/chmod 2770 /var/run/cri-resmgr/agent", "MemoryMax=512M", "TasksMax=512",
                 "Environment=TMPDIR=/var/lib/cri-resmgr/tmp"):
        assert line in unit.splitlines()


@pytest.mark.parametrize("keys,message", [
    ({"fallback_cfg": "policy: [unclosed"}, "fallback.cfg: "),
    ({"force_cfg": "policy:\n  Active: no-such-policy\n"}, "force.cfg: .*policy.Active"),
    ({"fallback_cfg": b"\xff\xfe"}, "fallback.cfg: not UTF-8"),
    ({"fallback_cfg": "a" * (1024 * 1024 + 1)}, "fallback.cfg: .*over the limit"),
    ({"unknown.key": "x"}, "unknown key\\(s\\) unknown.key"),
    ({"EXTRA_OPTIONS": "--nope"}, "EXTRA_OPTIONS: unknown cri-resmgr flag"),
    *[({"fallback_cfg": text}, "fallback.cfg: .*" + message) for text, message in BOMBS.values()],
])
def test_bad_config_dir_is_rejected_naming_the_key(tmp_path: Path, keys: dict, message: str) -> None:
    with pytest.raises(StaticConfigError, match=message):
        read_config_dir(write_dir(tmp_path, **keys))


def test_configmap_volume_layout_is_understood(tmp_path: Path) -> None:
    # kubelet mounts ConfigMaps as ..data/<key> plus key -> ..data/<key> symlinks.
    d = tmp_path / "cm"
    (d / "..2026_11_22").mkdir(parents=True)
    (d / "..2026_11_22" / "fallback.cfg").write_bytes(GOOD_CFG)
    (d / "..data").symlink_to("..2026_11_22")
    (d / "fallback.cfg").symlink_to("..data/fallback.cfg")
    assert read_config_dir(d).fallback == GOOD_CFG


def test_unknown_config_field_is_installed_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Upstream ignores an unknown key, so the node is installed; the installer's log names the key and the
    closest known one (the file is written as given, cri-resmgr leaves the key out and says so again)."""
    import logging

    text = GOOD_CFG + b"  Activ: static\n"
    with caplog.at_level(logging.WARNING):
        static = read_config_dir(write_dir(tmp_path, fallback_cfg=text))
    assert static.fallback == text
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "config from fallback.cfg: unknown field, left out of the config: policy.Activ (did you mean 'Active'?)"]
