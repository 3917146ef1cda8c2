"""Supervision after install: keep the node working whatever happens to cri-resmgr.

Every ``interval_s`` the supervisor looks at ``cri-resource-manager.service``, calls CRI Version on
the relay socket (on a new connection and on one kept open, as kubelet's is: see RelayProbe) and
reads the endpoint of the running kubelet. :func:`decide` turns that into
one action:

* **fallback**: the unit has failed or was stopped, or the relay has not answered for more than
  ``relay_timeout_s`` (30 s). Kubelet gets its original files back (pointing at containerd) and
  is restarted; the node record says degraded, with the reason.
* **recover** (what happens when cri-resmgr is healthy again): while on the fallback, a failed or
  stopped unit is restarted at most every ``restart_backoff_s``. Once the unit is active and the
  relay has answered continuously for ``recover_after_s``, kubelet is repointed at the relay and
  the record says installed again. After ``max_fallbacks`` fallbacks within
  ``fallback_window_s`` it stops flapping: kubelet stays on containerd and the record stays
  degraded until the pod is restarted (a new rollout or an operator's delete).

The installer pod's readiness is ``usable``: the node's kubelet has a runtime that answers. A node on
the fallback is usable, so gardener-resource-manager lifts its critical-components taint and it takes
workloads on containerd; the degradation shows in the node record and the Extension's health.
* **repoint**: kubelet runs against something other than the relay although it should not (its
  configuration was rewritten, e.g. by gardener-node-agent): apply the repoint again.
* **guard**: kubelet is on the relay but the kubelet guard (its drop-in or script) is gone or changed:
  gardener-node-agent removes ``kubelet.service.d`` whole whenever it rewrites kubelet.service, and restarts
  kubelet, which still reads the repoint from ``/var/lib/kubelet/extra_args``. Write the guard again, so the
  next kubelet start (a reboot) is guarded; no kubelet restart.

**Kubelet restart budget.** Every fallback, recover and repoint restarts kubelet, and each restart is a
NotReady→Ready toggle of the Node. gardener-node-agent counts those: at 5 within 10 minutes it warns that
the node should be rebooted (gardener v1.149.3 pkg/nodeagent/controller/healthcheck/kubelet.go,
``maxToggles``/``toggleTimeSpan``; before v1.128 it rebooted the node). So a recover or repoint waits while
it would leave no room for one more fallback within ``max_kubelet_restarts`` per ``kubelet_restart_window_s``
(4 per 10 minutes): a crash-looping relay alone never reaches node-agent's count. A fallback is never held
back: it is what keeps the node usable.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from installer import node_files, systemd
from installer.cri_check import CriUnavailable, RelayProbe
from installer.install import KUBELET_TARGET, NodeInstaller

log = logging.getLogger("installer.supervisor")


@dataclass(frozen=True)
class SupervisorSettings:
    interval_s: float = 5.0
    relay_timeout_s: float = 30.0
    recover_after_s: float = 30.0
    restart_backoff_s: float = 60.0
    max_fallbacks: int = 3
    fallback_window_s: float = 3600.0
    max_kubelet_restarts: int = 4  # below gardener-node-agent's 5 toggles ...
    kubelet_restart_window_s: float = 600.0  # ... within 10 minutes

    def __post_init__(self) -> None:
        if self.max_kubelet_restarts < 2:
            raise ValueError(f"max_kubelet_restarts={self.max_kubelet_restarts}: at least 2 (recovery + fallback)")


@dataclass(frozen=True)
class Health:
    unit_state: str  # systemd ActiveState of cri-resource-manager.service
    relay_error: str | None  # None when the relay answered CRI Version
    kubelet_endpoint: str  # effective endpoint of the running kubelet, "" if unknown
    kubelet_on_relay: bool
    guard_intact: bool = True  # the kubelet guard is on the node as last written (read only while on the relay)


@dataclass
class SupervisorState:
    on_relay: bool
    last_answer: float
    healthy_since: float | None = None
    last_restart_attempt: float = float("-inf")
    fallbacks: list[float] = field(default_factory=list)
    kubelet_restarts: list[float] = field(default_factory=list)  # when this supervisor restarted kubelet


@dataclass(frozen=True)
class Decision:
    action: str  # "none", "fallback", "recover", "repoint", "guard", "restart-unit"
    ready: bool  # kubelet uses a working relay (the node record says installed, else degraded)
    reason: str
    # The node is usable: kubelet's runtime answers, through the relay or (after a fallback) containerd itself.
    # False only while kubelet is still pointed at a relay that stopped serving (the fallback is under way).
    usable: bool = True
    held: bool = False  # a recover or repoint waits for the kubelet restart budget


def restart_budget_wait(state: SupervisorState, now: float, s: SupervisorSettings) -> float:
    """Seconds until a kubelet restart that is not a fallback fits the budget (0: it fits now); it must
    leave room for one fallback within ``max_kubelet_restarts`` per ``kubelet_restart_window_s``."""
    recent = sorted(t for t in state.kubelet_restarts if now - t < s.kubelet_restart_window_s)
    excess = len(recent) - (s.max_kubelet_restarts - 2)  # this restart and one fallback must still fit
    if excess <= 0:
        return 0.0
    return recent[excess - 1] + s.kubelet_restart_window_s - now


def decide(state: SupervisorState, health: Health, now: float, s: SupervisorSettings) -> Decision:
    """Pure decision logic; updates the timers in ``state`` but performs no action."""
    answered = health.relay_error is None
    if answered:
        state.last_answer = now
    healthy = answered and health.unit_state == "active"
    if healthy:
        state.healthy_since = state.healthy_since if state.healthy_since is not None else now
    else:
        state.healthy_since = None
    if state.on_relay:
        if health.unit_state in ("failed", "inactive"):
            return Decision("fallback", False, f"{node_files.UNIT} is {health.unit_state}", usable=False)
        silent = now - state.last_answer
        if not answered and silent > s.relay_timeout_s:
            return Decision("fallback", False, f"the relay has not answered CRI Version for {silent:.0f}s "
                                               f"(> {s.relay_timeout_s:g}s): {health.relay_error}", usable=False)
        if not answered:
            return Decision("none", True, f"the relay has not answered for {silent:.0f}s: {health.relay_error}")
        if health.kubelet_endpoint and not health.kubelet_on_relay:
            wait = restart_budget_wait(state, now, s)
            if wait > 0:
                return Decision("none", True, f"kubelet runs against {health.kubelet_endpoint}, not the relay; "
                                              f"repointing it in {wait:.0f}s ({_budget(s)})", held=True)
            return Decision("repoint", True,
                            f"kubelet runs against {health.kubelet_endpoint}, not the relay; repointing it")
        if not health.guard_intact:
            return Decision("guard", True, f"the kubelet guard ({node_files.KUBELET_GUARD_DROPIN} or its script) is "
                                           "gone or changed, as when gardener-node-agent rewrites kubelet.service; "
                                           "writing it again")
        return Decision("none", True, "cri-resmgr is active and kubelet uses the relay")
    recent = [t for t in state.fallbacks if now - t <= s.fallback_window_s]
    base = "kubelet is on the container runtime (fallback)"
    if len(recent) >= s.max_fallbacks:
        return Decision("none", False, f"{base}: {len(recent)} fallbacks within {s.fallback_window_s:g}s, "
                                       "not retrying the relay until the installer pod restarts")
    if health.unit_state in ("failed", "inactive"):
        if now - state.last_restart_attempt >= s.restart_backoff_s:
            state.last_restart_attempt = now
            return Decision("restart-unit", False, f"{base}; restarting {node_files.UNIT} ({health.unit_state})")
        return Decision("none", False, f"{base}: {node_files.UNIT} is {health.unit_state}")
    if healthy and state.healthy_since is not None and now - state.healthy_since >= s.recover_after_s:
        wait = restart_budget_wait(state, now, s)
        if wait > 0:
            return Decision("none", False, f"{base}: the relay is healthy; pointing kubelet at it in {wait:.0f}s "
                                           f"({_budget(s)})", held=True)
        return Decision("recover", True, f"the relay has been healthy for {now - state.healthy_since:.0f}s; "
                                         "pointing kubelet at it again")
    detail = "relay answers, waiting for it to stay healthy" if healthy else (
        f"{node_files.UNIT} is {health.unit_state}, relay: {health.relay_error or 'answers'}")
    return Decision("none", False, f"{base}: {detail}")


def record(state: SupervisorState, decision: Decision, now: float, s: SupervisorSettings) -> None:
    """What a performed action does to the supervisor's own state (``now``: when it was done); times that
    left their window are dropped, so a node supervised for months keeps a few entries, not one per action."""
    state.kubelet_restarts[:] = [t for t in state.kubelet_restarts if now - t < s.kubelet_restart_window_s]
    state.fallbacks[:] = [t for t in state.fallbacks if now - t <= s.fallback_window_s]
    if decision.action in ("fallback", "recover", "repoint"):
        state.kubelet_restarts.append(now)
    if decision.action == "fallback":
        state.on_relay = False
        state.fallbacks.append(now)
        state.last_restart_attempt = now  # give systemd's own restarts time first
    elif decision.action in ("recover", "repoint"):
        state.on_relay = True
        state.last_answer = now


def _budget(s: SupervisorSettings) -> str:
    return (f"at most {s.max_kubelet_restarts} kubelet restarts per {s.kubelet_restart_window_s:g}s, one kept for a "
            "fallback; gardener-node-agent warns at 5 NotReady-Ready toggles in 10 minutes")


class Supervisor:
    def __init__(self, installer: NodeInstaller, settings: SupervisorSettings,
                 report: Callable[[Decision], None] = lambda decision: None) -> None:
        self.installer = installer
        self.settings = settings
        self.report = report  # told before an action starts (a fallback takes seconds)
        target = installer.journal().get(KUBELET_TARGET, "relay")
        self.state = SupervisorState(on_relay=target == "relay", last_answer=time.monotonic())
        self.probe = RelayProbe(installer.host, node_files.RELAY_ENDPOINT)
        self.holding = False  # a recover or repoint is held back by the restart budget (logged once when it starts)

    def check(self) -> Health:
        host = self.installer.host
        unit_state = systemd.is_active(host, node_files.UNIT)
        try:
            self.probe.check()
            relay_error = None
        except CriUnavailable as exc:
            relay_error = str(exc)
        endpoint, _ = self.installer.kubelet_running_endpoint()
        on_relay = bool(endpoint) and self.installer.same_endpoint(endpoint, node_files.RELAY_ENDPOINT)
        guard = self.installer.kubelet_guard_intact() if self.state.on_relay else True
        return Health(unit_state, relay_error, endpoint, on_relay, guard)

    def tick(self) -> Decision:
        now = time.monotonic()
        decision = decide(self.state, self.check(), now, self.settings)
        if decision.action == "none":
            if decision.held and not self.holding:
                log.info("supervisor: %s", decision.reason, extra={"action": "wait"})
            else:
                log.debug(decision.reason)
            self.holding = decision.held
            return decision
        self.holding = False
        log.warning("supervisor: %s", decision.reason, extra={"action": decision.action})
        self.report(decision)
        if decision.action == "fallback":
            self.installer.point_kubelet_at_runtime(decision.reason)
        elif decision.action == "restart-unit":
            systemd.reset_failed(self.installer.host, node_files.UNIT)
            systemd.restart(self.installer.host, node_files.UNIT)
        elif decision.action == "guard":
            self.installer.put_kubelet_guard()
        elif decision.action in ("recover", "repoint"):
            self.installer.point_kubelet_at_relay()
        record(self.state, decision, time.monotonic(), self.settings)
        return decision
