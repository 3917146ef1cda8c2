"""Who may read /metrics, on real kernel networking: a network namespace of the test's own with a node
address and a foreign (pod-like) address; only the node's own address, loopback and configured CIDRs
are answered."""

from __future__ import annotations

import secrets
import shutil
import socket
import tempfile
from pathlib import Path

import pytest
from fixtures.metrics_client import scrape_unix
from integration.relay.relay_process import RelayProcess

from devland.netns import NetNS
from devland.waiting import eventually
from resmgr.relay.metrics import RelayMetrics, serve_metrics

NODE, POD, OTHER = "198.18.7.1", "198.18.7.2", "198.19.7.3"  # benchmarking ranges, private to the namespace


@pytest.fixture
def netns():
    ns = NetNS("h2-metrics-" + secrets.token_hex(3))
    ns.create([f"{NODE}/32", f"{POD}/32", f"{OTHER}/32"])
    try:
        with ns.entered():
            yield ns
    finally:
        ns.delete()


def get(source: str, target: str, port: int) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as conn:
        conn.settimeout(30)
        conn.bind((source, 0))
        conn.connect((target, port))
        conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: node\r\n\r\n")
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
        return data


def refused(metrics: RelayMetrics) -> float:
    return metrics.registry.get_sample_value("cri_resmgr_metrics_refused_total", {"reason": "forbidden"}) or 0.0


def test_only_the_node_loopback_and_allowed_networks_read_metrics(netns):
    metrics = RelayMetrics()
    metrics.observe("Version", "OK", 0.001)
    server = serve_metrics(metrics, "0.0.0.0:0", allowed=[f"{OTHER}/32"])
    try:
        port = server.server_port
        assert get("127.0.0.1", "127.0.0.1", port).startswith(b"HTTP/1.1 200 OK")   # loopback
        assert get(NODE, NODE, port).startswith(b"HTTP/1.1 200 OK")                  # the node (host network)
        forbidden = get(POD, NODE, port)                                              # a pod on the node
        assert forbidden.startswith(b"HTTP/1.1 403 Forbidden") and b"cri_resmgr" not in forbidden
        assert get(OTHER, NODE, port).startswith(b"HTTP/1.1 200 OK")                 # --metrics-allow
        assert refused(metrics) == 1
    finally:
        server.shutdown()

    node_only = serve_metrics(metrics, f"{NODE}:0")
    try:
        assert get(OTHER, NODE, node_only.server_port).startswith(b"HTTP/1.1 403 Forbidden")
        assert refused(metrics) == 2
    finally:
        node_only.shutdown()


def test_the_relay_serves_metrics_on_its_unix_socket_and_survives_a_bad_cidr(containerd):
    """The real program: --metrics-socket serves the same exposition; a bad --metrics-allow costs
    the TCP endpoint (logged), never the relay."""
    workdir = Path(tempfile.mkdtemp(prefix="metrics-", dir="/tmp"))
    path = workdir / "metrics.sock"
    relay = RelayProcess(workdir, containerd.socket,
                         args=["--metrics-socket", str(path), "--metrics-allow", "10.0.0.0/33"]).start()

    def scrape() -> bytes:
        return scrape_unix(str(path))

    try:
        assert scrape().startswith(b"HTTP/1.1 200 OK")
        # The relay counts a call once the answer is on its way: the start-up Version may come just after.
        assert eventually(lambda: b'cri_resmgr_requests_total{code="OK",method="Version"}' in scrape())
        assert oct(path.stat().st_mode & 0o777) == "0o660"
        errors = [e["msg"] for e in relay.log_entries() if e.get("level") == "error"]
        assert any("invalid metrics CIDR '10.0.0.0/33'" in msg for msg in errors), errors
    finally:
        relay.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    assert not path.exists()
