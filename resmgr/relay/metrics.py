"""Prometheus metrics of cri-resmgr, served on instrumentation.HTTPEndpoint (/metrics).

A private registry keeps tests (several relays in one process) independent.
"""

from __future__ import annotations

import logging
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

log = logging.getLogger("resmgr.metrics")

DEFAULT_METRICS_ADDRESS = ":8891"

# CRI calls are sub-millisecond to seconds (image pulls, container stops).
_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                    0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class RelayMetrics:
    """Per-method request counts, latency, relay errors and policy errors."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.requests = Counter("cri_resmgr_requests", "CRI requests relayed, by method and gRPC status code",
                                ["method", "code"], registry=self.registry)
        self.latency = Histogram("cri_resmgr_request_duration_seconds",
                                 "CRI request latency through the relay, by method",
                                 ["method"], buckets=_LATENCY_BUCKETS, registry=self.registry)
        self.errors = Counter("cri_resmgr_relay_errors",
                              "Requests the relay could not handle as intended (undecodable message, "
                              "upstream unavailable, failed container update), by method and kind",
                              ["method", "kind"], registry=self.registry)
        self.policy_errors = Counter("cri_resmgr_policy_errors",
                                     "Resource-manager hook failures; the request passed through unchanged",
                                     ["method", "phase"], registry=self.registry)
        self.container_updates = Counter("cri_resmgr_container_updates",
                                         "UpdateContainerResources calls issued on behalf of the policy",
                                         ["result"], registry=self.registry)
        # Label lookups cost more than the observation itself; cache the children.
        self._children: dict[tuple[str, str], tuple[object, object]] = {}
        self._lock = threading.Lock()

    def observe(self, method: str, code: str, seconds: float) -> None:
        key = (method, code)
        children = self._children.get(key)
        if children is None:
            with self._lock:
                children = (self.requests.labels(method, code), self.latency.labels(method))
                self._children[key] = children
        children[0].inc()  # type: ignore[attr-defined]
        children[1].observe(seconds)  # type: ignore[attr-defined]

    def relay_error(self, method: str, kind: str) -> None:
        self.errors.labels(method, kind).inc()

    def policy_error(self, method: str, phase: str) -> None:
        self.policy_errors.labels(method, phase).inc()


def parse_address(address: str) -> tuple[str, int]:
    """Split ``host:port`` / ``:port`` (Go style) into (host, port); empty host means all interfaces."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"invalid metrics address {address!r}; expected [HOST]:PORT, e.g. ':8891'")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def serve_metrics(metrics: RelayMetrics, address: str) -> tuple[WSGIServer, threading.Thread]:
    """Start the /metrics HTTP endpoint in a daemon thread."""
    host, port = parse_address(address)
    server, thread = start_http_server(port, addr=host, registry=metrics.registry)
    log.info("serving metrics", extra={"address": f"{host}:{server.server_port}", "path": "/metrics"})
    return server, thread
