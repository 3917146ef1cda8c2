"""Safe upgrades of the relay's executable: try the new one before it replaces the live one, roll back if it fails.

A new cri-resmgr first serves CRI Version on a socket of its own (a transient systemd unit with the
relay's environment, policy ``none``, a private state directory, no agent, no metrics), while the
live relay keeps serving kubelet. Only an executable that passed replaces the live one. If the
restarted relay then does not serve, the previous executable (kept under the state directory) goes
back and is restarted, and the refused executable's checksum is recorded, so that later runs do not
restart the node's relay over and over with it: the installer pod stays not ready with the reason,
which stops the DaemonSet's rollout on the first node.

Everything here lives under the relay's state and runtime directories, which uninstall removes.
"""

from __future__ import annotations

import logging
import os

from installer import node_files, systemd
from installer.cri_check import CriUnavailable, wait_cri
from installer.host import Host, HostCommandError
from resmgr.rpc.sockets import endpoint_path

log = logging.getLogger("installer.upgrade")

UPGRADE_DIR = f"{node_files.RELAY_STATE_DIR}/upgrade"
# The shipped executable is multi-call and picks its program by its own file name, so a copy keeps
# the name cri-resmgr (in a directory of its own); "cri-resmgr.new" would not be cri-resmgr at all.
STAGED_BINARY = f"{UPGRADE_DIR}/new/{os.path.basename(node_files.BINARY)}"
PREVIOUS_BINARY = f"{UPGRADE_DIR}/previous/{os.path.basename(node_files.BINARY)}"
TRIAL_STATE_DIR = f"{UPGRADE_DIR}/trial"
TRIAL_TMP_DIR = f"{UPGRADE_DIR}/tmp"
TRIAL_CONFIG = f"{UPGRADE_DIR}/trial.cfg"
TRIAL_RUN_DIR = f"{node_files.RELAY_RUNTIME_DIR}/trial"
TRIAL_UNIT = "cri-resmgr-trial.service"
# The journal key: the checksum of an executable that passed its trial but did not serve as the live relay.
REFUSED_SHA = "upgrade_refused_sha256"
# The journal key: an executable that replaced a kept previous one and has not served yet (rollback target).
VERIFYING_SHA = "upgrade_verifying_sha256"


class UpgradeRefused(RuntimeError):
    """The new executable is not taken; the live relay keeps running the old one. str() says why."""


def trial_argv(binary: str, runtime_endpoint: str) -> list[str]:
    """The command line of a trial: everything the relay writes goes to the trial's own paths."""
    run = TRIAL_RUN_DIR
    return [binary, "--relay-socket", f"{run}/relay.sock", "--runtime-socket", endpoint_path(runtime_endpoint),
            "--config-socket", f"{run}/config.sock", "--agent-socket", f"{run}/agent.sock", "--disable-agent",
            "--relay-dir", TRIAL_STATE_DIR, "--pid-file", f"{run}/cri-resmgr.pid", "--metrics-address", "off",
            "--force-config", TRIAL_CONFIG]


def run_trial(host: Host, binary: str, runtime_endpoint: str, timeout_s: float = 30.0) -> str:
    """Start ``binary`` as a trial relay and wait for CRI Version through it; returns the version it answered.

    Raises UpgradeRefused when it does not serve within the bound. The trial is always stopped and its
    directories removed.
    """
    _clean_trial(host)
    for d in (TRIAL_STATE_DIR, TRIAL_TMP_DIR, TRIAL_RUN_DIR):
        host.makedirs(d, mode=0o700)
    # Policy none: the trial must not place, or update, any container the live relay manages.
    host.write_atomic(TRIAL_CONFIG, b"policy:\n  Active: none\n", mode=0o600)
    argv = ["systemd-run", f"--unit={TRIAL_UNIT}", "--collect", "--quiet", "--property=TimeoutStopSec=5",
            f"--setenv=TMPDIR={TRIAL_TMP_DIR}", *trial_argv(binary, runtime_endpoint)]
    log.info("trying the new cri-resmgr on a socket of its own before it replaces the live one",
             extra={"unit": TRIAL_UNIT, "binary": binary})
    try:
        host.run(argv, timeout=30)
        version = wait_cri(host, f"unix://{TRIAL_RUN_DIR}/relay.sock", timeout_s,
                           give_up=lambda: _trial_gone(host))
    except (CriUnavailable, HostCommandError) as exc:
        raise UpgradeRefused(f"the new cri-resmgr failed its trial, so it does not replace the running one: "
                             f"{exc}{_trial_log(host)}") from exc
    finally:
        _clean_trial(host)
    log.info("the new cri-resmgr passed its trial: %s", version, extra={"unit": TRIAL_UNIT})
    return version


def keep_previous(host: Host) -> bool:
    """Copy the live executable aside for a rollback; False if there is none to keep."""
    if not host.exists(node_files.BINARY):
        return False
    sha = host.file_sha256(node_files.BINARY)
    assert sha is not None
    host.makedirs(os.path.dirname(PREVIOUS_BINARY), mode=0o700)
    host.copy_atomic(host.path(node_files.BINARY), PREVIOUS_BINARY, sha, mode=0o755)
    return True


def _trial_gone(host: Host) -> str | None:
    state = systemd.is_active(host, TRIAL_UNIT)
    return None if state in ("active", "activating") else f"the trial exited ({TRIAL_UNIT} is {state})"


def _trial_log(host: Host) -> str:
    try:
        out = host.run(["journalctl", "--no-pager", "-q", "-n", "5", "-o", "cat", "-u", TRIAL_UNIT],
                       check=False, timeout=10).stdout.strip()
    except HostCommandError:
        return ""
    return f"; its last lines: {out[-800:]}" if out else ""


def _clean_trial(host: Host) -> None:
    host.run(["systemctl", "stop", TRIAL_UNIT], check=False, timeout=30)
    host.run(["systemctl", "reset-failed", TRIAL_UNIT], check=False, timeout=30)
    for d in (TRIAL_STATE_DIR, TRIAL_TMP_DIR, TRIAL_RUN_DIR):
        host.remove_tree(d)
    host.remove(TRIAL_CONFIG)
