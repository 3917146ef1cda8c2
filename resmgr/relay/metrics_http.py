"""The /metrics HTTP endpoint: a small HTTP/1.1 server that is bounded in every way.

Why not http.server or wsgiref: they spawn a thread per connection without limit and have no
per-connection deadline, and importing them (with prometheus_client's exposition) cost the relay
about 1.9 MB of RSS. Here a fixed number of worker threads accept on one listening socket, so at
most ``max_connections`` are served at once and the rest wait in the kernel's accept queue
(``backlog``); each connection has one deadline for reading the request and one for writing the
answer, so a slow client (slowloris) is dropped, and one answer per connection (Connection: close).

Who may read over TCP: loopback peers, peers whose address is the address they connected to (the node
itself and host-network pods), and peers inside the configured CIDRs (``--metrics-allow``).
Everyone else gets 403 and is counted in ``cri_resmgr_metrics_refused_total{reason="forbidden"}``.
Over a unix socket (``--metrics-socket``) the socket file's owner, group and mode decide.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterable

log = logging.getLogger("resmgr.metrics")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_REQUEST_HEAD = 8192
DEFAULT_MAX_CONNECTIONS = 4
DEFAULT_BACKLOG = 16
DEFAULT_TIMEOUT = 10.0  # Prometheus' default scrape_timeout
LINGER_S = 1.0  # at most this long for the client to close after the answer


def parse_networks(values: Iterable[str]) -> tuple[IPNetwork, ...]:
    """CIDRs from flags (each may hold several, comma-separated); ValueError names a bad one."""
    networks = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                networks.append(ipaddress.ip_network(part, strict=False))
            except ValueError:
                raise ValueError(f"invalid metrics CIDR {part!r}; expected e.g. 10.250.0.0/16 or fd00::/64") from None
    return tuple(networks)


def _plain(address: str) -> IPAddress:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped  # a dual-stack socket shows IPv4 peers as ::ffff:a.b.c.d
    return ip


def peer_allowed(peer: str, local: str, allowed: Iterable[IPNetwork] = ()) -> bool:
    """Whether ``peer`` may read /metrics on a connection it opened to ``local``."""
    peer_ip, local_ip = _plain(peer), _plain(local)
    if peer_ip.is_loopback or peer_ip == local_ip:
        return True
    return any(peer_ip.version == net.version and peer_ip in net for net in allowed)


def _response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8",
              head_only: bool = False) -> bytes:
    head = (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode()
    return head if head_only else head + body


def tcp_listener(host: str, port: int, backlog: int = DEFAULT_BACKLOG) -> socket.socket:
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((host, port))
    listener.listen(backlog)
    return listener


def unix_listener(path: str, mode: int = 0o660, backlog: int = DEFAULT_BACKLOG) -> socket.socket:
    """A unix socket at ``path`` (a stale socket file is replaced); its file mode decides who may read."""
    if os.path.exists(path) and stat.S_ISSOCK(os.lstat(path).st_mode):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    os.chmod(path, mode)
    listener.listen(backlog)
    return listener


class MetricsServer:
    """Serves ``render()`` on GET /metrics on ``listener`` (TCP: peers checked by address; unix: by
    the socket file's permissions) until ``shutdown()``."""

    def __init__(self, listener: socket.socket, render: Callable[[], bytes], content_type: str, *,
                 allowed: Iterable[IPNetwork] = (), refused: Callable[[str], None] = lambda reason: None,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS, timeout: float = DEFAULT_TIMEOUT) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.render = render
        self.content_type = content_type
        self.allowed = tuple(allowed)
        self.refused = refused
        self.timeout = timeout
        self._listener = listener
        self._check_peer = listener.family in (socket.AF_INET, socket.AF_INET6)
        self.server_address = listener.getsockname()
        self.server_port: int = self.server_address[1] if self._check_peer else 0
        self._stopping = threading.Event()
        self._workers = [threading.Thread(target=self._work, daemon=True, name=f"metrics-{i}")
                         for i in range(max_connections)]
        for worker in self._workers:
            worker.start()

    def _work(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, peer = self._listener.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                time.sleep(0.1)  # out of descriptors and the like: transient, try again
                continue
            try:
                self._handle(conn, peer)
                self._linger(conn)
            except Exception:  # noqa: BLE001 - one bad connection never ends a worker
                log.exception("metrics connection failed")
            finally:
                conn.close()

    def _linger(self, conn: socket.socket) -> None:
        """Close gently: closing with unread request bytes would send a reset that can destroy the
        answer before the client reads it (a refused peer is answered without reading its request)."""
        try:
            conn.shutdown(socket.SHUT_WR)
            conn.settimeout(LINGER_S)
            deadline = time.monotonic() + LINGER_S
            while time.monotonic() < deadline and conn.recv(4096):
                pass
        except OSError:
            pass

    def _handle(self, conn: socket.socket, peer: tuple[str, int] | str) -> None:
        deadline = time.monotonic() + self.timeout
        if self._check_peer and not peer_allowed(peer[0], conn.getsockname()[0], self.allowed):
            self.refused("forbidden")
            self._send(conn, _response("403 Forbidden", b"metrics are readable from this node and the "
                                       b"configured networks only\n"), deadline)
            return
        head = self._read_head(conn, deadline)
        if head is None:
            return
        request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = request_line.split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            self.refused("bad_request")
            self._send(conn, _response("400 Bad Request", b"bad request\n"), deadline)
            return
        method, target = parts[0], parts[1].split("?", 1)[0]
        if method not in ("GET", "HEAD"):
            self._send(conn, _response("405 Method Not Allowed", b"only GET and HEAD\n"), deadline)
        elif target != "/metrics":
            self._send(conn, _response("404 Not Found", b"see /metrics\n"), deadline)
        else:
            self._send(conn, _response("200 OK", self.render(), self.content_type, head_only=method == "HEAD"),
                       deadline)

    def _read_head(self, conn: socket.socket, deadline: float) -> bytes | None:
        """The request head, or None (counted) if the client is too slow, too big or gone."""
        data = b""
        while b"\r\n\r\n" not in data:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.refused("timeout")
                return None
            conn.settimeout(remaining)
            try:
                chunk = conn.recv(4096)
            except TimeoutError:
                self.refused("timeout")
                return None
            except OSError:
                return None
            if not chunk:
                return None
            data += chunk
            if len(data) > MAX_REQUEST_HEAD:
                self.refused("bad_request")
                self._send(conn, _response("431 Request Header Fields Too Large", b"request head too large\n"),
                           deadline)
                return None
        return data

    def _send(self, conn: socket.socket, data: bytes, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            self.refused("timeout")
            return
        conn.settimeout(remaining)  # since Python 3.5 the total time of sendall
        try:
            conn.sendall(data)
        except TimeoutError:
            self.refused("timeout")
        except OSError:
            pass

    def shutdown(self) -> None:
        """Stop serving; workers finish the connection they hold (each bounded by the timeout)."""
        self._stopping.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the workers blocked in accept()
        except OSError:
            pass
        path = self.server_address if not self._check_peer else ""
        self._listener.close()
        if path:
            try:
                os.unlink(path)
            except OSError:
                pass
        for worker in self._workers:
            worker.join(timeout=self.timeout + 1)
