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
        self._ready = False
        self._lock = threading.Lock()
        self._channel.subscribe(self._on_state, try_to_connect=False)

    def _on_state(self, state: grpc.ChannelConnectivity) -> None:
        with self._lock:
            lost = self._ready and state != grpc.ChannelConnectivity.READY
            self._ready = state == grpc.ChannelConnectivity.READY
            if lost:
                self._epoch += 1
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
        # An answer proves the connection. grpc's subscription reports the state its watcher reads after a
        # change, so READY can be skipped when the connection drops right after: a cri-resmgr restarted just
        # after a push then went unnoticed (seen in a loaded CI run) and never got its config again.
        with self._lock:
            self._ready = True
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
