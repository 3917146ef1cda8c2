"""The splice transport's read-along HPACK decoder agrees with the hpack library on every block."""

from __future__ import annotations

import hpack
import pytest
from fixtures.hypothesis_profiles import examples
from hpack import NeverIndexedHeaderTuple
from hypothesis import given, settings
from hypothesis import strategies as st

from resmgr.relay.hpack_reader import HeaderBlockError, HeaderReader

NAMES = [b":path", b":status", b"content-type", b"grpc-timeout", b"grpc-status", b"grpc-message", b"x-trace",
         b"user-agent", b"te", b"a-very-long-custom-header-name-" + b"x" * 40]
values = st.one_of(st.sampled_from([b"", b"0", b"200", b"application/grpc", b"/runtime.v1.RuntimeService/Version"]),
                   st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")), st.binary(min_size=300, max_size=5000))
header = st.tuples(st.sampled_from(NAMES) | st.binary(min_size=1, max_size=20).map(lambda b: b.lower()),
                   values, st.booleans())
step = st.one_of(
    st.tuples(st.just("block"), st.lists(header, max_size=12), st.booleans()),
    st.tuples(st.just("resize"), st.sampled_from([0, 64, 256, 1024, 4096, 65536]), st.none()),
)


def encode(encoder: hpack.Encoder, headers: list[tuple[bytes, bytes, bool]], huffman: bool) -> bytes:
    fields = [NeverIndexedHeaderTuple(n, v) if never else (n, v) for n, v, never in headers]
    return encoder.encode(fields, huffman=huffman)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(step, min_size=1, max_size=25))
def test_same_headers_and_table_as_hpack(steps: list) -> None:
    encoder, reference, reader = hpack.Encoder(), hpack.Decoder(), HeaderReader()
    reference.max_allowed_table_size = reader.max_table_size
    for kind, arg, huffman in steps:
        if kind == "resize":
            # Announced in the next block. (hpack's Encoder forgets a pending update when set to
            # the same size again, so only real changes are made.)
            if encoder.header_table_size != arg:
                encoder.header_table_size = arg
            continue
        block = encode(encoder, arg, huffman)
        table = (list(reader._entries), reader.table_size)
        expected = [(bytes(n), bytes(v)) for n, v in reference.decode(block, raw=True)]
        assert reader.decode(block) == expected == [h[:2] for h in arg]
        if (list(reader._entries), reader.table_size) == table:
            # A block that left the table alone may be sent again (and come from the cache): same answer.
            assert reader.decode(block) == [(bytes(n), bytes(v)) for n, v in reference.decode(block, raw=True)]


def test_responses_repeat_from_the_cache_until_the_table_changes() -> None:
    encoder, reader = hpack.Encoder(), HeaderReader()
    trailers = [(b"grpc-status", b"0"), (b"grpc-message", b"")]
    reader.decode(encoder.encode(trailers))  # literals: enter the table
    indexed = encoder.encode(trailers)
    assert reader.decode(indexed) == trailers and reader.decode(indexed) is reader.decode(indexed)
    # A new entry shifts every dynamic index: the same bytes now mean something else.
    reader.decode(encoder.encode([(b"x-new", b"1")]))
    assert reader.decode(indexed) == [(b"grpc-message", b""), (b"x-new", b"1")]


@pytest.mark.parametrize("block", [
    b"\xbe",  # dynamic index 62 with an empty table
    b"\x80",  # index 0
    b"\x40\x05ab",  # literal name longer than the block
    b"\x3f\xe1\xff\xff\xff\x0f",  # table size update far beyond the allowed maximum
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",  # integer that never ends
])
def test_malformed_blocks_are_refused(block: bytes) -> None:
    with pytest.raises(HeaderBlockError):
        HeaderReader(max_table_size=65536).decode(block)


def test_header_list_limit() -> None:
    encoder = hpack.Encoder()
    with pytest.raises(HeaderBlockError, match="header list"):
        HeaderReader(max_header_list=100).decode(encoder.encode([(b"x", b"y" * 200)]))
