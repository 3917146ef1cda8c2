"""The agent's /metrics forwarder against a real relay MetricsServer on a unix socket (in process)."""

from __future__ import annotations

import http.client
import socket
from pathlib import Path

import pytest

from resmgr.agent.metrics_forward import ANY_PEER, ForwardingMetricsServer, read_relay_metrics
from resmgr.relay.metrics import CONTENT_TYPE
from resmgr.relay.metrics_http import MetricsServer, peer_allowed, tcp_listener, unix_listener

EXPOSITION = b"# TYPE cri_resmgr_requests_total counter\ncri_resmgr_requests_total 3\n"


def request(server: ForwardingMetricsServer, method: str = "GET") -> tuple[int, str, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.server_port, timeout=30)
    try:
        conn.request(method, "/metrics")
        answer = conn.getresponse()
        return answer.status, answer.getheader("Content-Type", ""), answer.read()
    finally:
        conn.close()


@pytest.fixture
def forwarder(tmp_path: Path):
    servers: list[MetricsServer] = []

    def start(relay_socket: Path, **kwargs: float) -> ForwardingMetricsServer:
        server = ForwardingMetricsServer(tcp_listener("127.0.0.1", 0), str(relay_socket), **kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()


def test_forwards_the_relays_exposition(tmp_path: Path, forwarder) -> None:
    path = tmp_path / "metrics.sock"
    renders = []
    relay = MetricsServer(unix_listener(str(path)), lambda: renders.append(1) or EXPOSITION, CONTENT_TYPE)
    try:
        server = forwarder(path)
        assert request(server) == (200, CONTENT_TYPE, EXPOSITION)
        assert request(server) == (200, CONTENT_TYPE, EXPOSITION)
        assert len(renders) == 2  # one relay read per scrape, nothing cached
        assert request(server, "POST")[0] == 405
        assert read_relay_metrics(str(path)) == EXPOSITION
    finally:
        relay.shutdown()


def test_503_names_the_missing_socket(tmp_path: Path, forwarder) -> None:
    path = tmp_path / "absent.sock"
    status, _, body = request(forwarder(path))
    assert status == 503
    assert f"cri-resmgr's metrics socket {path} does not exist".encode() in body


def test_503_when_nothing_listens_or_the_relay_does_not_answer(tmp_path: Path, forwarder) -> None:
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(stale))  # a socket file nobody listens on, as a crashed relay leaves behind
    status, _, body = request(forwarder(stale))
    assert (status, b"nothing listens" in body) == (503, True), body

    mute = tmp_path / "mute.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(mute))
        listener.listen(4)  # accepts (in the kernel) but never answers
        status, _, body = request(forwarder(mute, relay_timeout=0.2))
    assert status == 503
    assert b"cri-resmgr did not answer" in body


def test_any_peer_may_connect_the_network_policy_decides() -> None:
    assert peer_allowed("10.96.4.7", "10.96.1.2", ANY_PEER)
    assert peer_allowed("fd00::7", "fd00::2", ANY_PEER)
