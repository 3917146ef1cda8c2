"""The relay's Prometheus metrics: our counters, histogram and text exposition."""

from __future__ import annotations

import urllib.request

import pytest
from fixtures.metrics_client import scrape_unix
from prometheus_client.parser import text_string_to_metric_families

from resmgr.relay.metrics import (
    CONTENT_TYPE,
    RelayMetrics,
    format_value,
    parse_address,
    serve_metrics,
    serve_metrics_socket,
)


def test_metrics_address_parsing():
    assert parse_address(":8891") == ("0.0.0.0", 8891)
    assert parse_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_address("[::1]:9") == ("::1", 9)
    for bad in ("8891", "host:", "host:99999", "host:x"):
        with pytest.raises(ValueError, match="invalid metrics address"):
            parse_address(bad)


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Every sample of an exposition, parsed by prometheus_client's own text parser."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_exposition_is_valid_prometheus_text():
    metrics = RelayMetrics()
    for seconds in (0.00005, 0.0005, 0.0005, 0.003, 120.0):
        metrics.observe("Version", "OK", seconds)
    metrics.observe("CreateContainer", "INVALID_ARGUMENT", 0.02)
    metrics.relay_error("CreateContainer", "undecodable_request")
    metrics.policy_error("CreateContainer", "before")
    metrics.container_updates.labels("ok").inc(2)
    metrics.metrics_refused.labels('odd "label"\\\n').inc()
    parsed = samples(metrics.registry.exposition().decode())

    def value(name: str, **labels: str) -> float:
        return parsed[(name, frozenset(labels.items()))]

    assert value("cri_resmgr_requests_total", method="Version", code="OK") == 5
    assert value("cri_resmgr_requests_total", method="CreateContainer", code="INVALID_ARGUMENT") == 1
    # Buckets are cumulative; a value equal to a bound counts in that bucket (le).
    assert value("cri_resmgr_request_duration_seconds_bucket", method="Version", le="0.0001") == 1
    assert value("cri_resmgr_request_duration_seconds_bucket", method="Version", le="0.0005") == 3
    assert value("cri_resmgr_request_duration_seconds_bucket", method="Version", le="0.005") == 4
    assert value("cri_resmgr_request_duration_seconds_bucket", method="Version", le="60.0") == 4
    assert value("cri_resmgr_request_duration_seconds_bucket", method="Version", le="+Inf") == 5
    assert value("cri_resmgr_request_duration_seconds_count", method="Version") == 5
    assert value("cri_resmgr_request_duration_seconds_sum", method="Version") == pytest.approx(120.00405)
    assert value("cri_resmgr_relay_errors_total", method="CreateContainer", kind="undecodable_request") == 1
    assert value("cri_resmgr_policy_errors_total", method="CreateContainer", phase="before") == 1
    assert value("cri_resmgr_container_updates_total", result="ok") == 2
    assert value("cri_resmgr_metrics_refused_total", reason='odd "label"\\\n') == 1
    families = {f.name: f.type for f in text_string_to_metric_families(metrics.registry.exposition().decode())}
    assert families["cri_resmgr_requests"] == "counter"
    assert families["cri_resmgr_request_duration_seconds"] == "histogram"


def test_pool_gauge_is_read_at_scrape_time_and_a_failing_source_does_not_break_the_scrape():
    metrics = RelayMetrics()
    pools = {"shared": 3.0}
    metrics.pool_containers.collect = lambda: [(("topology-aware", p), n) for p, n in pools.items()]
    parsed = samples(metrics.registry.exposition().decode())
    pool = "cri_resmgr_pool_containers"
    assert parsed[(pool, frozenset({"policy": "topology-aware", "pool": "shared"}.items()))] == 3
    pools.update(shared=1.0, socket0=2.0)
    parsed = samples(metrics.registry.exposition().decode())
    assert parsed[(pool, frozenset({"policy": "topology-aware", "pool": "socket0"}.items()))] == 2

    def broken() -> list:
        raise RuntimeError("resource manager gone")
    metrics.pool_containers.collect = broken
    metrics.observe("Version", "OK", 0.001)
    parsed = samples(metrics.registry.exposition().decode())
    assert not any(name == pool for name, _ in parsed)
    assert parsed[("cri_resmgr_requests_total", frozenset({"method": "Version", "code": "OK"}.items()))] == 1


def test_registry_lookup_and_rules():
    metrics = RelayMetrics()
    assert metrics.registry.get_sample_value("cri_resmgr_requests_total", {"method": "Version", "code": "OK"}) is None
    metrics.observe("Version", "OK", 0.001)
    assert metrics.registry.get_sample_value("cri_resmgr_requests_total", {"method": "Version", "code": "OK"}) == 1
    with pytest.raises(ValueError, match="only go up"):
        metrics.container_updates.labels("ok").inc(-1)
    with pytest.raises(ValueError, match="takes labels"):
        metrics.requests.labels("Version")
    assert [format_value(v) for v in (1, 0.0005, float("inf"), 2.5)] == ["1.0", "0.0005", "+Inf", "2.5"]


def test_metrics_endpoint_serves_relay_metrics():
    metrics = RelayMetrics()
    metrics.observe("Version", "OK", 0.0004)
    server = serve_metrics(metrics, "127.0.0.1:0")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10) as answer:
            body, content_type = answer.read().decode(), answer.headers["Content-Type"]
    finally:
        server.shutdown()
    assert content_type == CONTENT_TYPE
    assert samples(body)[("cri_resmgr_requests_total", frozenset({"method": "Version", "code": "OK"}.items()))] == 1


def test_metrics_on_a_unix_socket(tmp_path):
    metrics = RelayMetrics()
    metrics.observe("Version", "OK", 0.0004)
    path = tmp_path / "metrics.sock"
    path.write_text("stale")  # a regular file is never replaced
    with pytest.raises(OSError):
        serve_metrics_socket(metrics, str(path))
    path.unlink()
    server = serve_metrics_socket(metrics, str(path), mode=0o600)
    try:
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        answer = scrape_unix(str(path))
    finally:
        server.shutdown()
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK")
    assert samples(body.decode())[("cri_resmgr_requests_total",
                                   frozenset({"method": "Version", "code": "OK"}.items()))] == 1
    assert not path.exists()  # removed on shutdown
