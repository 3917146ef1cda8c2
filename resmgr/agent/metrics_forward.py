"""cri-resmgr-agent's /metrics: the relay's exposition, read from its unix socket, served on the pod network.

Why: the relay runs on the node's host network and refuses pods on TCP, but the seed's Prometheus reaches
the shoot through the kube-apiserver's pod proxy and vpn-shoot, which masquerades it to vpn-shoot's pod IP.
The agent's metrics port is admitted only from vpn-shoot pods (NetworkPolicy cri-resmgr-agent-metrics),
so the relay never has to admit the pod network. Serving reuses the relay's bounded MetricsServer (fixed
workers, deadlines, one answer per connection); each scrape is one GET to the relay with a deadline.
"""

from __future__ import annotations

import http.client
import logging
import socket
import time

from resmgr.relay.metrics import CONTENT_TYPE, parse_address
from resmgr.relay.metrics_http import MetricsServer, _response, parse_networks, tcp_listener

log = logging.getLogger("resmgr.agent.metrics")

DEFAULT_RELAY_METRICS_SOCKET = "/var/run/cri-resmgr/cri-resmgr-metrics.sock"
MAX_CONNECTIONS = 2  # one Prometheus scrapes once a minute; a second for a human with curl
SERVE_TIMEOUT = 10.0  # Prometheus' default scrape_timeout
RELAY_TIMEOUT = 8.0  # leaves the answer time to reach the scraper within SERVE_TIMEOUT
MAX_EXPOSITION = 16 << 20  # the relay's exposition is tens of KiB; anything near this is a broken peer
# Peers are not checked by address here: the NetworkPolicy decides who reaches the port.
ANY_PEER = parse_networks(["0.0.0.0/0", "::/0"])


class RelayUnavailable(Exception):
    """The relay's /metrics cannot be read; the message says why (it becomes the 503 body)."""


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.unix_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def read_relay_metrics(path: str, timeout: float = RELAY_TIMEOUT) -> bytes:
    """GET /metrics from the relay's unix socket ``path``; RelayUnavailable says why it could not."""
    conn = _UnixHTTPConnection(path, timeout)
    try:
        conn.request("GET", "/metrics", headers={"Accept": CONTENT_TYPE})
        answer = conn.getresponse()
        body = answer.read(MAX_EXPOSITION + 1)
    except FileNotFoundError:
        raise RelayUnavailable(f"cri-resmgr's metrics socket {path} does not exist (cri-resmgr is not "
                               "running on this node, or runs without --metrics-socket)") from None
    except ConnectionRefusedError:
        raise RelayUnavailable(f"nothing listens on cri-resmgr's metrics socket {path} "
                               "(cri-resmgr is restarting or stopped)") from None
    except PermissionError:
        raise RelayUnavailable(f"no permission to open cri-resmgr's metrics socket {path}") from None
    except TimeoutError:
        raise RelayUnavailable(f"cri-resmgr did not answer on {path} within {timeout:g}s") from None
    except (OSError, http.client.HTTPException) as exc:
        raise RelayUnavailable(f"reading cri-resmgr's metrics from {path} failed: {exc}") from None
    finally:
        conn.close()
    if answer.status != 200:
        raise RelayUnavailable(f"cri-resmgr answered {answer.status} {answer.reason} on {path}")
    if len(body) > MAX_EXPOSITION:
        raise RelayUnavailable(f"cri-resmgr's exposition on {path} exceeds {MAX_EXPOSITION} bytes")
    return body


class ForwardingMetricsServer(MetricsServer):
    """MetricsServer whose GET /metrics is the relay's; 503 with the reason when the relay cannot be read."""

    def __init__(self, listener: socket.socket, relay_socket: str, *, relay_timeout: float = RELAY_TIMEOUT,
                 **limits: float) -> None:
        self.relay_socket = relay_socket
        self.relay_timeout = relay_timeout
        super().__init__(listener, self.forward, CONTENT_TYPE, allowed=ANY_PEER, **limits)  # type: ignore[arg-type]

    def forward(self) -> bytes:
        return read_relay_metrics(self.relay_socket, self.relay_timeout)

    def _handle(self, conn: socket.socket, peer: tuple[str, int] | str) -> None:
        try:
            super()._handle(conn, peer)
        except RelayUnavailable as exc:
            log.warning("answering 503: %s", exc)
            # The relay's deadline ran inside the request's; the short 503 gets a fresh one.
            self._send(conn, _response("503 Service Unavailable", f"{exc}\n".encode()),
                       time.monotonic() + self.timeout)


def serve_forwarded_metrics(address: str, relay_socket: str = DEFAULT_RELAY_METRICS_SOCKET) \
        -> ForwardingMetricsServer:
    """Serve the relay's /metrics (read from ``relay_socket``) on TCP ``address`` ([HOST]:PORT)."""
    host, port = parse_address(address)
    server = ForwardingMetricsServer(tcp_listener(host, port), relay_socket, max_connections=MAX_CONNECTIONS,
                                     timeout=SERVE_TIMEOUT)
    log.info("serving cri-resmgr's metrics", extra={"address": f"{host}:{server.server_port}",
                                                    "relay_socket": relay_socket})
    return server
