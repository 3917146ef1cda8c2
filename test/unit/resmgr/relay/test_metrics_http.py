"""The bounded /metrics server: who may read, deadlines, connection cap (real sockets on loopback)."""

from __future__ import annotations

import ipaddress
import socket
from collections import Counter

import pytest

from resmgr.relay.metrics_http import MetricsServer, parse_networks, peer_allowed, tcp_listener


def request(port: int, raw: bytes = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", timeout: float = 30) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(raw)
        return read_all(conn)


def read_all(conn: socket.socket) -> bytes:
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data


@pytest.fixture
def serve():
    servers: list[MetricsServer] = []
    refused: Counter[str] = Counter()

    def start(**kwargs) -> MetricsServer:
        server = MetricsServer(tcp_listener("127.0.0.1", 0), lambda: b"up 1\n", "text/plain; version=0.0.4",
                               refused=lambda reason: refused.update([reason]), **kwargs)
        servers.append(server)
        return server

    start.refused = refused  # type: ignore[attr-defined]
    yield start
    for server in servers:
        server.shutdown()


def test_who_may_read():
    allowed = parse_networks(["10.250.0.0/16, fd00::/64", "100.64.0.0/10"])
    assert peer_allowed("127.0.0.1", "127.0.0.1") and peer_allowed("::1", "::1")
    assert peer_allowed("127.0.0.2", "10.0.0.5")                      # loopback, any 127/8 address
    assert peer_allowed("10.0.0.5", "10.0.0.5")                       # the node itself / host network
    assert peer_allowed("::ffff:10.0.0.5", "::ffff:10.0.0.5")
    assert not peer_allowed("10.0.0.6", "10.0.0.5")                   # a pod, another node
    assert not peer_allowed("::ffff:10.0.0.6", "::ffff:10.0.0.5")
    assert peer_allowed("10.250.3.4", "10.0.0.5", allowed)
    assert peer_allowed("::ffff:100.96.1.2", "::ffff:10.0.0.5", allowed)  # mapped IPv4 against IPv4 CIDRs
    assert peer_allowed("fd00::7", "fd00:1::1", allowed)
    assert not peer_allowed("10.251.0.1", "10.0.0.5", allowed)
    assert allowed[0] == ipaddress.ip_network("10.250.0.0/16")
    with pytest.raises(ValueError, match="invalid metrics CIDR '10.0.0.0/33'"):
        parse_networks(["10.0.0.0/33"])


def test_answers_get_head_and_refuses_the_rest(serve):
    server = serve()
    answer = request(server.server_port)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\nup 1\n")
    assert b"Content-Type: text/plain; version=0.0.4\r\n" in answer and b"Connection: close\r\n" in answer
    head = request(server.server_port, b"HEAD /metrics?x=1 HTTP/1.1\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n") and b"Content-Length: 5" in head
    assert request(server.server_port, b"GET / HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404 ")
    assert request(server.server_port, b"POST /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405 ")
    assert request(server.server_port, b"hello\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    assert request(server.server_port, b"GET /metrics HTTP/1.1\r\nX: " + b"y" * 9000).startswith(b"HTTP/1.1 431 ")
    assert serve.refused == {"bad_request": 2}


def test_slow_client_is_dropped_after_the_deadline(serve):
    server = serve(timeout=0.5)
    with socket.create_connection(("127.0.0.1", server.server_port), timeout=30) as slow:
        slow.sendall(b"GET /metr")  # and never the rest
        assert read_all(slow) == b""  # closed by the server, without an answer
    assert serve.refused == {"timeout": 1}
    assert request(server.server_port).startswith(b"HTTP/1.1 200 OK")  # the worker serves again


def test_connection_cap_holds(serve):
    server = serve(max_connections=2, timeout=60)
    idle = [socket.create_connection(("127.0.0.1", server.server_port), timeout=30) for _ in range(2)]
    try:
        for conn in idle:  # both workers now wait for these requests
            conn.sendall(b"GET /met")
        waiting = socket.create_connection(("127.0.0.1", server.server_port), timeout=30)
        waiting.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        waiting.settimeout(1.0)
        with pytest.raises(TimeoutError):  # queued in the kernel's backlog, not served by a third thread
            waiting.recv(1)
        idle.pop().close()  # frees a worker
        waiting.settimeout(30)
        assert read_all(waiting).startswith(b"HTTP/1.1 200 OK")
        waiting.close()
    finally:
        for conn in idle:
            conn.close()
