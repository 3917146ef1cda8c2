"""ttrpc framing, byte for byte: 10-byte header (length, stream id, type, flags; big endian), then the message."""

from __future__ import annotations

import pytest

from resmgr.nri import ttrpc
from resmgr.nri.ttrpc_pb2 import Request, Response


def test_frame_header_layout() -> None:
    frame = ttrpc.encode_frame(7, ttrpc.TYPE_REQUEST, b"abc")
    assert frame == b"\x00\x00\x00\x03" + b"\x00\x00\x00\x07" + b"\x01" + b"\x00" + b"abc"


def test_parser_reassembles_fragments_byte_by_byte() -> None:
    data = ttrpc.encode_frame(1, ttrpc.TYPE_REQUEST, b"hello") + ttrpc.encode_frame(3, ttrpc.TYPE_RESPONSE, b"")
    parser = ttrpc.FrameParser()
    frames = []
    for i in range(len(data)):
        frames += parser.feed(data[i:i + 1])
    assert frames == [ttrpc.Frame(1, ttrpc.TYPE_REQUEST, 0, b"hello"), ttrpc.Frame(3, ttrpc.TYPE_RESPONSE, 0, b"")]


def test_parser_splits_coalesced_frames() -> None:
    data = b"".join(ttrpc.encode_frame(i, ttrpc.TYPE_REQUEST, bytes([i]) * i) for i in (1, 3, 5))
    frames = ttrpc.FrameParser().feed(data)
    assert [(f.stream_id, f.payload) for f in frames] == [(1, b"\x01"), (3, b"\x03" * 3), (5, b"\x05" * 5)]


def test_oversized_frame_is_refused() -> None:
    header = (ttrpc.MAX_MESSAGE + 1).to_bytes(4, "big") + (1).to_bytes(4, "big") + b"\x01\x00"
    with pytest.raises(ttrpc.ProtocolError, match="exceeds"):
        ttrpc.FrameParser().feed(header)


def test_encode_refuses_oversized_message() -> None:
    with pytest.raises(ttrpc.ProtocolError):
        ttrpc.encode_frame(1, ttrpc.TYPE_RESPONSE, b"x" * (ttrpc.MAX_MESSAGE + 1))


def test_request_and_response_round_trip() -> None:
    raw = ttrpc.encode_request(5, "nri.pkg.api.v1alpha1.Runtime", "RegisterPlugin", b"\x0a\x01x", timeout_s=2.0)
    (frame,) = ttrpc.FrameParser().feed(raw)
    assert (frame.stream_id, frame.type) == (5, ttrpc.TYPE_REQUEST)
    request = Request.FromString(frame.payload)
    assert (request.service, request.method, request.payload, request.timeout_nano) == (
        "nri.pkg.api.v1alpha1.Runtime", "RegisterPlugin", b"\x0a\x01x", 2_000_000_000)
    ok = ttrpc.FrameParser().feed(ttrpc.encode_response(5, b"pay"))[0]
    assert Response.FromString(ok.payload).payload == b"pay"
    err = ttrpc.FrameParser().feed(ttrpc.encode_error(5, ttrpc.CODE_UNIMPLEMENTED, "no such method"))[0]
    status = Response.FromString(err.payload).status
    assert (status.code, status.message) == (12, "no such method")


def test_client_stream_ids_are_odd_and_increasing() -> None:
    ids = ttrpc.StreamIds()
    assert [ids.next() for _ in range(3)] == [1, 3, 5]
