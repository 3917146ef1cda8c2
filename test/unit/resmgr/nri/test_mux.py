"""NRI's multiplexer, byte for byte: 8-byte header (connection id, payload length; big endian) per chunk."""

from __future__ import annotations

import pytest

from resmgr.nri import mux


def test_chunk_header_layout() -> None:
    assert mux.encode(mux.PLUGIN_CONN, b"xyz") == b"\x00\x00\x00\x01\x00\x00\x00\x03xyz"
    assert (mux.PLUGIN_CONN, mux.RUNTIME_CONN) == (1, 2)


def test_large_payload_is_split_at_the_chunk_limit() -> None:
    data = bytes(range(256)) * ((mux.MAX_CHUNK // 256) + 3)
    encoded = mux.encode(mux.RUNTIME_CONN, data)
    chunks = mux.Demux().feed(encoded)
    assert [len(p) for _, p in chunks] == [mux.MAX_CHUNK, len(data) - mux.MAX_CHUNK]
    assert b"".join(p for _, p in chunks) == data


def test_demux_reassembles_fragments_and_interleaving() -> None:
    data = mux.encode(1, b"first") + mux.encode(2, b"second") + mux.encode(1, b"")
    demux = mux.Demux()
    got = []
    for i in range(0, len(data), 3):
        got += demux.feed(data[i:i + 3])
    assert got == [(1, b"first"), (2, b"second"), (1, b"")]


def test_unknown_connection_ids_are_dropped_like_upstream() -> None:
    data = mux.encode(9, b"ignored") + mux.encode(1, b"kept")
    streams = mux.Streams(known=(mux.PLUGIN_CONN, mux.RUNTIME_CONN))
    delivered = streams.feed(data)
    assert delivered == {1: b"kept"}
    assert streams.dropped == 1


def test_reserved_connection_id_zero_cannot_be_written() -> None:
    with pytest.raises(ValueError):
        mux.encode(0, b"x")


def test_oversized_chunk_is_a_protocol_error() -> None:
    header = (1).to_bytes(4, "big") + (mux.MAX_CHUNK + 1).to_bytes(4, "big")
    with pytest.raises(mux.ProtocolError):
        mux.Demux().feed(header)
