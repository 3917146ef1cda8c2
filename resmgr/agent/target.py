"""The agent's client for cri-resmgr's Config API (resmgr/proto/config.proto) on the config socket."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import grpc

from resmgr.agent.controller import PushError
from resmgr.agent.unix_grpc import CHANNEL_OPTIONS, call_unary
from resmgr.model.explanation import Explanation
from resmgr.model.placement_change import DryRun, PlacementChange
from resmgr.proto import config_pb2, config_pb2_grpc

log = logging.getLogger("resmgr.agent")

# Never let an idle connection drop by itself: a dropped connection means "cri-resmgr
# may have restarted", which makes the agent deliver everything again.
# Reconnect quickly after cri-resmgr restarts (a local socket: no thundering herd to fear).
_OPTIONS = [*CHANNEL_OPTIONS, ("grpc.client_idle_timeout_ms", 2**31 - 1),
            ("grpc.initial_reconnect_backoff_ms", 200), ("grpc.min_reconnect_backoff_ms", 200),
            ("grpc.max_reconnect_backoff_ms", 2000)]


FIRST_STATE_WAIT_S = 10.0  # the subscription's first state comes from a local thread

# The states a channel reaches when its connection ends (gRPC core: a closed connection leaves the channel
# IDLE, a failed one TRANSIENT_FAILURE). CONNECTING is not among them: it is the way to READY.
_ENDED = frozenset({grpc.ChannelConnectivity.IDLE, grpc.ChannelConnectivity.TRANSIENT_FAILURE,
                    grpc.ChannelConnectivity.SHUTDOWN})


class LossDetector:
    """Tells from grpc's connectivity states and the answered calls when the connection cri-resmgr answered on
    is gone (not thread-safe: the target calls it under its lock).

    grpc's subscription delivers a state it read earlier, from a thread of its own (grpc 1.85
    ``_channel._deliver``), and only states that differ from the one delivered before. So under load a
    CONNECTING read on the way to READY arrives after the first answer: no loss, and the answer still stands.
    READY may be skipped when a connection drops right after a call: the answer proves the connection, and
    the next ended state is a loss."""

    def __init__(self) -> None:
        self.last: grpc.ChannelConnectivity | None = None  # the state delivered last
        self.answered = False  # a call was answered since a state other than CONNECTING was delivered

    def answer(self) -> None:
        self.answered = True

    def delivered(self, state: grpc.ChannelConnectivity) -> bool:
        """Whether ``state``, delivered now, means the connection is lost."""
        if state == grpc.ChannelConnectivity.READY:
            lost = False
        else:
            lost = self.last == grpc.ChannelConnectivity.READY or (self.answered and state in _ENDED)
        self.last = state
        if state != grpc.ChannelConnectivity.CONNECTING:
            self.answered = False
        return lost


class ConfigSocketTarget:
    """Pushes to cri-resmgr; ``epoch()`` increases whenever an established connection is lost."""

    def __init__(self, socket_path: str, *, timeout: float = 30.0,
                 on_connection_lost: Callable[[], None] | None = None) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self.on_connection_lost = on_connection_lost
        self._channel = grpc.insecure_channel("unix://" + socket_path, options=_OPTIONS)
        self._stub = config_pb2_grpc.ConfigStub(self._channel)
        self._epoch = 0
        self._losses = LossDetector()
        self._lock = threading.Lock()
        self._first_state = threading.Event()
        self._channel.subscribe(self._on_state, try_to_connect=False)
        # The subscription's first state (read before any call) must not arrive after an answer, where it
        # would look like a connection that ended: wait for it. It comes from a local thread, not the socket.
        if not self._first_state.wait(timeout=FIRST_STATE_WAIT_S):
            log.warning("grpc delivered no connectivity state of %s within %gs", socket_path, FIRST_STATE_WAIT_S)

    def _on_state(self, state: grpc.ChannelConnectivity) -> None:
        with self._lock:
            lost = self._losses.delivered(state)
            if lost:
                self._epoch += 1
        self._first_state.set()
        if lost:
            log.info("connection to cri-resmgr on %s lost; will deliver the config again", self.socket_path)
            if self.on_connection_lost is not None:
                self.on_connection_lost()

    def epoch(self) -> int:
        with self._lock:
            return self._epoch

    def close(self) -> None:
        self._channel.unsubscribe(self._on_state)
        self._channel.close()

    def _call(self, name: str, request: Any) -> Any:
        reply = call_unary(self._stub, name, request, self.timeout, PushError, self.socket_path)
        # An answer proves the connection (LossDetector): a cri-resmgr restarted just after a push went
        # unnoticed when grpc skipped READY (seen in a loaded CI run) and never got its config again.
        with self._lock:
            self._losses.answer()
        return reply

    def set_config(self, node: str, sections: Mapping[str, str], source: str) -> str:
        reply = self._call("SetConfig", config_pb2.SetConfigRequest(node_name=node, config=dict(sections),
                                                                     source=source))
        return reply.error

    def dry_run(self, node: str, sections: Mapping[str, str], source: str) -> DryRun | None:
        """What SetConfig would do with ``sections``, changing nothing (a canary's report before it pushes); None:
        this cri-resmgr is older than the agent and has no dry run."""
        try:
            reply = self._call("DryRunConfig", config_pb2.SetConfigRequest(node_name=node, config=dict(sections),
                                                                            source=source))
        except PushError as exc:
            if "DryRunConfig on" in str(exc) and ": UNIMPLEMENTED: " in str(exc):  # call_unary's "CODE: details"
                return None
            raise
        return DryRun(error=reply.error, policy=reply.policy, containers=reply.containers,
                      changes=[PlacementChange(container=c.container, container_id=c.container_id,
                                               old_cpus=c.old_cpus, new_cpus=c.new_cpus, old_mems=c.old_mems,
                                               new_mems=c.new_mems, old_pool=c.old_pool, new_pool=c.new_pool,
                                               old_unpinned=c.old_unpinned, new_unpinned=c.new_unpinned,
                                               error=c.error) for c in reply.changes])

    def set_adjustments(self, node: str, specs: Mapping[str, str]) -> tuple[dict[str, dict[str, Any]], str]:
        reply = self._call("SetAdjustment", config_pb2.SetAdjustmentRequest(node_name=node,
                                                                             adjustments=dict(specs)))
        results = {name: {"error": r.error, "container_errors": dict(r.container_errors), "applied": list(r.applied)}
                   for name, r in reply.results.items()}
        return results, reply.error

    def get_placements(self) -> list[Explanation]:
        """Where cri-resmgr's policy placed each container and why (resmgr.agent.placement_events posts them)."""
        reply = self._call("GetPlacements", config_pb2.GetPlacementsRequest())
        return [Explanation(namespace=p.namespace, pod=p.pod, pod_uid=p.pod_uid, container=p.container,
                            container_id=p.container_id, cpus=p.cpus, mems=p.mems, pool=p.pool, unpinned=p.unpinned,
                            detail=p.detail) for p in reply.placements]
