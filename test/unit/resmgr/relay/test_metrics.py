"""The relay's Prometheus metrics and their endpoint."""

from __future__ import annotations

import urllib.request

import pytest

from resmgr.relay.metrics import RelayMetrics, parse_address, serve_metrics


def test_metrics_address_parsing():
    assert parse_address(":8891") == ("0.0.0.0", 8891)
    assert parse_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_address("[::1]:9") == ("::1", 9)
    for bad in ("8891", "host:", "host:99999", "host:x"):
        with pytest.raises(ValueError, match="invalid metrics address"):
            parse_address(bad)


def test_metrics_endpoint_serves_relay_metrics():
    metrics = RelayMetrics()
    metrics.observe("Version", "OK", 0.0004)
    metrics.relay_error("CreateContainer", "undecodable_request")
    metrics.policy_error("CreateContainer", "before")
    server, _ = serve_metrics(metrics, "127.0.0.1:0")
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10).read().decode()
    finally:
        server.shutdown()
    assert 'cri_resmgr_requests_total{code="OK",method="Version"} 1.0' in body
    assert 'cri_resmgr_request_duration_seconds_bucket{le="0.0005",method="Version"} 1.0' in body
    assert 'cri_resmgr_relay_errors_total{kind="undecodable_request",method="CreateContainer"} 1.0' in body
    assert 'cri_resmgr_policy_errors_total{method="CreateContainer",phase="before"} 1.0' in body
