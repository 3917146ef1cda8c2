"""Answer a client with gRPC UNAVAILABLE when the runtime cannot be reached.

Used by the splice transport, which has no upstream connection to copy frames from: it
speaks just enough HTTP/2 (via the h2 library) to answer every call with a clear status
and message, then says GOAWAY and hangs up, so that the client's next connection tries the
runtime again.

The answering connection lives for a fixed time, not until the client is idle: kubelet keeps one
connection and calls on it at least once a second (PLEG's relist), so an idle timeout never ended
it. Found on the landscape: containerd, restarted by gardener-node-agent, served again 0.2 s later,
but kubelet's calls were answered UNAVAILABLE for 5 minutes and the node went NotReady.
"""

from __future__ import annotations

import logging
import socket
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions

from resmgr.relay.methods import cri_methods, short_name
from resmgr.relay.metrics import RelayMetrics

log = logging.getLogger(__name__)

UNAVAILABLE = "14"


# How long one answering connection lives. Short, because the runtime may be back any moment (a
# restarted containerd serves within a second); long enough that a client retrying at once does not
# make the relay accept a connection per call.
ANSWER_LIFETIME = 1.0


def answer_unavailable(client: socket.socket, reason: str, metrics: RelayMetrics,
                       lifetime: float = ANSWER_LIFETIME) -> None:
    """Fail every call on ``client`` with ``reason`` for ``lifetime`` s (or until the client closes), then
    send GOAWAY and close the connection."""
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False, header_encoding=None))
    conn.initiate_connection()
    deadline = time.monotonic() + lifetime
    try:
        client.sendall(conn.data_to_send())
        while (remaining := deadline - time.monotonic()) > 0:
            client.settimeout(remaining)
            try:
                data = client.recv(65536)
            except TimeoutError:
                break
            if not data:
                return
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    path = dict(event.headers).get(b":path", b"").decode("utf-8", "replace")
                    name = short_name(path) if path in cri_methods() else "other"
                    metrics.observe(name, "UNAVAILABLE", 0.0)
                    metrics.relay_error(name, "upstream_unavailable")
                    conn.send_headers(event.stream_id, [
                        (b":status", b"200"), (b"content-type", b"application/grpc"),
                        (b"grpc-status", UNAVAILABLE.encode()), (b"grpc-message", _percent_encode(reason)),
                    ], end_stream=True)
                elif isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.ConnectionTerminated):
                    return
            client.sendall(conn.data_to_send())
        conn.close_connection()  # GOAWAY (NO_ERROR): the client reconnects, and the relay tries the runtime again
        client.settimeout(1.0)
        client.sendall(conn.data_to_send())
    except (OSError, h2.exceptions.ProtocolError) as err:
        log.debug("unavailable responder: %s", err)
    finally:
        client.close()


def _percent_encode(text: str) -> bytes:
    # grpc-message is percent-encoded UTF-8 (gRPC over HTTP/2 spec).
    out = bytearray()
    for byte in text.encode("utf-8"):
        out += bytes((byte,)) if 0x20 <= byte <= 0x7E and byte != 0x25 else f"%{byte:02X}".encode()
    return bytes(out)
