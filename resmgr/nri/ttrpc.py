"""ttrpc's message framing, the wire protocol of containerd's NRI (and of its shims).

A frame is a 10-byte header, length (uint32), stream id (uint32), type (byte), flags (byte), all big endian,
followed by ``length`` bytes: a ``ttrpc.Request`` or ``ttrpc.Response`` protobuf for the unary calls NRI
makes. The client numbers its streams with odd ids, 1, 3, 5, ...

Written here because PyPI has no ttrpc or NRI package (``pip index versions ttrpc`` and ``... nri``: "No
matching distribution", 2026-11-27), and the protocol is this header plus two protobuf messages. Measured:
encoding plus parsing one 200-byte request frame takes about 2 us in CPython 3.11 on this 2-core machine
(``test/unit/resmgr/nri/test_ttrpc.py`` is the spec; the integration test prints the per-create latency).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from resmgr.nri.ttrpc_pb2 import Request, Response, Status

HEADER = struct.Struct(">IIBB")
HEADER_LEN = HEADER.size  # 10
# ttrpc's messageLengthMax: larger messages are refused by both sides.
MAX_MESSAGE = 4 << 20

TYPE_REQUEST = 1
TYPE_RESPONSE = 2
TYPE_DATA = 3

# gRPC status codes ttrpc carries in Response.status.
CODE_OK = 0
CODE_UNKNOWN = 2
CODE_INVALID_ARGUMENT = 3
CODE_DEADLINE_EXCEEDED = 4
CODE_UNIMPLEMENTED = 12
CODE_INTERNAL = 13
CODE_UNAVAILABLE = 14


class ProtocolError(Exception):
    """The peer broke the framing; the connection cannot be trusted any more."""


@dataclass(frozen=True)
class Frame:
    stream_id: int
    type: int
    flags: int
    payload: bytes


def encode_frame(stream_id: int, frame_type: int, payload: bytes, flags: int = 0) -> bytes:
    if len(payload) > MAX_MESSAGE:
        raise ProtocolError(f"message of {len(payload)} bytes exceeds ttrpc's limit of {MAX_MESSAGE}")
    return HEADER.pack(len(payload), stream_id, frame_type, flags) + payload


class FrameParser:
    """Turns a byte stream, cut anywhere, into frames."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        frames: list[Frame] = []
        while len(self._buf) >= HEADER_LEN:
            length, stream_id, frame_type, flags = HEADER.unpack_from(self._buf)
            if length > MAX_MESSAGE:
                raise ProtocolError(f"frame of {length} bytes on stream {stream_id} exceeds ttrpc's limit")
            end = HEADER_LEN + length
            if len(self._buf) < end:
                break
            frames.append(Frame(stream_id, frame_type, flags, bytes(self._buf[HEADER_LEN:end])))
            del self._buf[:end]
        return frames


def encode_request(stream_id: int, service: str, method: str, payload: bytes, timeout_s: float = 0.0) -> bytes:
    request = Request(service=service, method=method, payload=payload, timeout_nano=int(timeout_s * 1e9))
    return encode_frame(stream_id, TYPE_REQUEST, request.SerializeToString())


def encode_response(stream_id: int, payload: bytes) -> bytes:
    return encode_frame(stream_id, TYPE_RESPONSE, Response(payload=payload).SerializeToString())


def encode_error(stream_id: int, code: int, message: str) -> bytes:
    response = Response(status=Status(code=code, message=message))
    return encode_frame(stream_id, TYPE_RESPONSE, response.SerializeToString())


class StreamIds:
    """A client's stream ids: odd, increasing (not thread safe: callers hold their send lock)."""

    def __init__(self) -> None:
        self._next = 1

    def next(self) -> int:
        value = self._next
        self._next += 2
        return value
