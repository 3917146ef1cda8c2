"""Prometheus metrics of cri-resmgr, served on instrumentation.HTTPEndpoint (/metrics).

The counters, histogram and text exposition are our own, not prometheus_client's: importing
prometheus_client loads its whole package (exposition, http.server, wsgiref, urllib, gzip, ...),
which added 1.9 MB to the relay's RSS (``resmgr.cli`` imported: 33.8 MB without it and wsgiref,
35.7 MB with them, measured by VmRSS after the import) for three counters and one histogram. No
smaller library does the text format without pulling in an HTTP stack. The format written here is
Prometheus text exposition 0.0.4; a unit test parses it with prometheus_client's parser.
A private registry per RelayMetrics keeps tests (several relays in one process) independent.
"""

from __future__ import annotations

import bisect
import logging
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence

from resmgr.relay.metrics_http import MetricsServer, parse_networks, tcp_listener, unix_listener
from resmgr.topology.cpuset import format_cpuset

log = logging.getLogger("resmgr.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# CRI calls are sub-millisecond to seconds (image pulls, container stops).
_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                    0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

Sample = tuple[str, dict[str, str], float]
# (pool, its CPUs, their memory nodes, its containers' CPU requests in milli-CPU)
PoolStat = tuple[str, frozenset[int], frozenset[int], int]


def format_value(value: float) -> str:
    """A sample value as Prometheus writes it (Go style): ``1.0``, ``0.0005``, ``+Inf``, ``NaN``."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels_text(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items())) + "}"


class _CounterChild:
    __slots__ = ("_lock", "value")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("counters only go up")
        with self._lock:
            self.value += amount


class _HistogramChild:
    __slots__ = ("_lock", "_bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self._lock = threading.Lock()
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # per bucket, not cumulative; the last is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self._bounds, value)  # le: a value equal to a bound falls in that bucket
        with self._lock:
            self.counts[index] += 1
            self.sum += value


class _Family:
    """One metric name with labelled children, created on first use."""

    kind = ""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: Registry) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], object] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def _new_child(self) -> object:
        raise NotImplementedError

    def labels(self, *values: str) -> object:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            with self._lock:
                child = self._children.setdefault(key, self._new_child())
        return child

    def children(self) -> list[tuple[dict[str, str], object]]:
        with self._lock:
            items = list(self._children.items())
        return [(dict(zip(self.labelnames, key, strict=True)), child) for key, child in items]

    def samples(self) -> Iterator[Sample]:
        raise NotImplementedError


class Counter(_Family):
    kind = "counter"

    def _new_child(self) -> _CounterChild:
        return _CounterChild()

    def labels(self, *values: str) -> _CounterChild:
        return super().labels(*values)  # type: ignore[return-value]

    def samples(self) -> Iterator[Sample]:
        for labels, child in self.children():
            yield self.name + "_total", labels, child.value  # type: ignore[attr-defined]


class Histogram(_Family):
    kind = "histogram"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: Registry,
                 buckets: Sequence[float]) -> None:
        self.buckets = tuple(sorted(float(b) for b in buckets))
        super().__init__(name, documentation, labelnames, registry)

    def _new_child(self) -> _HistogramChild:
        return _HistogramChild(self.buckets)

    def labels(self, *values: str) -> _HistogramChild:
        return super().labels(*values)  # type: ignore[return-value]

    def samples(self) -> Iterator[Sample]:
        for labels, child in self.children():
            with child._lock:  # type: ignore[attr-defined]
                counts, total = list(child.counts), child.sum  # type: ignore[attr-defined]
            cumulative = 0
            for bound, count in zip((*self.buckets, math.inf), counts, strict=True):
                cumulative += count
                yield self.name + "_bucket", {**labels, "le": format_value(bound)}, float(cumulative)
            yield self.name + "_count", labels, float(cumulative)
            yield self.name + "_sum", labels, total


class CallbackGauge(_Family):
    """A gauge read at scrape time: ``collect`` returns (label values, value) pairs (default: none)."""

    kind = "gauge"

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: Registry) -> None:
        super().__init__(name, documentation, labelnames, registry)
        self.collect: Callable[[], Iterable[tuple[tuple[str, ...], float]]] = lambda: ()

    def samples(self) -> Iterator[Sample]:
        try:
            items = list(self.collect())
        except Exception:  # a scrape must never fail because one source did
            log.exception("collecting %s failed", self.name)
            return
        for values, value in items:
            yield self.name, dict(zip(self.labelnames, values, strict=True)), float(value)


class Registry:
    """The metric families of one relay, rendered in the text exposition format."""

    def __init__(self) -> None:
        self._families: list[_Family] = []

    def register(self, family: _Family) -> None:
        if any(f.name == family.name for f in self._families):
            raise ValueError(f"metric {family.name} registered twice")
        self._families.append(family)

    def get_sample_value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """The value of one sample (e.g. ``cri_resmgr_requests_total`` with its labels), None if absent."""
        wanted = labels or {}
        for family in self._families:
            for sample, sample_labels, value in family.samples():
                if sample == name and sample_labels == wanted:
                    return value
        return None

    def exposition(self) -> bytes:
        """Every family in Prometheus text format 0.0.4."""
        lines: list[str] = []
        for family in self._families:
            shown = family.name + "_total" if family.kind == "counter" else family.name
            lines.append(f"# HELP {shown} {_escape_help(family.documentation)}")
            lines.append(f"# TYPE {shown} {family.kind}")
            lines.extend(f"{name}{_labels_text(labels)} {format_value(value)}"
                         for name, labels, value in family.samples())
        return ("\n".join(lines) + "\n").encode()


class RelayMetrics:
    """Per-method request counts, latency, relay errors and policy errors."""

    def __init__(self, registry: Registry | None = None) -> None:
        self.registry = registry or Registry()
        self.requests = Counter("cri_resmgr_requests", "CRI requests relayed, by method and gRPC status code",
                                ["method", "code"], self.registry)
        self.latency = Histogram("cri_resmgr_request_duration_seconds",
                                 "CRI request latency through the relay, by method",
                                 ["method"], self.registry, buckets=_LATENCY_BUCKETS)
        self.errors = Counter("cri_resmgr_relay_errors",
                              "Requests the relay could not handle as intended (undecodable message, "
                              "upstream unavailable, failed container update), by method and kind",
                              ["method", "kind"], self.registry)
        self.policy_errors = Counter("cri_resmgr_policy_errors",
                                     "Resource-manager hook failures; the request passed through unchanged",
                                     ["method", "phase"], self.registry)
        self.container_updates = Counter("cri_resmgr_container_updates",
                                         "UpdateContainerResources calls issued on behalf of the policy",
                                         ["result"], self.registry)
        self.metrics_refused = Counter("cri_resmgr_metrics_refused",
                                       "Connections to /metrics refused, by reason (forbidden peer, "
                                       "timeout, bad request)", ["reason"], self.registry)
        self.pool_containers = CallbackGauge("cri_resmgr_pool_containers",
                                             "Containers per pool (or balloon) of the active policy",
                                             ["policy", "pool"], self.registry)
        # Pool sizes as upstream's balloons/dynamic-pools metrics report them, one conventional gauge each.
        self.pool_cpus = CallbackGauge("cri_resmgr_pool_cpus",
                                       "CPUs each pool (or balloon) of the active policy owns now",
                                       ["policy", "pool"], self.registry)
        self.pool_cpuset = CallbackGauge("cri_resmgr_pool_cpuset_info",
                                         "The CPUs and memory nodes of each pool (or balloon) as cpuset labels; "
                                         "always 1", ["policy", "pool", "cpus", "mems"], self.registry)
        self.pool_requested = CallbackGauge("cri_resmgr_pool_requested_cpus",
                                            "Sum of the CPU requests of the containers in each pool (or balloon), "
                                            "in CPUs", ["policy", "pool"], self.registry)
        self.unpinned_containers = CallbackGauge(
            "cri_resmgr_unpinned_containers",
            "Containers the policy gave no CPUs of their own, by reason (not-guaranteed, fractional-cpu, "
            "not-enough-free-cpus, reserved-namespace, policy-none, ...)", ["reason"], self.registry)
        self.placement_drift = CallbackGauge(
            "cri_resmgr_placement_drift_containers",
            "Containers whose cgroup cpuset differed from the policy's decision at the last two checks "
            "(every --resync-period)", [], self.registry)
        self.config_errors = Counter("cri_resmgr_config_errors",
                                     "Configs refused at startup, on SIGHUP or from the agent; the relay kept "
                                     "running on the last good config or policy none, by source (force-config, "
                                     "fallback-config, agent)",
                                     ["source"], self.registry)
        self.controller_failures = CallbackGauge(
            "cri_resmgr_controller_failures",
            "Controller failures since cri-resmgr started, by controller (cpu, rdt, blockio) and stage "
            "(configure: a config it could not apply, container: a class not applied to a container, "
            "assign: CPU class limits not written); the CRI calls went on", ["controller", "stage"], self.registry)
        # Label lookups cost more than the observation itself; cache the children.
        self._children: dict[tuple[str, str], tuple[_CounterChild, _HistogramChild]] = {}
        self._lock = threading.Lock()

    def observe(self, method: str, code: str, seconds: float) -> None:
        key = (method, code)
        children = self._children.get(key)
        if children is None:
            with self._lock:
                children = (self.requests.labels(method, code), self.latency.labels(method))
                self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def watch_pools(self, stats: Callable[[], tuple[str, list[PoolStat]]]) -> None:
        """Feed the pool gauges from ``stats`` (ResourceManager.pool_stats), read at every scrape."""
        self.pool_cpus.collect = lambda: [((policy, pool), len(cpus)) for policy, (pool, cpus, _, _) in _each(stats)]
        self.pool_cpuset.collect = lambda: [((policy, pool, format_cpuset(cpus), format_cpuset(mems)), 1)
                                            for policy, (pool, cpus, mems, _) in _each(stats)]
        self.pool_requested.collect = lambda: [((policy, pool), milli / 1000)
                                               for policy, (pool, _, _, milli) in _each(stats)]

    def watch_placements(self, unpinned: Callable[[], Iterable[tuple[tuple[str, ...], float]]],
                         drifted: Callable[[], float]) -> None:
        """Feed the placement gauges (ResourceManager.unpinned_counts and .drifted_containers) at every scrape."""
        self.unpinned_containers.collect = unpinned
        self.placement_drift.collect = lambda: [((), drifted())]

    def relay_error(self, method: str, kind: str) -> None:
        self.errors.labels(method, kind).inc()

    def policy_error(self, method: str, phase: str) -> None:
        self.policy_errors.labels(method, phase).inc()


def _each(stats: Callable[[], tuple[str, list[PoolStat]]]) -> Iterator[tuple[str, PoolStat]]:
    policy, pools = stats()
    return ((policy, pool) for pool in pools)


def parse_address(address: str) -> tuple[str, int]:
    """Split ``host:port`` / ``:port`` (Go style) into (host, port); empty host means all interfaces."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"invalid metrics address {address!r}; expected [HOST]:PORT, e.g. ':8891'")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def serve_metrics(metrics: RelayMetrics, address: str, allowed: tuple[str, ...] | list[str] = (),
                  **limits: float) -> MetricsServer:
    """Start the /metrics endpoint on TCP ``address`` (worker threads, daemon). ``allowed``: CIDRs
    beyond loopback and the node itself."""
    host, port = parse_address(address)
    server = MetricsServer(tcp_listener(host, port), metrics.registry.exposition, CONTENT_TYPE,
                           allowed=parse_networks(allowed), refused=_refused_counter(metrics),
                           **limits)  # type: ignore[arg-type]
    log.info("serving metrics", extra={"address": f"{host}:{server.server_port}", "path": "/metrics",
                                       "allowed": ",".join(str(n) for n in server.allowed) or "node only"})
    return server


def serve_metrics_socket(metrics: RelayMetrics, path: str, mode: int = 0o660, **limits: float) -> MetricsServer:
    """Start the /metrics endpoint on a unix socket; whoever may open ``path`` may read."""
    server = MetricsServer(unix_listener(path, mode), metrics.registry.exposition, CONTENT_TYPE,
                           refused=_refused_counter(metrics), **limits)  # type: ignore[arg-type]
    log.info("serving metrics", extra={"address": f"unix://{path}", "path": "/metrics"})
    return server


def start_metrics_servers(metrics: RelayMetrics, address: str, allowed: list[str], socket_path: str) \
        -> list[MetricsServer]:
    """The /metrics servers the flags ask for: TCP ``address`` ('' or 'off': none) and ``socket_path``.
    Metrics are not worth failing kubelet's runtime for: a server that cannot start is logged loudly
    and the relay goes on without it."""
    servers = []
    if address and address != "off":
        try:
            servers.append(serve_metrics(metrics, address, allowed))
        except (OSError, ValueError) as err:
            log.error("cannot serve metrics on %s: %s; continuing without it", address, err)
    if socket_path:
        try:
            servers.append(serve_metrics_socket(metrics, socket_path))
        except OSError as err:
            log.error("cannot serve metrics on unix socket %s: %s; continuing without it", socket_path, err)
    return servers


def _refused_counter(metrics: RelayMetrics) -> Callable[[str], None]:
    return lambda reason: metrics.metrics_refused.labels(reason).inc()
