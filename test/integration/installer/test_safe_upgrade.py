"""Safe upgrades on a real systemd node: a new cri-resmgr is tried before it replaces the live one, and rolled back."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal

import pytest
from integration.installer.installer_node import wait_for
from integration.installer.node_checks import kubelet_on_relay, kubelet_on_runtime, unit_state, wait_kubelet_on_relay

from devland.node_checks import snapshot
from installer import node_files, release, upgrade
from installer.failpoints import ENV as FAILPOINT_ENV
from installer.failpoints import MIGRATION_FAILPOINTS
from installer.host import Host, sha256_file

pytestmark = pytest.mark.integration


def _main_pid(node) -> int:
    return int(node.systemctl("show", "-p", "MainPID", "--value", node_files.UNIT).stdout.strip())


def _node_sha(node) -> str:
    return hashlib.sha256(node.read_file(node_files.BINARY)).hexdigest()


def _host(node) -> Host:
    return Host(root=node.root, runner=None)  # only its file side is used here


def _releases(node) -> list[str]:
    top = node.path(release.RELEASES_DIR)
    return sorted(os.listdir(top)) if top.exists() else []


STATE_FILE = "/var/lib/cri-resmgr-installer/state.json"


def _as_one_file_node(n, content: str) -> str:
    """Turn an installed node into what the one-file version left: the executable itself at the stable path,
    journaled as a file the installer created, no releases. Returns that executable's sha256."""
    node = n.node
    os.unlink(node.path(os.path.dirname(node_files.BINARY)) / os.path.basename(node_files.BINARY))
    node.write_file(node_files.BINARY, content, mode=0o755)
    shutil.rmtree(node.path(release.RELEASES_DIR))
    sha = sha256_file(node.path(node_files.BINARY))
    state = json.loads(node.read_file(STATE_FILE))
    state["files"][node_files.BINARY] = {"path": node_files.BINARY, "group": "resmgr", "existed": False,
                                         "orig_sha256": None, "orig_mode": None, "backup": None, "ours": [sha]}
    state["dirs"] = [d for d in state["dirs"] if d != release.RELEASES_DIR]
    state["data"].pop(upgrade.PREVIOUS_RELEASE, None)
    node.write_file(STATE_FILE, json.dumps(state), mode=0o600)
    node.systemctl("restart", node_files.UNIT)
    wait_for(lambda: unit_state(node) == "active", "the relay running the one-file executable")
    return sha


def test_a_binary_that_does_not_start_never_replaces_the_live_relay(installer_node) -> None:
    n = installer_node("gardener")
    n.install()
    good = n.binary.read_text()
    live_sha, live_pid = _node_sha(n.node), _main_pid(n.node)

    n.binary.write_text("#!/bin/sh\necho 'broken release' >&2\nexit 1\n")
    r = n.install(expect_rc=1)
    assert "failed its trial" in r.stderr and "broken release" in r.stderr, r.stderr[-2000:]
    # Nothing of the live relay was touched: same executable, same process, kubelet still on it.
    assert _node_sha(n.node) == live_sha
    assert _main_pid(n.node) == live_pid and unit_state(n.node) == "active"
    assert kubelet_on_relay(n.node)
    assert not n.node.exists(upgrade.TRIAL_RUN_DIR)
    assert _releases(n.node) == [release.current(_host(n.node), node_files.BINARY)]  # the refused one is gone
    assert n.node.systemctl("is-active", upgrade.TRIAL_UNIT, check=False).stdout.strip() != "active"

    # A fixed release goes in (a new executable: its trial passes, the live relay restarts on it).
    n.binary.write_text(good.replace("exec ", "# fixed release\nexec ", 1))
    n.install()
    assert _node_sha(n.node) == hashlib.sha256(n.binary.read_bytes()).hexdigest()
    assert _main_pid(n.node) != live_pid
    wait_kubelet_on_relay(n.node)


def test_an_upgrade_that_passes_its_trial_but_does_not_serve_is_rolled_back(installer_node) -> None:
    n = installer_node("gardener")
    clean = snapshot(n.node)
    n.install()
    good_sha = _node_sha(n.node)
    # This release serves on the trial's socket but exits when started as the live relay.
    n.binary.write_text(n.binary.read_text().replace(
        "exec ", '\ncase "$*" in *trial/relay.sock*) ;; *) echo "live start refused" >&2; exit 1 ;; esac\nexec ', 1))
    bad_sha = hashlib.sha256(n.binary.read_bytes()).hexdigest()
    r = n.install(expect_rc=1)
    assert "rolled back to the previous one" in r.stderr, r.stderr[-2000:]
    assert _node_sha(n.node) == good_sha
    assert unit_state(n.node) == "active"
    # The failed start left the relay down for up to relay_wait_s; the kubelet stand-in exits after a few
    # failed checks and its restart goes through the guard, which puts it on containerd. Either way the
    # node works (the supervising installer repoints kubelet once the relay serves again). Kubelet may
    # still be restarting when the installer returns, so wait for it to settle on one of the two.
    wait_for(lambda: kubelet_on_relay(n.node) or (n.node.exists(node_files.KUBELET_GUARD_MARKER)
                                                  and kubelet_on_runtime(n.node)),
             "kubelet running on the relay, or through the guard on containerd", timeout=60)

    # The same executable is not tried again: no restart of the node's relay.
    pid = _main_pid(n.node)
    r = n.install(expect_rc=1)
    assert "not trying it again" in r.stderr, r.stderr[-2000:]
    assert _main_pid(n.node) == pid and _node_sha(n.node) != bad_sha
    # The live release is the only one left: the refused one is removed, nothing older is kept.
    assert _releases(n.node) == [release.current(_host(n.node), node_files.BINARY)]

    # Uninstall removes every release and the symlink.
    n.uninstall()
    assert snapshot(n.node) == clean


def test_a_one_file_node_moves_to_releases_and_can_roll_back_to_its_one_file(installer_node) -> None:
    n = installer_node("gardener")
    clean = snapshot(n.node)
    n.install()
    wait_kubelet_on_relay(n.node)
    good = n.binary.read_text()
    one_file = good.replace("exec ", "# the one-file version\nexec ", 1)
    one_file_sha = _as_one_file_node(n, one_file)
    one_file_release = release.manifest_of(n.node.path(node_files.BINARY)).digest

    # An upgrade that passes its trial but does not serve as the live relay goes back to the one-file executable,
    # now a release of one file.
    n.binary.write_text(good.replace(
        "exec ", '\ncase "$*" in *trial/relay.sock*) ;; *) echo "live start refused" >&2; exit 1 ;; esac\nexec ', 1))
    r = n.install(expect_rc=1)
    assert "rolled back to the previous one" in r.stderr, r.stderr[-2000:]
    assert release.current(_host(n.node), node_files.BINARY) == one_file_release
    assert _node_sha(n.node) == one_file_sha and _releases(n.node) == [one_file_release]
    assert node_files.BINARY not in json.loads(n.node.read_file(STATE_FILE))["files"]
    wait_for(lambda: unit_state(n.node) == "active", "the relay back on the one-file executable")

    # A good release replaces it; the one-file release stays as the one previous release.
    n.binary.write_text(good)
    n.install()
    new = release.manifest_of(n.binary).digest
    assert release.current(_host(n.node), node_files.BINARY) == new
    assert _releases(n.node) == sorted([new, one_file_release])
    wait_kubelet_on_relay(n.node)

    n.uninstall()
    assert snapshot(n.node) == clean


@pytest.mark.parametrize("point", MIGRATION_FAILPOINTS)
def test_a_one_file_node_killed_while_moving_to_releases_converges(installer_node, point) -> None:
    n = installer_node("gardener")
    clean = snapshot(n.node)
    n.install()
    reference = snapshot(n.node)
    _as_one_file_node(n, n.binary.read_text().replace("exec ", "# the one-file version\nexec ", 1))
    crashed = n.install(env={FAILPOINT_ENV: point}, expect_rc=-signal.SIGKILL)
    assert f"failpoint {point} reached" in crashed.stderr
    n.install()
    # Converged on the shipped release; the adopted one-file release is the one previous release.
    converged = snapshot(n.node)
    extra = sorted(converged.keys() - reference.keys())
    assert len(extra) == 1 and extra[0].startswith(release.RELEASES_DIR + "/"), extra
    assert [p for p in reference if converged.get(p) != reference[p]] == [STATE_FILE]
    wait_kubelet_on_relay(n.node)
    n.uninstall()
    assert snapshot(n.node) == clean
