"""Install, repoint and uninstall: the steps, in order, each recorded in the journal first.

Every step is idempotent and a kill at any point converges on the next run, because:

* file changes follow the journal's write-ahead protocol (see installer.journal);
* "needs a daemon-reload / cri-resmgr restart / kubelet restart" is recorded as pending *before*
  the file that causes it is written, and cleared only after the action succeeded;
* kubelet is repointed only after the relay answers CRI Version, and its running command line
  is checked after every restart.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from installer import failpoints, go_adoption, node_files, release, systemd, upgrade
from installer.cpuset_restore import restore_cpusets
from installer.cri_check import CriUnavailable, cri_version, normalize_endpoint, wait_cri
from installer.host import Host, HostCommandError, sha256_bytes
from installer.journal import Journal
from installer.kubelet_endpoint import (
    KUBELET_UNIT,
    KubeletLayoutError,
    effective_endpoint,
    load_kubelet_unit,
    plan_repoint,
    running_endpoint,
)
from installer.static_config import StaticConfig
from resmgr.options import AGENT_DIR_CONFIG_SOCKET, AGENT_SOCKET_DIR, AGENT_SOCKET_GROUP

log = logging.getLogger("installer.install")

RESMGR = "resmgr"
KUBELET = "kubelet"
# Journal data keys.
RUNTIME_ENDPOINT = "runtime_endpoint"
KUBELET_LAYOUT = "kubelet_layout"
KUBELET_TARGET = "kubelet_target"
PHASE = "phase"
PENDING_RELOAD = "pending_daemon_reload"
ADOPTED_FROM = "adopted_from"  # set when the node came from the Go extension (see installer.go_adoption)
PENDING_RESMGR_RESTART = "pending_resmgr_restart"
PENDING_KUBELET_RESTART = "pending_kubelet_restart"
# Which front end this node runs: "relay" (the unit, kubelet repointed) or "nri" (the NRI plugin's pod; the
# installer only prepared its directories). Absent: the relay (journals of earlier versions).
FRONTEND = "frontend"
NRI_FRONTEND, RELAY_FRONTEND = "nri", "relay"


# The directories NRI mode needs on the node (switch_to_nri), kept by a switch from the relay.
NRI_DIRS = (node_files.RELAY_STATE_DIR, AGENT_SOCKET_DIR)


class InstallError(RuntimeError):
    """A step could not be completed; the node is left in a state a re-run converges from."""


@dataclass
class InstallSettings:
    binary: Path
    relay_wait_s: float = 30.0
    kubelet_wait_s: float = 60.0
    kubelet_settle_s: float = 1.0
    unit: node_files.UnitSettings | None = None  # runtime endpoint filled in from kubelet


@dataclass
class InstallReport:
    changed: list[str]
    resmgr_restarted: bool
    kubelet_restarted: bool
    kubelet_layout: str
    runtime_endpoint: str
    relay_version: str


class NodeInstaller:
    def __init__(self, host: Host, settings: InstallSettings) -> None:
        self.host = host
        self.settings = settings

    # ----- helpers ---------------------------------------------------------------------------
    def same_endpoint(self, a: str, b: str) -> bool:
        try:
            return normalize_endpoint(self.host, a) == normalize_endpoint(self.host, b)
        except ValueError:
            return a == b

    def journal(self) -> Journal:
        return Journal.load(self.host)

    def _kubelet_file_endpoint(self) -> str:
        unit = load_kubelet_unit(self.host)
        return effective_endpoint(unit, self.host.read_if_exists)[0]

    def kubelet_running_endpoint(self) -> tuple[str, int]:
        """(effective endpoint of the running kubelet process, its pid); ("", 0) if not running."""
        pid = systemd.main_pid(self.host, KUBELET_UNIT)
        if not pid:
            return "", 0
        argv = systemd.process_argv(self.host, pid)
        if not argv:
            return "", 0
        return running_endpoint(self.host, argv)[0], pid

    def _restart_kubelet_and_verify(self, journal: Journal, expected: str) -> None:
        systemd.reset_failed(self.host, KUBELET_UNIT)
        systemd.restart(self.host, KUBELET_UNIT)
        pid, state = systemd.wait_running(self.host, KUBELET_UNIT, self.settings.kubelet_wait_s,
                                          self.settings.kubelet_settle_s)
        if not pid:
            raise InstallError(f"kubelet did not stay active after the restart (ActiveState={state}); "
                               f"see journalctl -u {KUBELET_UNIT} on the node")
        got, _ = self.kubelet_running_endpoint()
        if not self.same_endpoint(got, expected):
            raise InstallError(f"kubelet restarted but its effective runtime endpoint is {got!r}, not {expected}")
        journal.set(PENDING_KUBELET_RESTART, False)
        log.info("kubelet is active and uses %s", expected,
                 extra={"unit": KUBELET_UNIT, "endpoint": expected, "pid": pid})

    # ----- install ---------------------------------------------------------------------------
    def learn_runtime_endpoint(self, journal: Journal) -> str:
        """The endpoint kubelet used before us: that is where the relay forwards to."""
        known = journal.get(RUNTIME_ENDPOINT)
        if known:
            return known
        current = self._kubelet_file_endpoint()
        if self.same_endpoint(current, node_files.RELAY_ENDPOINT) and go_adoption.go_installation(self.host):
            go_adoption.adopt(self.host)
            journal.set(ADOPTED_FROM, "go-extension")
            current = self._kubelet_file_endpoint()
        if self.same_endpoint(current, node_files.RELAY_ENDPOINT):
            raise KubeletLayoutError(f"kubelet already points at {node_files.RELAY_ENDPOINT} but the installer "
                                     "has no record of the runtime endpoint it used before; fix kubelet's "
                                     "configuration by hand first")
        journal.set(RUNTIME_ENDPOINT, current)
        log.info("kubelet's runtime endpoint is %s; the relay will forward there", current,
                 extra={"endpoint": current})
        return current

    def _put_files(self, journal: Journal, files: dict[str, bytes], pending: list[str],
                   group: str = RESMGR) -> list[str]:
        """Write files, first recording the actions their change requires as pending."""
        stale = [p for p, data in files.items() if self.host.file_sha256(p) != sha256_bytes(data)]
        for key in pending if stale else []:
            journal.set(key, True)
        return [p for p, data in files.items() if journal.put_file(p, data, group=group)]

    def nri_plugin_serves(self) -> bool:
        """Whether something answers on the plugin's config socket while the relay's unit is not running: the NRI
        plugin's pod still runs on this node (it serves the same sockets the relay would)."""
        if systemd.is_active(self.host, node_files.UNIT) in ("active", "activating", "reloading"):
            return False
        path = self.host.path(AGENT_DIR_CONFIG_SOCKET)
        if not path.exists():
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(2.0)
            try:
                sock.connect(str(path))
            except OSError:
                return False
        return True

    def install(self, static: StaticConfig) -> InstallReport:
        journal = self.journal()
        if journal.get(FRONTEND) == NRI_FRONTEND and self.nri_plugin_serves():
            # NRI -> relay: both would place containers and write the same cache. The plugin's pod goes with the
            # pool's mode change; the install is retried until it has.
            raise InstallError("cri-resmgr's NRI plugin still serves on this node; waiting for its pod to stop "
                               "before the relay takes over")
        journal.set(FRONTEND, RELAY_FRONTEND)
        journal.set(PHASE, "installing")
        runtime = self.learn_runtime_endpoint(journal)
        try:
            log.info("container runtime answers: %s", cri_version(self.host, runtime), extra={"endpoint": runtime})
        except CriUnavailable as exc:
            raise InstallError(f"the container runtime does not answer, not installing the relay: {exc}") from exc
        settings = dataclasses.replace(self.settings.unit or node_files.UnitSettings(runtime), runtime_endpoint=runtime)
        changed: list[str] = []

        # 1. The program, as a release directory named by its digest (installer.release), copied, verified
        # and renamed into place; the stable path is a symlink to it, switched in one rename. A new one
        # replacing a running one must first serve on a socket of its own (installer.upgrade); the live
        # release is kept for a rollback.
        manifest = release.manifest_of(self.settings.binary)
        sha = manifest.digest
        self._adopt_one_file(journal)
        live_sha = release.current(self.host, node_files.BINARY)
        if live_sha is not None and live_sha != sha:
            self._try_upgrade(journal, manifest, runtime)
        if live_sha != sha:
            journal.set(PENDING_RESMGR_RESTART, True)
        journal.ensure_dir(release.RELEASES_DIR)
        journal.ensure_dir(os.path.dirname(node_files.BINARY))
        if not release.is_installed(self.host, sha):
            # New, or the live one damaged on the node: the relay must (re)start on the fresh copy.
            journal.set(PENDING_RESMGR_RESTART, True)
            release.install(self.host, self.settings.binary, manifest)
            changed.append(release.release_dir(sha))
        failpoints.hit("release-copied")
        if release.point(self.host, node_files.BINARY, sha):
            changed.append(node_files.BINARY)
        failpoints.hit("binary-installed")

        # 2. Unit and /etc/default file; 3. static configs.
        desired = node_files.desired_config_files(static, settings)
        unit_files = {p: desired.pop(p) for p in (node_files.UNIT_FILE, node_files.DEFAULT_FILE)}
        changed += self._put_files(journal, {node_files.UNIT_FILE: unit_files[node_files.UNIT_FILE]},
                                   [PENDING_RELOAD, PENDING_RESMGR_RESTART])
        changed += self._put_files(journal, {node_files.DEFAULT_FILE: unit_files[node_files.DEFAULT_FILE]},
                                   [PENDING_RESMGR_RESTART])
        failpoints.hit("unit-files-written")
        journal.ensure_dir(node_files.CONFIG_DIR)
        changed += self._put_files(journal, desired, [PENDING_RESMGR_RESTART])
        keep = set(desired) | set(unit_files) | {node_files.KUBELET_GUARD, node_files.KUBELET_GUARD_DROPIN}
        for path in journal.paths(RESMGR):
            if path not in keep:
                journal.set(PENDING_RESMGR_RESTART, True)
                if journal.restore_file(path):
                    changed.append(path)
        failpoints.hit("static-config-written")

        # 4. daemon-reload, enable, restart only if something it reads changed (or it is down).
        if journal.get(PENDING_RELOAD):
            systemd.daemon_reload(self.host)
            journal.set(PENDING_RELOAD, False)
        if systemd.show(self.host, node_files.UNIT, "UnitFileState")["UnitFileState"] != "enabled":
            systemd.enable(self.host, node_files.UNIT)
        state = systemd.is_active(self.host, node_files.UNIT)
        restarted = False
        # "activating" is systemd restarting it already; a restart from us would only reset its limits.
        if journal.get(PENDING_RESMGR_RESTART) or state in ("inactive", "failed", "deactivating"):
            log.info("(re)starting %s: %s", node_files.UNIT,
                     "its files changed" if journal.get(PENDING_RESMGR_RESTART) else f"it is {state}",
                     extra={"unit": node_files.UNIT})
            systemd.reset_failed(self.host, node_files.UNIT)
            systemd.restart(self.host, node_files.UNIT)
            journal.set(PENDING_RESMGR_RESTART, False)
            restarted = True
        else:
            log.info("%s is %s and nothing it reads changed; not restarting it", node_files.UNIT, state,
                     extra={"unit": node_files.UNIT})
        failpoints.hit("unit-started")

        # 5. Only a relay that answers CRI Version gets kubelet.
        try:
            version = wait_cri(self.host, node_files.RELAY_ENDPOINT, self.settings.relay_wait_s,
                               give_up=self._relay_unit_gone)
        except CriUnavailable as exc:
            if journal.get(upgrade.VERIFYING_SHA) == sha:
                self._roll_back(journal, sha, exc)
            raise InstallError(f"{exc}; kubelet is not pointed at the relay") from exc
        journal.set(upgrade.VERIFYING_SHA, None)
        log.info("relay answers CRI Version: %s", version, extra={"endpoint": node_files.RELAY_ENDPOINT})
        # Exactly one previous release stays for a rollback; older ones and interrupted copies go.
        kept = {sha} | ({journal.get(upgrade.PREVIOUS_RELEASE)} - {None})
        for name in release.prune(self.host, kept):
            log.info("removed release %s", name, extra={"path": f"{release.RELEASES_DIR}/{name}",
                                                          "change": "remove"})
        failpoints.hit("relay-answered")

        # 6.-7. Repoint kubelet, restart it, check what it really uses.
        kubelet_changed = self.point_kubelet_at_relay(journal)
        changed += kubelet_changed[0]
        journal.set(PHASE, "installed")
        failpoints.hit("install-verified")
        log.info("install complete: %d change(s)", len(changed),
                 extra={"changed": changed, "resmgr_restarted": restarted,
                        "kubelet_restarted": kubelet_changed[1]})
        return InstallReport(changed, restarted, kubelet_changed[1], journal.get(KUBELET_LAYOUT, ""),
                             runtime, version)

    def _adopt_one_file(self, journal: Journal) -> None:
        """A node installed by the one-file version has the executable itself at the stable path, tracked
        as a journaled file: it becomes a release of one file (the rollback target of the upgrade that
        follows), the stable path a symlink to it, and the journal stops tracking it as a file."""
        if node_files.BINARY not in journal.paths(RESMGR):
            return
        if release.current(self.host, node_files.BINARY) is None and self.host.exists(node_files.BINARY):
            old = self.host.path(node_files.BINARY)
            manifest = release.manifest_of(old)
            journal.ensure_dir(release.RELEASES_DIR)
            release.install(self.host, old, manifest)
            failpoints.hit("one-file-adopted")
            release.point(self.host, node_files.BINARY, manifest.digest)
            log.info("the one-file executable at %s is now release %s", node_files.BINARY, manifest.digest[:12],
                     extra={"path": node_files.BINARY, "sha256": manifest.digest, "change": "adopt"})
        journal.forget_file(node_files.BINARY)

    def _try_upgrade(self, journal: Journal, manifest: release.Manifest, runtime: str) -> None:
        """Trial the new release; keep the live one for a rollback. InstallError if it is not taken."""
        sha = manifest.digest
        if journal.get(upgrade.REFUSED_SHA) == sha:
            raise InstallError(f"cri-resmgr {sha[:12]} did not serve on this node after an earlier upgrade and "
                               "was rolled back; not trying it again (ship a fixed image). The node keeps "
                               "its running cri-resmgr")
        journal.ensure_dir(release.RELEASES_DIR)
        staged = release.install(self.host, self.settings.binary, manifest)
        try:
            upgrade.run_trial(self.host, staged, runtime)
        except upgrade.UpgradeRefused as exc:
            self.host.remove_tree(release.release_dir(sha))  # never live: nothing to keep it for
            raise InstallError(str(exc)) from exc
        live = release.current(self.host, node_files.BINARY)
        if live is not None and release.is_installed(self.host, live):
            journal.set(upgrade.PREVIOUS_RELEASE, live)
            journal.set(upgrade.VERIFYING_SHA, sha)

    def _roll_back(self, journal: Journal, sha: str, cause: Exception) -> None:
        """The upgraded relay does not serve: switch back to the previous release and restart it. Always raises."""
        prev = journal.get(upgrade.PREVIOUS_RELEASE)
        journal.set(upgrade.REFUSED_SHA, sha)
        journal.set(upgrade.VERIFYING_SHA, None)
        if prev is None or not release.is_installed(self.host, prev):
            raise InstallError(f"{cause}; the upgraded cri-resmgr does not serve and no previous one is kept")
        log.error("the upgraded cri-resmgr does not serve (%s); rolling back to the previous one", cause,
                  extra={"sha256": sha, "previous_sha256": prev})
        release.point(self.host, node_files.BINARY, prev)
        journal.set(upgrade.PREVIOUS_RELEASE, None)  # the previous release is the live one again
        self.host.remove_tree(release.release_dir(sha))
        systemd.reset_failed(self.host, node_files.UNIT)
        systemd.restart(self.host, node_files.UNIT)
        try:
            version = wait_cri(self.host, node_files.RELAY_ENDPOINT, self.settings.relay_wait_s,
                               give_up=self._relay_unit_gone)
        except CriUnavailable as exc:
            raise InstallError(f"{cause}; the upgraded cri-resmgr does not serve, and after rolling back the "
                               f"previous one does not either: {exc}") from exc
        raise InstallError(f"the upgraded cri-resmgr {sha[:12]} does not serve ({cause}); rolled back to the "
                           f"previous one ({prev[:12]}), which serves again ({version}); this executable is "
                           "not tried again on this node")

    def _relay_unit_gone(self) -> str | None:
        """Why waiting for the relay is pointless (its unit stopped or failed), with its last log lines."""
        state = systemd.is_active(self.host, node_files.UNIT)
        if state not in ("inactive", "failed"):
            return None
        logs = self.host.run(["journalctl", "-u", node_files.UNIT, "-n", "5", "--no-pager", "-o", "cat"],
                             check=False).stdout.strip().replace("\n", " | ")
        return f"{node_files.UNIT} is {state}; its last log lines: {logs or '(none)'}"

    def point_kubelet_at_relay(self, journal: Journal | None = None) -> tuple[list[str], bool]:
        """Repoint kubelet (if needed) and verify. Returns (files changed, kubelet restarted)."""
        journal = journal or self.journal()
        cri_version(self.host, node_files.RELAY_ENDPOINT)  # never point kubelet at a silent socket
        unit = load_kubelet_unit(self.host)
        plan = plan_repoint(self.host, unit, node_files.RELAY_ENDPOINT, self.same_endpoint)
        journal.set(KUBELET_LAYOUT, plan.layout)
        journal.set(KUBELET_TARGET, "relay")
        changed = self._put_files(journal, plan.files, [PENDING_KUBELET_RESTART], group=KUBELET)
        log.info("kubelet layout %s: endpoint set in %s", plan.layout, ", ".join(plan.files),
                 extra={"layout": plan.layout, "changed": changed})
        changed += self._put_kubelet_guard(journal)
        failpoints.hit("kubelet-files-written")
        running, _ = self.kubelet_running_endpoint()
        if journal.get(PENDING_KUBELET_RESTART) or not self.same_endpoint(running, node_files.RELAY_ENDPOINT):
            journal.set(PENDING_KUBELET_RESTART, True)
            self._restart_kubelet_and_verify(journal, node_files.RELAY_ENDPOINT)
            failpoints.hit("kubelet-restarted")
            return changed, True
        log.info("kubelet already runs against the relay; not restarting it")
        return changed, False

    def kubelet_guard_intact(self) -> bool:
        """Whether the guard's script and kubelet's drop-in are on the node as the installer last wrote them."""
        journal = self.journal()
        for path in (node_files.KUBELET_GUARD_DROPIN, node_files.KUBELET_GUARD):
            rec = journal.files.get(path)
            if rec is None or self.host.file_sha256(path) != rec.ours[-1]:
                return False
        return True

    def put_kubelet_guard(self) -> list[str]:
        """Write the guard again for kubelet's current repoint; returns the files changed.

        gardener-node-agent removes ``/etc/systemd/system/kubelet.service.d`` whole whenever it rewrites
        kubelet.service (gardener v1.149.3 pkg/nodeagent/controller/operatingsystemconfig/reconciler.go,
        applyChangedUnits: a unit without drop-ins in the OSC loses its ``.d`` directory), and restarts kubelet
        without a repoint to follow, so the supervisor calls this whenever the guard is gone."""
        return self._put_kubelet_guard(self.journal())

    def _put_kubelet_guard(self, journal: Journal) -> list[str]:
        """Write the boot-time guard for the kubelet files just written (see kubelet-guard.sh.j2)."""
        guarded = []
        for path in journal.paths(KUBELET):
            rec = journal.files[path]
            mode = rec.orig_mode if rec.orig_mode is not None else 0o644
            guarded.append(node_files.GuardedFile(path, rec.ours[-1], rec.orig_sha256, rec.backup, f"{mode:o}"))
        files = node_files.render_kubelet_guard(guarded, journal.get(RUNTIME_ENDPOINT, ""))
        dropin = node_files.KUBELET_GUARD_DROPIN
        changed = self._put_files(journal, {dropin: files[dropin]}, [PENDING_RELOAD])
        journal.ensure_dir(os.path.dirname(node_files.KUBELET_GUARD))
        if journal.put_file(node_files.KUBELET_GUARD, files[node_files.KUBELET_GUARD], group=RESMGR, mode=0o755):
            changed.append(node_files.KUBELET_GUARD)
        if journal.get(PENDING_RELOAD):
            systemd.daemon_reload(self.host)
            journal.set(PENDING_RELOAD, False)
        return changed

    def point_kubelet_at_runtime(self, reason: str, journal: Journal | None = None,
                                 restore: bool = True) -> list[str]:
        """Give kubelet its original files back (its original runtime endpoint) and verify; ``restore`` gives
        the containers kubelet's cpusets back (not when the NRI plugin takes over the placement)."""
        journal = journal or self.journal()
        runtime = journal.get(RUNTIME_ENDPOINT)
        journal.set(KUBELET_TARGET, "runtime")
        journal.set(PENDING_KUBELET_RESTART, True)
        restored = journal.restore_group(KUBELET)
        log.warning("pointing kubelet back at %s: %s", runtime, reason,
                    extra={"endpoint": runtime, "reason": reason, "restored": restored})
        if runtime:
            self._restart_kubelet_and_verify(journal, runtime)
            # No container may keep a cpuset the relay chose once kubelet manages them again.
            if restore:
                restore_cpusets(self.host, runtime)
        return restored

    # ----- uninstall -------------------------------------------------------------------------
    def uninstall(self, keep_placement: bool = False) -> list[str]:
        """Reverse everything, in the order: kubelet, unit, cri-resmgr state, files.

        ``keep_placement`` (the switch to NRI mode) leaves the containers' cpusets and cri-resmgr's state
        directory (its cache) as they are, for the NRI plugin's Synchronize to take over.
        """
        failpoints.hit_node(self.host, "uninstall-start")
        journal = self.journal()
        if not journal.exists:
            leftovers = [p for p in (node_files.UNIT_FILE, node_files.BINARY) if self.host.exists(p)]
            if leftovers:
                raise InstallError(f"no installer state on the node, but {leftovers} exist: not removing files "
                                   "the installer has no record of")
            log.info("no installer state on the node: nothing to uninstall")
            return []
        journal.set(PHASE, "uninstalling")
        changed: list[str] = []
        # 1. kubelet back to the runtime, verified.
        if journal.paths(KUBELET) or journal.get(PENDING_KUBELET_RESTART):
            changed += self.point_kubelet_at_runtime("switch to NRI" if keep_placement else "uninstall", journal,
                                                     restore=not keep_placement)
        current = self._kubelet_file_endpoint() if systemd.unit_exists(self.host, KUBELET_UNIT) else ""
        if current and self.same_endpoint(current, node_files.RELAY_ENDPOINT):
            raise InstallError("kubelet's configuration still points at the relay after restoring the "
                               "installer's changes; not stopping cri-resmgr")
        failpoints.hit("uninstall-kubelet-restored")
        # 2. stop and disable the unit.
        if systemd.unit_exists(self.host, node_files.UNIT):
            systemd.stop(self.host, node_files.UNIT)
            if systemd.show(self.host, node_files.UNIT, "UnitFileState")["UnitFileState"] == "enabled":
                systemd.disable(self.host, node_files.UNIT)
        failpoints.hit("uninstall-unit-stopped")
        # 3. cri-resmgr's own state; in NRI mode first the cpusets the plugin gave (kubelet was never repointed,
        # so nothing above restored them), once the plugin's pod is gone.
        if not keep_placement:
            if journal.get(FRONTEND) == NRI_FRONTEND:
                self._restore_after_nri()
            self._reset_resmgr_state()
        failpoints.hit("uninstall-state-reset")
        # 4. every file, then the directories we created.
        journal.set(PENDING_RELOAD, True)
        for path in journal.paths(RESMGR):
            if journal.restore_file(path):
                changed.append(path)
        if release.unpoint(self.host, node_files.BINARY):
            log.info("removed %s", node_files.BINARY, extra={"path": node_files.BINARY, "change": "remove"})
            changed.append(node_files.BINARY)
        changed += [f"{release.RELEASES_DIR}/{name}" for name in release.prune(self.host, set())]
        systemd.daemon_reload(self.host)
        systemd.reset_failed(self.host, node_files.UNIT)
        failpoints.hit("uninstall-files-removed")
        if keep_placement:
            # The NRI plugin's directories (its cache, the agent's sockets) stay, and stay recorded for the NRI
            # uninstall to remove: a node that was in NRI mode before the relay has them in this journal (found on
            # the landscape: nri -> relay -> nri refused to drop a journal still recording them).
            journal.remove_dirs(keep=NRI_DIRS)
            journal.restart()
            log.info("relay uninstalled for NRI mode: placements and cache kept", extra={"changed": changed})
            return changed
        journal.remove_dirs()
        journal.clear()
        log.info("uninstall complete: the node is clean", extra={"changed": changed})
        return changed

    def _reset_resmgr_state(self) -> None:
        if self.host.exists(node_files.BINARY):
            try:
                # coreutils timeout on the node: a cri-resmgr that starts serving instead must not hang us.
                self.host.run(["timeout", "30", node_files.BINARY, "--reset-policy"], timeout=60)
                log.info("cri-resmgr --reset-policy done", extra={"change": "reset-policy"})
            except HostCommandError as exc:
                log.warning("cri-resmgr --reset-policy failed (%s); removing its state directory anyway", exc)
        else:
            log.info("no cri-resmgr executable on the node to run --reset-policy; removing its state "
                     "directory is the reset")
        for d in (node_files.RELAY_STATE_DIR, node_files.RELAY_RUNTIME_DIR):
            if self.host.remove_tree(d):
                log.info("removed %s", d, extra={"path": d, "change": "remove"})


    def _restore_after_nri(self) -> None:
        if self.nri_plugin_serves():
            raise InstallError("cri-resmgr's NRI plugin still serves on this node; waiting for its pod to stop "
                               "before giving the containers kubelet's cpusets back")
        runtime = self._kubelet_file_endpoint()
        restore_cpusets(self.host, runtime)

    # ----- NRI mode --------------------------------------------------------------------------
    def switch_to_nri(self) -> list[str]:
        """Make the node ready for the NRI plugin's pod: the relay gone (kubelet back on containerd, the unit and
        its files removed; the containers' cpusets and cri-resmgr's cache kept for the plugin), and the
        directories the plugin mounts made. Idempotent; returns what changed."""
        journal = self.journal()
        changed: list[str] = []
        if journal.exists and journal.get(FRONTEND) != NRI_FRONTEND:
            log.info("switching this node from the relay to NRI mode: uninstalling the relay, keeping placements")
            changed += self.uninstall(keep_placement=True)
            journal = self.journal()
        journal.set(FRONTEND, NRI_FRONTEND)
        journal.set(PHASE, "nri")
        # The relay's state directory (its unit made it 0700 root's; the cache is the plugin's now), and the
        # agent's socket directory, as the relay's unit makes it: setgid, the agent's group, 2770.
        state_dir, agent_dir = NRI_DIRS
        journal.ensure_dir(state_dir, 0o700)
        journal.ensure_dir(agent_dir)
        real = self.host.path(AGENT_SOCKET_DIR)
        info = real.stat()
        if info.st_gid != AGENT_SOCKET_GROUP or (info.st_mode & 0o7777) != 0o2770:
            os.chown(real, -1, AGENT_SOCKET_GROUP)
            os.chmod(real, 0o2770)
            changed.append(AGENT_SOCKET_DIR)
        return changed
