"""NRI's connection multiplexer (github.com/containerd/nri pkg/net/multiplex): two byte streams over one socket.

Each chunk is an 8-byte header, connection id (uint32) and payload length (uint32), big endian, then the
payload: a piece of that connection's byte stream (here: ttrpc frames). Connection 1 carries the plugin's
service (containerd calls Configure, Synchronize, CreateContainer, ...), connection 2 the runtime's
(the plugin calls RegisterPlugin, UpdateContainers). Id 0 is reserved. A chunk for a connection nobody
opened is dropped, as upstream drops it.
"""

from __future__ import annotations

import struct

HEADER = struct.Struct(">II")
PLUGIN_CONN = 1
RUNTIME_CONN = 2
# Upstream's maxPayloadSize: one ttrpc header plus ttrpc's largest message.
MAX_CHUNK = 10 + (4 << 20)


class ProtocolError(Exception):
    """The peer broke the multiplexer's framing."""


def encode(conn_id: int, data: bytes) -> bytes:
    """``data`` for connection ``conn_id`` as chunks of at most MAX_CHUNK bytes (one empty chunk for no data)."""
    if conn_id <= 0:
        raise ValueError(f"connection id {conn_id} is reserved")
    if not data:
        return HEADER.pack(conn_id, 0)
    view = memoryview(data)
    return b"".join(HEADER.pack(conn_id, len(view[i:i + MAX_CHUNK])) + bytes(view[i:i + MAX_CHUNK])
                    for i in range(0, len(view), MAX_CHUNK))


class Demux:
    """Splits the trunk's byte stream, cut anywhere, into (connection id, payload) chunks."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._buf += data
        chunks: list[tuple[int, bytes]] = []
        while len(self._buf) >= HEADER.size:
            conn_id, length = HEADER.unpack_from(self._buf)
            if length > MAX_CHUNK:
                raise ProtocolError(f"chunk of {length} bytes for connection {conn_id} exceeds {MAX_CHUNK}")
            end = HEADER.size + length
            if len(self._buf) < end:
                break
            chunks.append((conn_id, bytes(self._buf[HEADER.size:end])))
            del self._buf[:end]
        return chunks


class Streams:
    """The demultiplexed bytes per known connection; chunks for other ids are counted and dropped."""

    def __init__(self, known: tuple[int, ...]) -> None:
        self._demux = Demux()
        self.known = frozenset(known)
        self.dropped = 0

    def feed(self, data: bytes) -> dict[int, bytes]:
        out: dict[int, bytearray] = {}
        for conn_id, payload in self._demux.feed(data):
            if conn_id not in self.known:
                self.dropped += 1
                continue
            out.setdefault(conn_id, bytearray()).extend(payload)
        return {k: bytes(v) for k, v in out.items()}
