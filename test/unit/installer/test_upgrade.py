"""Safe-upgrade paths: the shipped executable is multi-call and picks its program by its file name."""

from __future__ import annotations

import os

from installer import node_files, release, upgrade


def test_the_staged_executable_keeps_its_name() -> None:
    # A staged copy named "cri-resmgr.new" ran the multi-call build's command list instead of the relay
    # (seen on the landscape: "unknown command '--relay-socket'"), so no upgrade could ever pass its trial.
    # The trial now runs the new release's executable, which keeps the stable path's name.
    name = os.path.basename(node_files.BINARY)
    assert os.path.basename(release.executable("0" * 64)) == name
    assert upgrade.trial_argv(release.executable("0" * 64), "unix:///run/containerd/containerd.sock")[0].endswith(
        "/" + name)


def test_everything_the_upgrade_keeps_lies_under_the_state_dirs_uninstall_removes() -> None:
    for path in (upgrade.TRIAL_STATE_DIR, upgrade.TRIAL_CONFIG):
        assert path.startswith(node_files.RELAY_STATE_DIR + "/")
    assert upgrade.TRIAL_RUN_DIR.startswith(node_files.RELAY_RUNTIME_DIR + "/")
