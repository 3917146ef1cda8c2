"""Supervisor decisions over time (pure logic: timers in, action out)."""

from __future__ import annotations

from installer.supervisor import Health, SupervisorSettings, SupervisorState, decide

S = SupervisorSettings(interval_s=5, relay_timeout_s=30, recover_after_s=30, restart_backoff_s=60, max_fallbacks=3)
OK = Health("active", None, "unix:///var/run/cri-resmgr/cri-resmgr.sock", True)
SILENT = Health("active", "DEADLINE_EXCEEDED", "unix:///var/run/cri-resmgr/cri-resmgr.sock", True)


def test_healthy_relay_is_ready() -> None:
    d = decide(SupervisorState(on_relay=True, last_answer=0), OK, 5, S)
    assert (d.action, d.ready) == ("none", True)


def test_failed_or_stopped_unit_falls_back_at_once() -> None:
    for state in ("failed", "inactive"):
        d = decide(SupervisorState(on_relay=True, last_answer=0), Health(state, "gone", "", False), 1, S)
        assert d.action == "fallback" and not d.ready and state in d.reason


def test_silent_relay_falls_back_only_after_the_timeout() -> None:
    st = SupervisorState(on_relay=True, last_answer=0)
    assert decide(st, OK, 10, S).action == "none"
    d = decide(st, SILENT, 35, S)
    assert (d.action, d.ready) == ("none", True)  # 25 s of silence: still within the grace
    d = decide(st, SILENT, 41, S)
    assert d.action == "fallback" and "31s" in d.reason and "DEADLINE_EXCEEDED" in d.reason


def test_drifted_kubelet_is_repointed_only_while_the_relay_answers() -> None:
    drift = Health("active", None, "unix:///run/containerd/containerd.sock", False)
    assert decide(SupervisorState(on_relay=True, last_answer=0), drift, 1, S).action == "repoint"
    silent_drift = Health("active", "UNAVAILABLE", "unix:///run/containerd/containerd.sock", False)
    assert decide(SupervisorState(on_relay=True, last_answer=0), silent_drift, 1, S).action == "none"


def test_recovery_needs_continuous_health_and_restarts_failed_unit_with_backoff() -> None:
    st = SupervisorState(on_relay=False, last_answer=0, last_restart_attempt=0, fallbacks=[0])
    failed = Health("failed", "gone", "", False)
    assert decide(st, failed, 30, S).action == "none"  # backoff: last attempt at 0
    assert decide(st, failed, 61, S).action == "restart-unit"
    assert decide(st, failed, 70, S).action == "none"
    assert decide(st, OK, 80, S).action == "none"  # healthy since 80
    assert decide(st, SILENT, 90, S).action == "none"  # resets the healthy timer
    assert decide(st, OK, 100, S).action == "none"
    d = decide(st, OK, 131, S)
    assert (d.action, d.ready) == ("recover", True)


def test_flapping_stops_after_max_fallbacks() -> None:
    st = SupervisorState(on_relay=False, last_answer=0, fallbacks=[0, 100, 200])
    decide(st, OK, 210, S)
    d = decide(st, OK, 300, S)
    assert d.action == "none" and not d.ready and "3 fallbacks" in d.reason
    # An hour later the window has passed and recovery is possible again.
    decide(st, OK, 3800, S)
    assert decide(st, OK, 3831, S).action == "recover"


def test_a_missing_guard_is_written_again_only_while_kubelet_is_on_an_answering_relay() -> None:
    no_guard = Health("active", None, "unix:///var/run/cri-resmgr/cri-resmgr.sock", True, guard_intact=False)
    d = decide(SupervisorState(on_relay=True, last_answer=0), no_guard, 1, S)
    assert (d.action, d.ready) == ("guard", True) and "gardener-node-agent" in d.reason
    # A repoint writes the guard too, so a drifted kubelet is repointed first.
    drift = Health("active", None, "unix:///run/containerd/containerd.sock", False, guard_intact=False)
    assert decide(SupervisorState(on_relay=True, last_answer=0), drift, 1, S).action == "repoint"
    # A silent relay is the fallback's business, not the guard's.
    silent = Health("active", "UNAVAILABLE", "unix:///var/run/cri-resmgr/cri-resmgr.sock", True, guard_intact=False)
    assert decide(SupervisorState(on_relay=True, last_answer=0), silent, 1, S).action == "none"


def test_the_node_is_usable_except_while_kubelet_waits_on_a_dead_relay() -> None:
    """Readiness means "node usable" (gardener-resource-manager lifts the critical-components taint on it):
    a node on the fallback is usable though degraded; only the fallback step itself is not."""
    d = decide(SupervisorState(on_relay=True, last_answer=0), Health("failed", "gone", "", False), 1, S)
    assert d.action == "fallback" and not d.usable
    st = SupervisorState(on_relay=True, last_answer=0)
    decide(st, OK, 10, S)
    assert decide(st, SILENT, 35, S).usable  # within the grace, kubelet's calls still get answers soon
    assert not decide(st, SILENT, 41, S).usable
    on_fallback = SupervisorState(on_relay=False, last_answer=0, fallbacks=[0])
    d = decide(on_fallback, Health("failed", "gone", "", False), 61, S)
    assert d.action == "restart-unit" and not d.ready and d.usable
    flapped = SupervisorState(on_relay=False, last_answer=0, fallbacks=[0, 100, 200])
    d = decide(flapped, OK, 210, S)
    assert not d.ready and d.usable and "3 fallbacks" in d.reason
