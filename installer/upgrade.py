"""Safe upgrades of the relay's executable: try the new one before it replaces the live one, roll back if it fails.

A new cri-resmgr first serves CRI Version on a socket of its own (a transient systemd unit with the
relay's environment, policy ``none``, a private state directory, no agent, no metrics), while the
live relay keeps serving kubelet. Only an executable that passed replaces the live one. If the
restarted relay then does not serve, the stable path is switched back to the previous release (kept
under installer.release.RELEASES_DIR) and restarted, and the refused release's digest is recorded, so
that later runs do not restart the node's relay over and over with it: the installer pod stays not
ready with the reason, which stops the DaemonSet's rollout on the first node.

The trial's files live under the relay's state and runtime directories, which uninstall removes.
"""

from __future__ import annotations

import logging

from installer import node_files, systemd
from installer.cri_check import CriUnavailable, wait_cri
from installer.host import Host, HostCommandError
from resmgr.rpc.sockets import endpoint_path

log = logging.getLogger("installer.upgrade")

UPGRADE_DIR = f"{node_files.RELAY_STATE_DIR}/upgrade"
TRIAL_STATE_DIR = f"{UPGRADE_DIR}/trial"
TRIAL_TMP_DIR = f"{UPGRADE_DIR}/tmp"
TRIAL_CONFIG = f"{UPGRADE_DIR}/trial.cfg"
TRIAL_RUN_DIR = f"{node_files.RELAY_RUNTIME_DIR}/trial"
TRIAL_UNIT = "cri-resmgr-trial.service"
# The journal key: the digest of a release that passed its trial but did not serve as the live relay.
REFUSED_SHA = "upgrade_refused_sha256"
# The journal key: the release that was live before the last upgrade, kept (the only one) for a rollback.
PREVIOUS_RELEASE = "upgrade_previous_release"
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
    host.rmdir_if_empty(UPGRADE_DIR)  # holds only the trial's files now (releases keep the executables)
