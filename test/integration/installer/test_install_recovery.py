"""Crash convergence and supervision of cri-resmgr on a real systemd node."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest
from integration.installer.installer_node import LAYOUTS, wait_for
from integration.installer.node_checks import (
    kubelet_on_relay,
    kubelet_on_runtime,
    unit_state,
    wait_kubelet_on_relay,
    wait_kubelet_on_runtime,
)

from devland.node_checks import snapshot
from installer import node_files
from installer.failpoints import ENV as FAILPOINT_ENV
from installer.failpoints import INSTALL_FAILPOINTS, UNINSTALL_FAILPOINTS

pytestmark = pytest.mark.integration

JOURNAL_STATE = "/var/lib/cri-resmgr-installer/state.json"


def test_kill_at_each_install_and_uninstall_step_then_rerun_converges(installer_node) -> None:
    n = installer_node("gardener")
    clean = snapshot(n.node)
    n.install()
    reference = snapshot(n.node)
    n.uninstall()
    assert snapshot(n.node) == clean
    for point in INSTALL_FAILPOINTS:
        crashed = n.install(env={FAILPOINT_ENV: point}, expect_rc=-signal.SIGKILL)
        assert f"failpoint {point} reached" in crashed.stderr
        n.install()
        converged = snapshot(n.node)
        assert converged.keys() == reference.keys(), point
        diff = [p for p in reference if converged[p] != reference[p]]
        assert diff == [], f"after a kill at {point}, these differ from a clean install: {diff}"
        wait_kubelet_on_relay(n.node)
        assert unit_state(n.node) == "active", point
        n.uninstall()
        assert snapshot(n.node) == clean, f"uninstall after a kill at {point} left the node changed"
    for point in UNINSTALL_FAILPOINTS:
        n.install()
        crashed = n.install("--mode", "uninstall", env={FAILPOINT_ENV: point}, expect_rc=-signal.SIGKILL)
        assert f"failpoint {point} reached" in crashed.stderr
        n.uninstall()
        assert snapshot(n.node) == clean, f"uninstall killed at {point} and re-run left the node changed"
        wait_kubelet_on_runtime(n.node)
        assert unit_state(n.node) in ("inactive", "")


def test_relay_dead_for_good_sends_kubelet_back_to_containerd_and_recovers(installer_node, tmp_path) -> None:
    n = installer_node("gardener")
    kill_switch = "/run/cri-resmgr-test-kill-switch"
    # The launcher refuses to start while the kill switch exists: cri-resmgr is dead for good.
    n.binary.write_text(n.binary.read_text().replace(
        "exec ", f"[ -e {kill_switch} ] && {{ echo 'test kill switch set' >&2; exit 1; }}\nexec ", 1))
    log_path = tmp_path / "supervisor.log"
    relay_timeout = 10
    with open(log_path, "w") as log:
        proc = subprocess.Popen(n.supervise_argv("--check-interval", "1", "--relay-timeout", str(relay_timeout),
                                                 "--recover-after", "3", "--restart-backoff", "5"),
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: probe(n) == 0, "the installer to report ready", timeout=90)
        wait_kubelet_on_relay(n.node)

        n.node.write_file(kill_switch, "")
        n.node.run("kill -9 $(systemctl show --property=MainPID --value cri-resource-manager.service)")
        killed = time.monotonic()
        # Stated bound: the relay timeout (or the unit failing, whichever is first) plus a check
        # interval and a kubelet restart; the margin is for a loaded 2-core machine.
        wait_for(lambda: kubelet_on_runtime(n.node), "kubelet back on containerd", timeout=relay_timeout + 50)
        took = time.monotonic() - killed
        out = log_path.read_text()
        assert "pointing kubelet back at unix:///run/containerd/containerd.sock" in out
        # On containerd the node is usable: ready (node-critical semantics), the reason says it fell back.
        wait_for(lambda: probe(n) == 0, "ready on the fallback", timeout=10)
        reason = subprocess.run(n.supervise_argv("probe"), capture_output=True, text=True).stdout
        assert reason.startswith("ready") and "fallback" in reason, reason
        print(f"kubelet on containerd {took:.1f}s after cri-resmgr was killed for good")

        n.node.run(["rm", "-f", kill_switch])
        wait_for(lambda: kubelet_on_relay(n.node) and probe(n) == 0, "kubelet back on the relay", timeout=90)
        assert "pointing kubelet at it again" in log_path.read_text()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        rc = proc.wait(timeout=30)
    # SIGTERM stops the installer and leaves the node alone: still installed, kubelet on the relay.
    assert rc == 0
    assert "the node is left as it is" in log_path.read_text()
    assert unit_state(n.node) == "active" and kubelet_on_relay(n.node)

    # A new rollout ships a cri-resmgr that never starts, while kubelet points at the relay: its trial
    # fails (installer.upgrade), so it never replaces the running relay, which keeps serving kubelet; the
    # installer reports not ready with the reason (that halts the DaemonSet's rollout) and keeps supervising.
    live_pid = n.node.systemctl("show", "-p", "MainPID", "--value", "cri-resource-manager.service").stdout.strip()
    n.binary.write_text("#!/bin/sh\necho 'broken build' >&2\nexit 3\n")
    with open(log_path, "w") as log:
        proc = subprocess.Popen(n.supervise_argv("--check-interval", "1", "--relay-timeout", str(relay_timeout),
                                                 "--relay-wait", "5"),
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(lambda: "failed its trial" in log_path.read_text(), "the broken build's trial to fail", timeout=90)
        wait_for(lambda: probe(n) == 1, "not-ready after a broken rollout", timeout=10)
        reason = subprocess.run(n.supervise_argv("probe"), capture_output=True, text=True).stdout
        assert "install failed" in reason and "broken build" in reason, reason
        assert kubelet_on_relay(n.node) and unit_state(n.node) == "active"
        assert n.node.systemctl("show", "-p", "MainPID", "--value",
                                "cri-resource-manager.service").stdout.strip() == live_pid
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    n.node.run(["rm", "-f", kill_switch])
    n.uninstall()
    wait_kubelet_on_runtime(n.node)


def probe(n) -> int:
    return subprocess.run(n.supervise_argv("probe"), capture_output=True, text=True).returncode


@contextlib.contextmanager
def supervising(n, log_path) -> Iterator[None]:
    """The installer supervising with a 1-s check, logging to ``log_path``, once ready with kubelet on the relay;
    stopped (and its clean exit checked) at the end."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(n.supervise_argv("--check-interval", "1"), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_for(lambda: probe(n) == 0, "the installer to report ready", timeout=90)
        wait_kubelet_on_relay(n.node)
        yield
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def test_gardener_node_agent_rewriting_kubelet_service_keeps_the_relay_and_the_guard(installer_node, tmp_path) -> None:
    """What gardener-node-agent does to kubelet.service on every kubelet-relevant OSC change: remove the
    unit's ``.d`` directory whole (the OSC gives kubelet.service no drop-ins), write the unit afresh,
    daemon-reload, restart kubelet (gardener v1.149.3 pkg/nodeagent/controller/operatingsystemconfig/
    reconciler.go, applyChangedUnits and executeUnitCommands). kubelet stays on the relay (the repoint is in
    /var/lib/kubelet/extra_args, which the OSC does not hold), the supervisor writes the guard again, and the
    guard then still keeps a broken relay from holding kubelet at the next start (a reboot)."""
    n = installer_node("gardener")
    unit = "/etc/systemd/system/kubelet.service"
    log_path = tmp_path / "supervisor.log"
    with supervising(n, log_path):
        guard = {path: n.node.read_file(path) for path in (node_files.KUBELET_GUARD_DROPIN, node_files.KUBELET_GUARD)}
        rewritten = LAYOUTS["gardener"].files[unit].replace("kubernetes-version=1.31.1", "kubernetes-version=1.31.2")
        n.node.run(["rm", "-rf", "/etc/systemd/system/kubelet.service.d"])
        n.node.write_file(unit, rewritten)
        n.node.systemctl("daemon-reload")
        n.node.systemctl("restart", "kubelet.service")
        wait_for(lambda: kubelet_on_relay(n.node), "kubelet to come back on the relay", timeout=30)
        wait_for(lambda: all(n.node.exists(path) and n.node.read_file(path) == data for path, data in guard.items()),
                 "the supervisor to write the kubelet guard again", timeout=30)
        assert "writing it again" in log_path.read_text()

        def dropins() -> str:
            return n.node.systemctl("show", "kubelet.service", "--property=DropInPaths", "--value").stdout

        # The supervisor writes the drop-in, then the script, then reloads systemd: the files can be in place
        # a moment before systemd has read them, so this waits for the reload itself (CI run of a1291fb).
        wait_for(lambda: node_files.KUBELET_GUARD_DROPIN in dropins(), "systemd to know the guard again", timeout=30)
        assert probe(n) == 0
    # No installer runs at boot: a broken relay and a kubelet start, and the guard puts kubelet on containerd.
    n.node.write_file(node_files.BINARY, "#!/bin/sh\necho broken release >&2\nexit 1\n", mode=0o755)
    n.node.systemctl("restart", "cri-resource-manager", check=False)
    n.node.systemctl("restart", "kubelet.service")
    wait_kubelet_on_runtime(n.node)
    assert n.node.exists(node_files.KUBELET_GUARD_MARKER)
    # A rollout repairs the node; uninstall then leaves the agent's new unit alone.
    n.install()
    wait_kubelet_on_relay(n.node)
    n.uninstall()
    assert n.node.read_file(unit) == rewritten.encode()
    wait_kubelet_on_runtime(n.node)


def test_static_config_rollout_reapplies_only_what_changed(installer_node) -> None:
    n = installer_node("config")
    n.install()
    installed = snapshot(n.node)
    fallback = "policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 750m\n"

    n.set_config(fallback_cfg=fallback)
    r = n.install()
    assert "/etc/cri-resmgr/fallback.cfg" in r.stderr and "(re)starting cri-resource-manager.service" in r.stderr
    assert "kubelet already runs against the relay; not restarting it" in r.stderr
    assert n.node.read_file("/etc/cri-resmgr/fallback.cfg") == fallback.encode()
    assert b"--fallback-config=/etc/cri-resmgr/fallback.cfg" in n.node.read_file("/etc/default/cri-resource-manager")

    # The same rollout again: nothing to do, nothing restarted.
    r = n.install()
    assert "install complete: 0 change(s)" in r.stderr and "not restarting it" in r.stderr

    # force.cfg replaces the fallback config: the fallback file goes away.
    n.set_config(fallback_cfg=None, force_cfg=fallback)
    n.install()
    assert not n.node.exists("/etc/cri-resmgr/fallback.cfg")
    assert b"--force-config=/etc/cri-resmgr/force.cfg" in n.node.read_file("/etc/default/cri-resource-manager")
    good = snapshot(n.node)

    # Bad input: rejected with a clear error, and nothing on the node changes.
    for key, value, message in (("EXTRA_OPTIONS", "--metrics-address=off --bogus-flag", "unknown cri-resmgr flag"),
                                ("force_cfg", "policy:\n  Active: nonsense\n", "force.cfg")):
        saved = (n.config_dir / key.replace("_cfg", ".cfg")).read_text()
        n.set_config(**{key: value})
        r = n.install(expect_rc=1)
        assert message in r.stderr
        assert probe(n) == 1
        assert snapshot(n.node) == good
        n.set_config(**{key: saved})
    n.set_config(force_cfg=None)
    n.install()
    assert snapshot(n.node) == installed
    n.uninstall()


def test_supervisor_repoints_kubelet_when_its_config_owner_rewrites_it(installer_node, tmp_path) -> None:
    n = installer_node("config")
    config = "/etc/kubernetes/kubelet-config.yaml"
    log_path = tmp_path / "supervisor.log"
    with supervising(n, log_path):
        # The file's owner writes a new version (maxPods changed) with the original endpoint, and
        # restarts kubelet: kubelet is on containerd, behind the installer's back.
        owners = LAYOUTS["config"].files[config].replace("maxPods: 110", "maxPods: 250")
        n.node.write_file(config, owners)
        n.node.systemctl("restart", "kubelet.service")
        wait_for(lambda: "not the relay; repointing it" in log_path.read_text(), "the supervisor to notice",
                 timeout=60)
        wait_for(lambda: kubelet_on_relay(n.node), "kubelet back on the relay", timeout=60)
        assert b"maxPods: 250" in n.node.read_file(config)
        assert "was rewritten by someone else" in log_path.read_text()
    # Uninstall gives back the owner's latest version, not the one from before the install.
    n.uninstall()
    assert n.node.read_file(config) == owners.encode()
    wait_kubelet_on_runtime(n.node)
