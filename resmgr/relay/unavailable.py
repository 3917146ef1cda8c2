"""Answer a client with gRPC UNAVAILABLE when the runtime cannot be reached.

Used by the splice transport, which has no upstream connection to copy frames from: it
speaks just enough HTTP/2 (via the h2 library) to answer every call with a clear status
and message, then lets the client reconnect.
"""

from __future__ import annotations

import logging
import socket

import h2.config
import h2.connection
import h2.events
import h2.exceptions

from resmgr.relay.methods import cri_methods, short_name
from resmgr.relay.metrics import RelayMetrics

log = logging.getLogger(__name__)

UNAVAILABLE = "14"


def answer_unavailable(client: socket.socket, reason: str, metrics: RelayMetrics, timeout: float = 5.0) -> None:
    """Serve ``client`` until it closes or stays idle for ``timeout`` s, failing every call with ``reason``."""
    conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=False, header_encoding=None))
    conn.initiate_connection()
    client.settimeout(timeout)
    try:
        client.sendall(conn.data_to_send())
        while True:
            data = client.recv(65536)
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
