"""Command line of cri-resmgr-installer: argument parsing and the run loop, over plain functions."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import noderecord
from installer import node_label, node_recorder, readiness, release
from installer.agent_check import agent_check, gated_by_agent
from installer.host import CommandRunner, Host
from installer.install import FRONTEND, KUBELET_TARGET, NRI_FRONTEND, InstallSettings, NodeInstaller
from installer.node_label import NodeLabeler
from installer.node_lock import NodeLock
from installer.nri_state import nri_state
from installer.static_config import read_config_dir
from installer.supervisor import Decision, Supervisor, SupervisorSettings
from resmgr.logsetup import setup_logging_from_args
from resmgr.options import add_logging_arguments

log = logging.getLogger("installer.cli")

MODE_ENV = "CRI_RESMGR_INSTALLER_MODE"
MODES = ("install", "uninstall", "nri", "auto")
DIGEST_ENV = "CRI_RESMGR_INSTALLER_DIGEST"
Recorder = Callable[[str, str], object]  # (state, reason): writes the node record


def _no_record(state: str, reason: str) -> None:
    return None

DESCRIPTION = """\
cri-resmgr-installer runs privileged in the installer DaemonSet with the host
root mounted. It copies the cri-resmgr program onto the node, writes the
cri-resource-manager.service systemd unit and its fallback/force/EXTRA_OPTIONS
configuration, repoints kubelet at the relay socket once the relay answers,
supervises it, and in uninstall mode reverses every change exactly.

install mode (default):
  1. /opt/cri-resmgr/releases/<digest>/ (copied, verified against its manifest,
     renamed), /opt/cri-resmgr/bin/cri-resmgr a symlink to its executable
  2. /etc/systemd/system/cri-resource-manager.service, /etc/default/cri-resource-manager
  3. /etc/cri-resmgr/{fallback.cfg|force.cfg,extra-options.env} from --config-dir
  4. daemon-reload, enable, restart (only if something it reads changed)
  5. wait for CRI Version on /var/run/cri-resmgr/cri-resmgr.sock
  6. repoint kubelet (gardener extra_args, kubeadm-flags.env or KubeletConfiguration)
  7. restart kubelet, check its running command line / config uses the relay
  Every change is journaled with backups in /var/lib/cri-resmgr-installer/ first;
  re-running converges. Then it supervises: if the unit fails or the relay does
  not answer for --relay-timeout seconds, kubelet goes back to containerd and the
  node record says degraded, with the reason. Kubelet is back on containerd within
  one --check-interval plus a kubelet restart of the unit failing or stopping,
  and within --relay-timeout + --check-interval + a kubelet restart of the relay
  falling silent (about 36 s with the defaults). While on containerd, a failed
  unit is restarted every --restart-backoff seconds; once the relay has been
  healthy for --recover-after seconds, kubelet is pointed at it again (after
  --max-fallbacks fallbacks within an hour it stays on containerd until the pod
  restarts). Each fallback, recovery and repoint restarts kubelet; a recovery or
  repoint waits while it would leave no room for one more fallback within
  --max-kubelet-restarts per --kubelet-restart-window (4 per 600 s): gardener-node-agent
  warns at 5 NotReady-Ready toggles of a node within 10 minutes.

uninstall mode (--mode uninstall or CRI_RESMGR_INSTALLER_MODE=uninstall; never
on SIGTERM): kubelet back to containerd (verified), stop and disable the unit,
cri-resmgr --reset-policy and /var/lib/cri-resmgr removed, every installed file
removed or restored byte for byte; then it reports ready and sleeps.

nri mode (the worker pools of providerConfig mode/modes nri; kubelet is never
touched): take an earlier relay off the node keeping the containers' cpusets and
cri-resmgr's cache (kubelet back to containerd, the unit and its files removed),
make /var/lib/cri-resmgr and /var/run/cri-resmgr/agent, check containerd's NRI
socket, and label the node cri-resmgr.gardener.cloud/frontend=nri, on which the
cri-resmgr-nri DaemonSet (cri-resmgr --frontend nri) selects. With NRI off the
node record says nri-unavailable with how to turn it on; no fallback to the
relay. Checked again every --check-interval.

auto mode: nri mode where containerd's NRI is on when the pod starts, else
install mode (the node record says why).

node record: after "install complete" and "uninstall complete" (and on failures, with
the reason) the installer writes the Lease kube-system/cri-resmgr-node-<node> through its
ServiceAccount: state, the digest of the rollout (--digest) and the time. The extension ends
its uninstall wait, and reports the installation healthy, only on these records. "installed"
also needs cri-resmgr-agent to answer its health check on its socket (checked every
--check-interval); until it does the record says agent-not-ready, with the agent's answer.

probe: `cri-resmgr-installer probe` (or --probe) exits 0 when the ready file
says ready, else 1 with a one-line reason. In install mode ready means the node
is usable (the pod is node-critical: a new node is tainted until it is ready):
after the first install attempt, kubelet on a relay that answers, or on
containerd after a failed install or a fallback. Not ready: kubelet on a relay
that stopped answering (until the fallback), or this rollout's install failed
while an earlier relay still serves kubelet (that halts a bad rollout).
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cri-resmgr-installer", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", nargs="?", choices=("run", "probe"), default="run",
                   help="run (default) installs/uninstalls and supervises; probe checks the ready file")
    p.add_argument("--probe", action="store_true", help="same as the probe command")
    p.add_argument("--mode", default=None, metavar="install|uninstall",
                   help=f"what to do (default: ${MODE_ENV} or install)")
    p.add_argument("--host-root", default="/var/host", type=Path,
                   help="where the node's root file system is mounted (default: /var/host)")
    p.add_argument("--host-exec", choices=("nsenter", "chroot"), default="nsenter",
                   help="how node commands run: nsenter into --host-pid's mount namespace (default), or "
                        "chroot into --host-root with SYSTEMD_IGNORE_CHROOT=1")
    p.add_argument("--host-pid", type=int, default=1,
                   help="pid whose mount namespace is the node's (default: 1, with hostPID)")
    p.add_argument("--host-namespaces", default="mount", metavar="NS[,NS...]",
                   help="namespaces of --host-pid that nsenter enters (default: mount; a node in its own pid "
                        "namespace, like a systemd-nspawn test node, needs mount,pid)")
    p.add_argument("--config-dir", default="/etc/cri-resmgr-installer/config", type=Path,
                   help="mounted static config ConfigMap with optional keys fallback.cfg, force.cfg, "
                        "EXTRA_OPTIONS (default: /etc/cri-resmgr-installer/config)")
    p.add_argument("--binary", default="/opt/cri-resmgr/lib", type=Path,
                   help="the cri-resmgr program to install: the unpacked build's directory (with cri-resmgr at "
                        "its top), or a single executable (default: /opt/cri-resmgr/lib in the image)")
    p.add_argument("--ready-file", default=readiness.DEFAULT_READY_FILE, type=Path,
                   help=f"readiness file for the probe (default: {readiness.DEFAULT_READY_FILE})")
    p.add_argument("--probe-max-age", type=float, default=readiness.DEFAULT_MAX_AGE_S, metavar="S",
                   help="probe: a ready file older than this many seconds is not ready (default: %(default)s)")
    p.add_argument("--once", action="store_true",
                   help="exit after install/uninstall instead of supervising (or sleeping)")
    p.add_argument("--relay-wait", type=float, default=30.0, metavar="S",
                   help="how long install waits for the relay to answer CRI Version (default: %(default)s)")
    p.add_argument("--kubelet-wait", type=float, default=60.0, metavar="S",
                   help="how long to wait for kubelet to be active after a restart (default: %(default)s)")
    p.add_argument("--check-interval", type=float, default=5.0, metavar="S",
                   help="supervision interval (default: %(default)s)")
    p.add_argument("--relay-timeout", type=float, default=30.0, metavar="S",
                   help="fall back to containerd when the relay has not answered this long (default: %(default)s)")
    p.add_argument("--recover-after", type=float, default=30.0, metavar="S",
                   help="return kubelet to the relay once it has been healthy this long (default: %(default)s)")
    p.add_argument("--restart-backoff", type=float, default=60.0, metavar="S",
                   help="while on the fallback, restart a failed unit at most this often (default: %(default)s)")
    p.add_argument("--max-fallbacks", type=int, default=3,
                   help="after this many fallbacks within an hour, stay on containerd (default: %(default)s)")
    p.add_argument("--max-kubelet-restarts", type=int, default=4, metavar="N",
                   help="kubelet restarts (fallbacks, recoveries, repoints) allowed per --kubelet-restart-window; "
                        "recoveries and repoints wait to keep one for a fallback (default: %(default)s)")
    p.add_argument("--kubelet-restart-window", type=float, default=600.0, metavar="S",
                   help="the window --max-kubelet-restarts counts in (default: %(default)s)")
    p.add_argument("--node-name", default=os.environ.get("NODE_NAME", ""),
                   help="this node's name, for its node record (default: $NODE_NAME)")
    p.add_argument("--digest", default=os.environ.get(DIGEST_ENV, ""),
                   help=f"the rollout's digest, written into the node record (default: ${DIGEST_ENV})")
    p.add_argument("--no-node-record", action="store_true",
                   help="do not write the node record (a node outside a cluster, tests)")
    add_logging_arguments(p, default_format="json")
    return p


def resolve_mode(arg: str | None, environ: dict[str, str] | os._Environ[str] = os.environ) -> str:
    mode = arg if arg is not None else (environ.get(MODE_ENV) or "install")
    if mode not in MODES:
        source = "--mode" if arg is not None else f"${MODE_ENV}"
        raise ValueError(f"{source}={mode!r} is not a mode; use one of: {', '.join(MODES)}")
    return mode


def make_host(args: argparse.Namespace) -> Host:
    namespaces = tuple(n.strip() for n in args.host_namespaces.split(",") if n.strip())
    runner = CommandRunner(kind=args.host_exec, target_pid=args.host_pid, host_root=str(args.host_root),
                           namespaces=namespaces)
    runner.prefix()  # rejects unknown namespace names before anything runs
    return Host(args.host_root, runner)


def run_install(installer: NodeInstaller, args: argparse.Namespace, stop: threading.Event,
                record: Recorder = _no_record, labeler: NodeLabeler | None = None) -> int:
    sup_settings = SupervisorSettings(interval_s=args.check_interval, relay_timeout_s=args.relay_timeout,
                                      recover_after_s=args.recover_after, restart_backoff_s=args.restart_backoff,
                                      max_fallbacks=args.max_fallbacks,
                                      max_kubelet_restarts=args.max_kubelet_restarts,
                                      kubelet_restart_window_s=args.kubelet_restart_window)
    install_error = ""  # why this rollout's install failed; every readiness report carries it

    def report(decision: Decision) -> None:
        # Readiness means "the node is usable" (node-critical semantics, docs/design.md); the record says
        # whether it uses the relay. One exception keeps a bad release from rolling on: this rollout's install
        # failed while an earlier relay still serves kubelet (usable, but not with this rollout).
        ready, reason, usable = decision.ready, decision.reason, decision.usable
        if install_error:
            ready, reason, usable = False, f"{install_error}; {reason}", usable and not decision.ready
        readiness.write_ready(args.ready_file, usable, reason, "install")
        if ready:
            record(noderecord.INSTALLED, "")
        else:
            record(noderecord.DEGRADED, reason)

    supervisor: Supervisor | None = None
    converged = False
    retry = args.check_interval
    while not stop.is_set():
        if not converged:
            try:
                if labeler is not None:  # the NRI plugin must not run beside the relay (installer/node_label.py)
                    labeler.leave_nri()
                result = installer.install(read_config_dir(args.config_dir))
                converged = True
                install_error = ""
                reason = (f"installed: kubelet ({result.kubelet_layout} layout) uses the relay, which forwards "
                          f"to {result.runtime_endpoint}")
                readiness.write_ready(args.ready_file, True, reason, "install")
                record(noderecord.INSTALLED, "")
                if args.once:
                    return 0
                supervisor = Supervisor(installer, sup_settings, report)
            except Exception as exc:  # every failure becomes not-ready with its reason, then a retry
                log.error("install failed: %s", exc, exc_info=not isinstance(exc, (ValueError, RuntimeError)))
                install_error = f"install failed: {exc}"
                # Kubelet still on containerd (the install repoints it last, and reverts on failure): the node
                # is usable, so the pod is ready and the node takes workloads; the record says install-failed.
                # Kubelet on an earlier rollout's relay: not ready, which halts this rollout (see report).
                on_relay = installer.journal().get(KUBELET_TARGET) == "relay"
                readiness.write_ready(args.ready_file, not on_relay,
                                      install_error if on_relay else f"{install_error}; kubelet stays on the "
                                      "container runtime", "install")
                record(noderecord.INSTALL_FAILED, install_error)
                if args.once:
                    return 1
                # Kubelet may still point at the relay from an earlier rollout (say this one ships a
                # cri-resmgr that does not start): keep supervising, so it falls back to containerd.
                if supervisor is None and installer.journal().get(KUBELET_TARGET) == "relay":
                    supervisor = Supervisor(installer, sup_settings, report)
                if supervisor is not None:
                    _supervise(supervisor, report)
                stop.wait(retry)
                retry = min(retry * 2, 60.0)
                continue
        assert supervisor is not None
        _supervise(supervisor, report)
        stop.wait(args.check_interval)
    log.info("stopping on a signal; the node is left as it is (only uninstall mode reverses the install)")
    return 0


def run_nri(installer: NodeInstaller, args: argparse.Namespace, stop: threading.Event, record: Recorder = _no_record,
            labeler: NodeLabeler | None = None, auto: bool = False) -> int:
    """Modes nri and auto: the node ready for the NRI plugin's pod, or (auto, NRI off) the relay.

    Checked again every --check-interval: containerd's NRI turned on later makes the node ready for the plugin
    (mode nri). Mode auto decides once per pod start: a node it gave the relay stays there until its
    installer restarts (the next rollout), so a node is never switched behind the operator's back.
    """
    mode = "auto" if auto else "nri"
    retry = args.check_interval
    while not stop.is_set():
        state = nri_state(installer.host)
        if auto and not state.enabled:
            note = noderecord.AUTO_RELAY_PREFIX + state.reason
            log.info("mode auto: containerd's NRI is off on this node, so cri-resmgr runs as the relay: %s",
                     state.reason)

            if labeler is not None:
                try:  # says on the node which front end auto chose (the plugin selects on nri only)
                    labeler.ensure(node_label.RELAY)
                except Exception as exc:
                    log.warning("cannot label the node %s=relay: %s", node_label.FRONTEND_LABEL, exc)
            return run_install(installer, args, stop, _noting_installed(record, note), labeler)
        try:
            if labeler is not None and installer.journal().get(FRONTEND) != NRI_FRONTEND:
                labeler.leave_nri()  # a stale nri label must not bring the plugin up beside the relay
            changed = installer.switch_to_nri()
            if labeler is not None:
                labeler.ensure(node_label.NRI if state.enabled else None)
        except Exception as exc:  # retried; kubelet is on containerd unless the relay's uninstall failed midway
            log.error("NRI mode: %s", exc, exc_info=not isinstance(exc, (ValueError, RuntimeError)))
            on_relay = installer.journal().get(KUBELET_TARGET) == "relay"
            readiness.write_ready(args.ready_file, not on_relay, f"switch to NRI mode failed: {exc}", mode)
            record(noderecord.INSTALL_FAILED, f"switch to NRI mode failed: {exc}")
            if args.once:
                return 1
            stop.wait(retry)
            retry = min(retry * 2, 60.0)
            continue
        retry = args.check_interval
        if changed:
            log.info("NRI mode: node prepared", extra={"changed": changed})
        if state.enabled:
            readiness.write_ready(args.ready_file, True, "NRI mode: kubelet on containerd, containerd's NRI on; "
                                  "cri-resmgr runs as its NRI plugin (DaemonSet cri-resmgr-nri)", mode)
            record(noderecord.INSTALLED, "")  # gated by the agent: it answers once the plugin serves
        else:
            # Usable (kubelet on containerd), so ready; no placement, and no silent fallback to the relay.
            log.warning("NRI mode: %s", state.reason)
            readiness.write_ready(args.ready_file, True, state.reason, mode)
            record(noderecord.NRI_UNAVAILABLE, state.reason)
        if args.once:
            return 0 if state.enabled else 1
        stop.wait(args.check_interval)
    log.info("stopping on a signal; the node is left as it is (only uninstall mode reverses the install)")
    return 0


def _noting_installed(record: Recorder, note: str) -> Recorder:
    """``record`` where an INSTALLED record without a reason carries ``note`` (why auto chose the relay)."""

    def noted(state: str, reason: str) -> object:
        return record(state, reason or note) if state == noderecord.INSTALLED else record(state, reason)

    return noted


def _supervise(supervisor: Supervisor, report: Callable[[Decision], None]) -> None:
    try:
        decision = supervisor.tick()
    except Exception as exc:
        log.error("supervision step failed: %s", exc, exc_info=not isinstance(exc, (ValueError, RuntimeError)))
        decision = Decision("none", False, f"supervision failed: {exc}", usable=False)
    report(decision)


def run_uninstall(installer: NodeInstaller, args: argparse.Namespace, stop: threading.Event,
                  record: Recorder = _no_record, labeler: NodeLabeler | None = None) -> int:
    retry = args.check_interval
    while not stop.is_set():
        try:
            installer.uninstall()
            if labeler is not None:
                _remove_label(labeler)
            break
        except Exception as exc:
            log.error("uninstall failed: %s", exc, exc_info=not isinstance(exc, (ValueError, RuntimeError)))
            readiness.write_ready(args.ready_file, False, f"uninstall failed: {exc}", "uninstall")
            record(noderecord.UNINSTALL_FAILED, f"uninstall failed: {exc}")
            if args.once:
                return 1
            stop.wait(retry)
            retry = min(retry * 2, 60.0)
    else:
        return 0
    reason = "uninstalled: the node is clean"
    readiness.write_ready(args.ready_file, True, reason, "uninstall")
    record(noderecord.UNINSTALLED, "")
    if args.once:
        return 0
    log.info("node is clean; staying up and ready until the DaemonSet is deleted")
    while not stop.wait(args.check_interval):
        readiness.write_ready(args.ready_file, True, reason, "uninstall")
        record(noderecord.UNINSTALLED, "")  # a no-op once written; retries a write the API refused
    return 0


def _remove_label(labeler: NodeLabeler) -> None:
    """The frontend label goes with the uninstall; a label left behind selects no pod (the plugin's DaemonSet is
    gone), so failing to remove it only warns."""
    try:
        labeler.ensure(None)
    except Exception as exc:
        log.warning("cannot remove the node's %s label: %s", node_label.FRONTEND_LABEL, exc)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "probe" or args.probe:
        ok, reason = readiness.probe(args.ready_file, args.probe_max_age)
        print(reason)
        return 0 if ok else 1
    setup_logging_from_args(args, root_package="installer")
    try:
        mode = resolve_mode(args.mode)
    except ValueError as exc:
        print(f"cri-resmgr-installer: {exc}", file=sys.stderr)
        return 2
    if args.max_kubelet_restarts < 2:
        print(f"cri-resmgr-installer: --max-kubelet-restarts {args.max_kubelet_restarts}: at least 2 "
              "(room for a recovery and a fallback)", file=sys.stderr)
        return 2
    if mode in ("install", "auto") and not (args.binary.is_file() or (args.binary / release.EXE_NAME).is_file()):
        print(f"cri-resmgr-installer: --binary {args.binary} is neither an executable nor a directory with "
              f"{release.EXE_NAME} at its top", file=sys.stderr)
        return 2
    if not args.host_root.is_dir():
        print(f"cri-resmgr-installer: --host-root {args.host_root} is not a directory", file=sys.stderr)
        return 2
    try:
        host = make_host(args)
    except ValueError as exc:
        print(f"cri-resmgr-installer: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    # SIGTERM only stops the installer; it never uninstalls (a pod restart must not touch the node).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    installer = NodeInstaller(host, InstallSettings(binary=args.binary, relay_wait_s=args.relay_wait,
                                                               kubelet_wait_s=args.kubelet_wait))
    log.info("cri-resmgr-installer starting", extra={"mode": mode, "host_root": str(args.host_root)})
    lock = NodeLock(host)
    if not lock.acquire(stop, lambda reason: readiness.write_ready(args.ready_file, False, reason, mode)):
        log.info("stopping on a signal before this run got the node lock; nothing was changed")
        return 0
    recorder = None if args.no_node_record else node_recorder.in_cluster_recorder(args.node_name, args.digest)
    record: Recorder = recorder.record if recorder is not None else _no_record
    if recorder is not None and mode != "uninstall":  # checked again with every supervision step
        record = gated_by_agent(record, agent_check(host.path))
    labeler = None if args.no_node_record else node_label.in_cluster_labeler(args.node_name)
    try:
        if mode == "uninstall":
            return run_uninstall(installer, args, stop, record, labeler)
        if mode in ("nri", "auto"):
            return run_nri(installer, args, stop, record, labeler, auto=mode == "auto")
        return run_install(installer, args, stop, record, labeler)
    finally:
        lock.release()


if __name__ == "__main__":
    sys.exit(main())
