"""The extension controller's own Prometheus metrics: operations, their durations, health checks, leadership.

Gardener's seed Prometheus scrapes pods in ``extension-*`` namespaces that carry the annotations
``prometheus.io/scrape: "true"`` and ``prometheus.io/port`` (gardener v1.149.3
pkg/component/observability/monitoring/prometheus/seed/podmonitors.go, the "extensions" PodMonitor; the
annotation ``prometheus.io/name`` becomes the job), so the chart annotates the pod and serves these on
``--metrics-bind-address``. Each operator has a registry of its own (tests run several in one process).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

PREFIX = "gardener_extension_cri_resmgr"
# Outcomes of one operation attempt: done, failed (lastError set, retried), or waiting (retried without an error).
SUCCEEDED, ERROR, WAITING = "succeeded", "error", "waiting"


class ExtensionMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.operations = Counter(
            f"{PREFIX}_operations", "Extension operation attempts by type (Reconcile, Restore, Delete, Migrate) "
            "and result (succeeded, error, waiting).", ["operation", "result"], registry=self.registry)
        self.duration = Histogram(
            f"{PREFIX}_operation_duration_seconds", "Time one operation attempt took, by type.", ["operation"],
            buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300), registry=self.registry)
        self.health_checks = Counter(
            f"{PREFIX}_health_checks", "Health checks by the status they reported (True, False, Unknown).",
            ["status"], registry=self.registry)
        self.leader = Gauge(
            f"{PREFIX}_leader", "1 while this replica holds the leader-election Lease and works, else 0.",
            registry=self.registry)

    @contextmanager
    def operation(self, operation: str) -> Iterator[dict[str, str]]:
        """Time one attempt; the caller sets ``result["result"]`` (error if it raises without setting it)."""
        result = {"result": ""}
        started = time.monotonic()
        try:
            yield result
        except BaseException:
            result["result"] = result["result"] or ERROR
            raise
        finally:
            self.operations.labels(operation, result["result"] or SUCCEEDED).inc()
            self.duration.labels(operation).observe(time.monotonic() - started)

    def health_checked(self, status: str) -> None:
        self.health_checks.labels(status).inc()

    def serve(self, address: str) -> None:
        """Serve /metrics on ``host:port`` from a daemon thread."""
        host, _, port = address.rpartition(":")
        start_http_server(int(port), addr=host or "0.0.0.0", registry=self.registry)
