"""Supervisor decisions over time (pure logic: timers in, action out)."""

from __future__ import annotations

from installer.supervisor import Health, SupervisorSettings, SupervisorState, decide, record

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


def _crash_loop(settings: SupervisorSettings, serves_s: float = 45, hours: float = 1) -> list[float]:
    """A relay that answers for ``serves_s`` after every start and then fails, supervised every 5 s for
    ``hours``; returns when the supervisor restarted kubelet."""
    st = SupervisorState(on_relay=True, last_answer=0)
    restarts: list[float] = []
    started = 0.0
    now = 0.0
    while now < hours * 3600:
        up = now - started < serves_s
        endpoint = "unix:///var/run/cri-resmgr/cri-resmgr.sock" if st.on_relay else "unix:///run/containerd/containerd.sock"
        health = Health("active" if up else "failed", None if up else "gone", endpoint, st.on_relay)
        d = decide(st, health, now, settings)
        if d.action == "restart-unit":
            started = now
        if d.action in ("fallback", "recover", "repoint"):
            restarts.append(now)
        record(st, d, now, settings)
        most = max(settings.kubelet_restart_window_s, settings.fallback_window_s) / settings.interval_s
        assert len(st.kubelet_restarts) + len(st.fallbacks) <= 2 * most  # the state keeps its windows only
        now += settings.interval_s
    return restarts


def test_the_state_keeps_only_times_within_their_windows() -> None:
    st = SupervisorState(on_relay=True, last_answer=0, fallbacks=[0.0, 3000.0], kubelet_restarts=[0.0, 500.0, 3100.0])
    failing = Health("failed", "gone", "unix:///var/run/cri-resmgr/cri-resmgr.sock", True)
    d = decide(st, failing, 3601, S)
    assert d.action == "fallback"
    record(st, d, 3601, S)
    assert st.fallbacks == [3000.0, 3601] and st.kubelet_restarts == [3100.0, 3601]


def _most_in_window(times: list[float], window: float) -> int:
    return max((sum(1 for u in times if t <= u < t + window) for t in times), default=0)


def test_a_crash_looping_relay_stays_below_node_agents_toggle_count() -> None:
    """gardener-node-agent warns (and before v1.128 rebooted) at 5 NotReady->Ready toggles within 10 minutes;
    every fallback, recover and repoint is a kubelet restart, so the supervisor keeps them at 4 per 10
    minutes, one kept for a fallback. Without the budget the same loop restarts kubelet 5 times in 10 minutes."""
    restarts = _crash_loop(S)
    assert len(restarts) >= 4  # it did fall back and recover
    assert _most_in_window(restarts, 600) <= 4
    unbounded = SupervisorSettings(**{**S.__dict__, "max_kubelet_restarts": 100})
    assert _most_in_window(_crash_loop(unbounded), 600) >= 5


def test_a_recovery_waits_for_the_restart_budget_but_a_fallback_never_does() -> None:
    st = SupervisorState(on_relay=False, last_answer=0, fallbacks=[100], kubelet_restarts=[0, 50, 100])
    decide(st, OK, 110, S)
    d = decide(st, OK, 150, S)
    assert d.action == "none" and d.held and "kubelet restarts" in d.reason and "gardener-node-agent" in d.reason
    assert decide(st, OK, 599, S).action == "none"
    d = decide(st, OK, 600, S)
    assert d.action == "recover" and not d.held  # the restart at 0 has left the 10-minute window
    full = SupervisorState(on_relay=True, last_answer=0, kubelet_restarts=[0, 50, 100, 150])
    assert decide(full, Health("failed", "gone", "", False), 160, S).action == "fallback"
