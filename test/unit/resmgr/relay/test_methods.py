"""Small pure helpers of the relay: endpoints, metadata filtering, method table, metrics address."""

from __future__ import annotations

import urllib.request

import pytest

from resmgr.relay.forwarding import forwardable_metadata
from resmgr.relay.hooks import INTERCEPTED_METHODS
from resmgr.relay.methods import IMAGE_SERVICE, RUNTIME_SERVICE, cri_methods, short_name, split_path
from resmgr.relay.metrics import RelayMetrics, parse_address, serve_metrics
from resmgr.rpc.sockets import endpoint_path, endpoint_target


def test_endpoints():
    assert endpoint_target("/run/c.sock") == "unix:///run/c.sock"
    assert endpoint_target("unix:///run/c.sock") == "unix:///run/c.sock"
    assert endpoint_path("unix:///run/c.sock") == "/run/c.sock"
    assert endpoint_path("unix:/run/c.sock") == "/run/c.sock"
    assert endpoint_path("/run/c.sock") == "/run/c.sock"
    with pytest.raises(ValueError, match="unix socket"):
        endpoint_target("tcp://1.2.3.4:5")
    for relative in ("run/c.sock", "unix://run/c.sock", "unix:run/c.sock"):
        with pytest.raises(ValueError):
            endpoint_path(relative)


def test_metadata_keeps_caller_keys_only():
    md = ((":authority", "x"), ("user-agent", "kubelet"), ("x-trace", "1"), ("grpc-timeout", "1S"),
          ("bin-bin", b"\x00"))
    assert forwardable_metadata(md) == (("x-trace", "1"), ("bin-bin", b"\x00"))
    assert forwardable_metadata((("user-agent", "k"),)) is None
    assert forwardable_metadata(None) is None


def test_method_table_covers_cri_and_intercepted_methods():
    table = cri_methods()
    for name in INTERCEPTED_METHODS:
        method = table[f"/{RUNTIME_SERVICE}/{name}"]
        assert not method.server_streaming and not method.client_streaming
    assert table[f"/{RUNTIME_SERVICE}/GetContainerEvents"].server_streaming
    assert f"/{IMAGE_SERVICE}/PullImage" in table
    assert short_name(f"/{IMAGE_SERVICE}/PullImage") == "PullImage"
    assert short_name("/foo.Bar/Baz") == "/foo.Bar/Baz"
    assert split_path("garbage") == ("", "garbage")


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
