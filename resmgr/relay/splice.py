"""HTTP/2 frame relay ("splice"): the low-overhead transport of the relay.

Each client connection gets its own upstream connection, and HTTP/2 frames are copied
between the two as they are, so the two ends talk to each other end to end: settings,
flow control, pings, metadata, deadlines (grpc-timeout), cancellation (RST_STREAM),
status codes and details all pass untouched, and no message is ever decoded on the
pass-through path. The relay only *reads* along: it decodes header blocks with its own
HPACK decoders (one per direction, kept in step because every block is seen in order;
see hpack_reader for why they are our own)
to learn each stream's method and final grpc-status, for metrics and dumping.

Intercepted methods are the exception: the request's DATA frames are held back until the
message is complete, handed to the Interceptor in a worker thread (one lock for all), and
the possibly rewritten message is sent on as new DATA frames. The runtime only returns
flow-control credit for bytes it receives, so while the relay holds a message it returns the
credit to the client itself (connection and stream WINDOW_UPDATE); otherwise a request larger
than the window (64 KiB) would wait forever, and with it every call on kubelet's one shared
connection. The runtime's later connection-level credit for those bytes is owed (window debt)
and taken out of its WINDOW_UPDATEs, so both ends keep agreeing on the window. At most one
message of at most ``MAX_MESSAGE_BYTES`` is held per stream: a larger one is not intercepted
and the runtime answers it as it would without the relay. The response is forwarded to the
client as it arrives, and read along for the hook's ``after``.

Measured on a 2-core machine, a Python gRPC server+client proxy costs ~0.5 ms of CPU per
call; copying frames costs a few tens of microseconds. That difference is why this exists.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from resmgr.relay.dump import Dumper
from resmgr.relay.hpack_reader import HeaderReader
from resmgr.relay.interception import Interceptor
from resmgr.relay.methods import MAX_MESSAGE_BYTES, CriMethod, cri_methods, short_name
from resmgr.relay.metrics import RelayMetrics
from resmgr.rpc.wire import grpc_frame, grpc_message, status_name
from resmgr.rpc.workers import WorkerPool

log = logging.getLogger(__name__)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
FLAG_END_STREAM, FLAG_ACK, FLAG_END_HEADERS, FLAG_PADDED, FLAG_PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE = 0x4, 0x5
DEFAULT_WINDOW = 65535
DEFAULT_MAX_FRAME = 16384
# Each loop receives into one buffer of its own, reused for every read, and copies what came into its
# frame buffer. A fresh 256 KiB bytes object per recv() fragmented glibc's heaps: under the 32-client
# mix of test/bench/relay_load.py RSS grew 37.2 -> 46.3 MB in 150 s and kept rising, with the Python
# heap flat (tracemalloc); with reused buffers it stays flat (34.7 -> 34.7 MB). Pinning glibc's mmap
# threshold instead also kept it flat, but its mmap/munmap per read cost ~0.15 ms a call.
RECV_BYTES = 64 * 1024
# Response frames the relay reads along (DATA only for some streams, see _relay_responses).
_READ_ALONG = frozenset((HEADERS, CONTINUATION, RST_STREAM, WINDOW_UPDATE, SETTINGS))
# Frame header: 24-bit length (as 8 + 16 bits), type, flags, stream id (with its reserved bit).
_FRAME_HEADER = struct.Struct(">BHBBI")
_FRAME_LENGTH = struct.Struct(">BH")
# Header tables may grow as far as the two ends agree; the read-along decoders must follow.
MAX_HEADER_TABLE = 1 << 24
MAX_HEADER_LIST = 1 << 24

# HTTP/2 error codes the relay reads or sends in RST_STREAM.
H2_CANCEL = 0x8
H2_ENHANCE_YOUR_CALM = 0xB  # grpc-go reports it as RESOURCE_EXHAUSTED

# Reads a unary call's request and successful answer (unframed messages) after the answer went to the client.
Observer = Callable[[memoryview, memoryview], None]

OK, CANCELLED, UNKNOWN = 0, 1, 2
RESOURCE_EXHAUSTED, INTERNAL, UNAVAILABLE = 8, 13, 14


def frame(ftype: int, flags: int, stream_id: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes((ftype, flags)) + stream_id.to_bytes(4, "big") + payload


class UpstreamCallError(Exception):
    """The runtime answered an intercepted call with a non-OK status (already relayed to the client)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{status_name(code)}: {message}")
        self.code = code


@dataclass(frozen=True)
class _Route:
    """What the relay does with calls to one path (the same for every call: worked out once)."""

    path: str
    name: str  # short_name(path)
    known: bool
    intercepted: bool
    server_streaming: bool
    method: CriMethod | None
    observer: Observer | None = None


@dataclass(eq=False, slots=True)
class _Stream:
    stream_id: int
    path: str
    name: str
    started: float
    known: bool = False  # a CRI method (metrics name it; others count as "other")
    method: CriMethod | None = None
    hold: bool = False  # intercepted: request DATA is held for the hook
    collect: bool = False  # keep request/response bytes (interception or dumping)
    keep_response: bool = True  # False for server streams: a dump never holds a whole stream
    observer: Observer | None = None  # reads the request and answer once the call succeeded (resmgr.relay.exits)
    request: bytearray = field(default_factory=bytearray)
    response: bytearray = field(default_factory=bytearray)
    response_headers_seen: bool = False
    status: int | None = None
    message: str = ""
    cancelled: bool = False
    done: threading.Event | None = None


def _whole_frames(view: memoryview) -> int:
    """Where the last complete frame in ``view`` ends."""
    size = len(view)
    pos = 0
    unpack = _FRAME_LENGTH.unpack_from
    while size - pos >= 9:
        high, low = unpack(view, pos)
        end = pos + 9 + (high << 16 | low)
        if end > size:
            break
        pos = end
    return pos


def _header_payload(ftype: int, flags: int, payload: memoryview) -> memoryview:
    """The header block fragment of a HEADERS/CONTINUATION frame (padding and priority removed)."""
    if ftype == HEADERS:
        start, end = 0, len(payload)
        if flags & FLAG_PADDED:
            end -= payload[0]
            start = 1
        if flags & FLAG_PRIORITY:
            start += 5
        return payload[start:end]
    return payload


def _unframed(data: bytearray) -> memoryview | None:
    """The single uncompressed gRPC message in ``data``, without copying it; None if it is anything else."""
    if len(data) < 5 or data[0] != 0 or int.from_bytes(data[1:5], "big") != len(data) - 5:
        return None
    return memoryview(data)[5:]


def _data_payload(flags: int, payload: memoryview) -> memoryview:
    if flags & FLAG_PADDED:
        return payload[1:len(payload) - payload[0]]
    return payload


class _Connection:
    """One client connection spliced onto one upstream connection."""

    def __init__(self, server: SpliceServer, client: socket.socket, upstream: socket.socket) -> None:
        self.server = server
        self.client = client
        self.upstream = upstream
        self.client_lock = threading.Lock()  # writes to the client
        self.upstream_lock = threading.Lock()  # writes to the runtime
        self.streams: dict[int, _Stream] = {}
        self.request_decoder = HeaderReader(max_table_size=MAX_HEADER_TABLE, max_header_list=MAX_HEADER_LIST)
        self.response_decoder = HeaderReader(max_table_size=MAX_HEADER_TABLE, max_header_list=MAX_HEADER_LIST)
        self.request_blocks: dict[int, bytearray] = {}
        self.response_blocks: dict[int, bytearray] = {}
        self.blind = False  # read-along failed: copy bytes only, touch nothing
        # Connection credit the runtime will give that the client already has: bytes the relay
        # credited itself while holding them, plus size changes of rewritten requests.
        self.window_debt = 0
        self.debt_lock = threading.Lock()
        self.credit: dict[int, int] = {}  # stream id (0: connection) -> credit to return to the client
        # What the runtime lets the relay send: the connection window, and the stream windows of
        # held (intercepted) streams. Rewritten requests may be larger than the client's, so the
        # relay must respect these itself rather than trust the client's view of them.
        # Plain ``with self.flow_lock`` on the per-call paths: Condition's own __enter__ is Python code.
        self.flow_lock = threading.Lock()
        self.flow = threading.Condition(self.flow_lock)
        self.window_waiters = 0  # threads in _wait_window: WINDOW_UPDATEs notify only if there are any
        self.send_window = DEFAULT_WINDOW
        self.stream_initial_window = DEFAULT_WINDOW
        self.stream_windows: dict[int, int] = {}
        self.upstream_max_frame = DEFAULT_MAX_FRAME
        self.last_client_stream = 0
        self.closed = threading.Event()

    # -- plumbing --------------------------------------------------------------------------

    def send_client(self, data: bytes | bytearray | memoryview) -> None:
        with self.client_lock:
            self.client.sendall(data)

    def send_upstream(self, data: bytes | bytearray | memoryview) -> None:
        with self.upstream_lock:
            self.upstream.sendall(data)

    def run(self) -> None:
        reader = threading.Thread(target=self._guarded, args=(self._upstream_to_client,), daemon=True,
                                  name="splice-u2c")
        reader.start()
        self._guarded(self._client_to_upstream)
        reader.join()
        self.close()

    def _guarded(self, loop: Callable[[], None]) -> None:
        try:
            loop()
        except OSError as err:
            if err.errno not in (errno.EBADF, errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN):
                log.warning("connection error: %s", err)
        except Exception:
            log.exception("relay connection failed; closing it")
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        for sock in (self.client, self.upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self._shutdown()
        self.client.close()
        self.upstream.close()
        for stream in list(self.streams.copy().values()):
            self._finish(stream, UNAVAILABLE, "connection closed", count=not stream.cancelled)
        self.streams.clear()
        self.closed.set()
        with self.flow:
            self.flow.notify_all()
        self.server.forget(self)

    def goaway(self) -> None:
        """Tell the client to open no new streams here (drain); in-flight streams continue."""
        payload = self.last_client_stream.to_bytes(4, "big") + (0).to_bytes(4, "big")
        try:
            self.send_client(frame(GOAWAY, 0, 0, payload))
        except OSError:
            pass

    # -- client -> runtime -----------------------------------------------------------------

    def _client_to_upstream(self) -> None:
        buf = bytearray()
        scratch = memoryview(bytearray(RECV_BYTES))
        recv_into = self.client.recv_into
        while len(buf) < len(PREFACE):
            n = recv_into(scratch)
            if not n:
                return
            buf += scratch[:n]
        if not buf.startswith(PREFACE):
            log.warning("client did not open with the HTTP/2 preface; relaying its bytes blindly")
            self.blind = True
        start = len(PREFACE)
        while True:
            if self.blind:
                if buf:
                    self.send_upstream(buf)
                    buf.clear()
            else:
                with memoryview(buf) as view:
                    out, consumed, held, data_bytes = self._scan_requests(view, start)
                    if self.credit:
                        self._return_credit()
                    if consumed:
                        chunk = out if out is not None else view[:consumed]
                        if self._take_window(data_bytes):
                            self.send_upstream(chunk)
                        else:
                            self._send_within_window(chunk)
                        del chunk  # a view into buf: it must go before buf can shrink
                del buf[:consumed]
                start = 0
                for stream in held:
                    self.server.workers.submit(self._intercept, stream)
            n = recv_into(scratch)
            if not n:
                return
            buf += scratch[:n]

    def _scan_requests(self, view: memoryview, pos: int) -> tuple[bytearray | None, int, list[_Stream], int]:
        """Parse the complete frames in ``view`` from ``pos``.

        Returns the bytes to forward (None: all of ``view[:consumed]``), how much was consumed,
        the intercepted streams whose request is now complete, and the flow-controlled DATA
        bytes among the forwarded frames. Held or dropped DATA is added to ``self.credit``.
        """
        data_bytes = 0
        out: bytearray | None = None  # only built when some frame is held back
        forward_from = 0
        held: list[_Stream] = []
        size = len(view)
        unpack = _FRAME_HEADER.unpack_from
        streams = self.streams
        while size - pos >= 9:
            high, low, ftype, flags, sid = unpack(view, pos)
            length = high << 16 | low
            end = pos + 9 + length
            if end > size:
                break
            sid &= 0x7FFFFFFF
            if ftype == DATA:
                stream = streams.get(sid)
                if stream is not None and stream.collect:
                    payload = _data_payload(flags, view[pos + 9:end])
                    if stream.hold and not stream.request and not self._holdable(stream, payload):
                        stream.hold = False
                        stream.collect = self.server.dumper.enabled(stream.name)
                    if stream.collect:
                        stream.request += payload
                    if stream.hold:
                        if out is None:
                            out = bytearray()
                        out += view[forward_from:pos]
                        forward_from = end
                        self._credit(sid, length, len(payload))
                        if len(stream.request) > MAX_MESSAGE_BYTES + 5:
                            self._refuse(stream, "more than one message, or a message over the size limit")
                        elif flags & FLAG_END_STREAM:
                            held.append(stream)
                        pos = end
                        continue
                data_bytes += length
            elif ftype == HEADERS or ftype == CONTINUATION:
                block = _header_payload(ftype, flags, view[pos + 9:end])
                if flags & FLAG_END_HEADERS and sid not in self.request_blocks:
                    self._request_headers(sid, block)
                else:
                    pending = self.request_blocks.setdefault(sid, bytearray())
                    pending += block
                    if flags & FLAG_END_HEADERS:
                        self._request_headers(sid, self.request_blocks.pop(sid))
                del block
            elif ftype == RST_STREAM:
                stream = streams.get(sid)
                if stream is not None:
                    stream.cancelled = True
                    self._finish(stream, CANCELLED, "cancelled by the client")
            pos = end
        if out is not None:
            out += view[forward_from:pos]
        return out, pos, held, data_bytes

    # -- flow control toward the client -----------------------------------------------------

    def _holdable(self, stream: _Stream, first: memoryview) -> bool:
        """Whether the first DATA of an intercepted stream starts a message the relay may hold.

        A message over the runtime's limit is not intercepted: it goes on as it is, so the runtime
        refuses it (RESOURCE_EXHAUSTED) exactly as it would without the relay, and the relay never
        holds more than one message of at most MAX_MESSAGE_BYTES.
        """
        if len(first) < 5:
            return True  # length unknown yet; the hold is still capped at MAX_MESSAGE_BYTES + 5
        declared = int.from_bytes(first[1:5], "big")
        if declared <= MAX_MESSAGE_BYTES:
            return True
        log.warning("request of %d bytes is over the %d-byte message limit; not intercepted", declared,
                    MAX_MESSAGE_BYTES, extra={"method": stream.name, "bytes": declared})
        self.server.metrics.relay_error(stream.name, "oversized_request")
        with self.flow:
            self.stream_windows.pop(stream.stream_id, None)
        return False

    def _credit(self, sid: int, length: int, payload_bytes: int) -> None:
        """Record ``length`` bytes of DATA the relay took off the wire without sending them on (yet)."""
        self.credit[0] = self.credit.get(0, 0) + length
        self.credit[sid] = self.credit.get(sid, 0) + length
        # The runtime credits the connection again for what the relay sends it later.
        with self.debt_lock:
            self.window_debt += payload_bytes

    def _return_credit(self) -> None:
        """Give the client back the window that held DATA used, in one write."""
        credit, self.credit = self.credit, {}
        updates = bytearray()
        for sid, increment in credit.items():
            if sid == 0 or sid in self.streams:
                updates += frame(WINDOW_UPDATE, 0, sid, increment.to_bytes(4, "big"))
        try:
            self.send_client(updates)
        except OSError:
            pass  # the connection is going; the reader loop notices

    def _refuse(self, stream: _Stream, why: str) -> None:
        """Reset a held stream on both sides (RESOURCE_EXHAUSTED for the client) and drop what it holds.

        DATA the client still sends on it goes on to the runtime, which ignores a reset stream's frames.
        """
        log.error("intercepted request refused: %s", why, extra={"method": stream.name, "bytes": len(stream.request)})
        self.server.metrics.relay_error(stream.name, "oversized_request")
        # Bytes held so far will never reach the runtime: the client is credited, but nothing is owed.
        with self.debt_lock:
            self.window_debt -= len(stream.request)
        stream.request.clear()
        stream.hold = stream.collect = False
        try:
            self.send_upstream(frame(RST_STREAM, 0, stream.stream_id, H2_CANCEL.to_bytes(4, "big")))
            self.send_client(frame(RST_STREAM, 0, stream.stream_id, H2_ENHANCE_YOUR_CALM.to_bytes(4, "big")))
        except OSError:
            pass
        self._finish(stream, RESOURCE_EXHAUSTED, why)

    # -- flow control toward the runtime ---------------------------------------------------

    def _take_window(self, size: int) -> bool:
        """Fast path: claim ``size`` bytes of the connection window if all of it is there."""
        if not size:
            return True
        with self.flow_lock:
            if self.send_window >= size:
                self.send_window -= size
                return True
        return False

    def _wait_window(self, stream_id: int | None, want: int) -> int:
        """Block until some window is open (connection, and stream if given); claim up to ``want`` bytes."""
        with self.flow:
            while True:
                if self.closed.is_set():
                    raise OSError(errno.EPIPE, "connection closed")
                if stream_id is not None and stream_id not in self.stream_windows:
                    raise OSError(errno.ECONNRESET, "stream closed")
                available = self.send_window
                if stream_id is not None:
                    available = min(available, self.stream_windows.get(stream_id, 0))
                if available > 0:
                    take = min(available, want)
                    self.send_window -= take
                    if stream_id is not None:
                        self.stream_windows[stream_id] -= take
                    return take
                self.window_waiters += 1
                try:
                    self.flow.wait(1.0)
                finally:
                    self.window_waiters -= 1

    def _send_within_window(self, chunk: bytes | bytearray | memoryview) -> None:
        """Slow path: forward ``chunk`` frame by frame, splitting DATA to fit the runtime's window."""
        with memoryview(chunk) as view:
            self._send_frames_within_window(view)

    def _send_frames_within_window(self, view: memoryview) -> None:
        pos = 0
        while pos < len(view):
            length = int.from_bytes(view[pos:pos + 3], "big")
            end = pos + 9 + length
            ftype, flags = view[pos + 3], view[pos + 4]
            if ftype != DATA or length == 0:
                self.send_upstream(view[pos:end])
            else:
                sid = int.from_bytes(view[pos + 5:pos + 9], "big") & 0x7FFFFFFF
                data = bytes(_data_payload(flags, view[pos + 9:end]))
                if len(data) != length:  # padding is dropped when splitting; the client paid for it
                    with self.debt_lock:
                        self.window_debt += len(data) - length
                self._send_data(sid, data, bool(flags & FLAG_END_STREAM), stream_window=False)
            pos = end

    def _send_data(self, stream_id: int, data: bytes, end_stream: bool, *, stream_window: bool) -> None:
        """Send ``data`` as DATA frames no larger than the runtime's windows and frame size allow."""
        sent = 0
        while True:
            want = min(len(data) - sent, self.upstream_max_frame)
            take = self._wait_window(stream_id if stream_window else None, want) if want else 0
            last = sent + take >= len(data)
            self.send_upstream(frame(DATA, FLAG_END_STREAM if last and end_stream else 0, stream_id,
                                     data[sent:sent + take]))
            sent += take
            if last:
                return

    def _request_headers(self, sid: int, block: bytes | memoryview) -> None:
        try:
            headers = self.request_decoder.decode(bytes(block))
        except Exception as err:
            self._go_blind(f"cannot decode request headers: {err}")
            return
        if sid in self.streams:
            return  # trailers of a client-streaming call
        if sid > self.last_client_stream:
            self.last_client_stream = sid
        path = b""
        for name, value in headers:
            if name == b":path":
                path = value
                break
        route = self.server.route(path)
        stream = _Stream(sid, route.path, route.name, time.perf_counter(), known=route.known)
        if route.intercepted:
            stream.method = route.method
            stream.hold = stream.collect = True
            with self.flow_lock:
                self.stream_windows[sid] = self.stream_initial_window
        elif route.observer is not None:
            stream.observer = route.observer
            stream.collect = True
        elif self.server.dumper.enabled(route.name):
            stream.collect = True
            stream.keep_response = not route.server_streaming
        self.streams[sid] = stream

    def _go_blind(self, reason: str) -> None:
        log.error("%s; relaying this connection's bytes without interception from now on", reason)
        self.server.metrics.relay_error("connection", "header_decode")
        self.blind = True
        for stream in list(self.streams.copy().values()):
            if stream.hold:
                self._finish(stream, INTERNAL, "relay lost track of the connection")
        self.streams.clear()

    # -- runtime -> client -----------------------------------------------------------------

    def _upstream_to_client(self) -> None:
        buf = bytearray()
        scratch = memoryview(bytearray(RECV_BYTES))
        recv_into = self.upstream.recv_into
        while True:
            n = recv_into(scratch)
            if not n:
                return
            buf += scratch[:n]
            if self.blind:
                self.send_client(buf)
                buf.clear()
                continue
            with memoryview(buf) as view:
                consumed = self._relay_responses(view)
            del buf[:consumed]

    def _relay_responses(self, view: memoryview) -> int:
        """Send the complete frames in ``view`` to the client and read along; returns how much was sent."""
        if self.window_debt:  # connection WINDOW_UPDATEs must be cut down before they go on
            frames, pos, rewrite = self._response_frames(view)
            if pos:
                self.send_client(self._rewrite_window_updates(view, frames, pos) if rewrite else view[:pos])
        else:
            # Sent before anything else is looked at, so the client waits only for the walk over the frame
            # lengths. Right after a context switch the relay's Python runs cold: the frame scan took about
            # 12 us a response chunk in the relay process (instrumented, 7,200 chunks of Version calls),
            # several times its cost in a warm loop. Version's added p50 was 1-7 us lower with this in four
            # same-run comparisons (docs/operations/relay-cost.md).
            pos = _whole_frames(view)
            if not pos:
                return 0
            self.send_client(view[:pos])
            frames = self._response_frames(view)[0]
        for ftype, flags, sid, start, end in frames:
            self._response_frame(ftype, flags, sid, view[start + 9:end])
        return pos

    def _response_frames(self, view: memoryview) -> tuple[list[tuple[int, int, int, int, int]], int, bool]:
        """The frames of ``view`` to read along (type, flags, stream, start, end), where the complete frames
        end, and whether a connection WINDOW_UPDATE must be rewritten (window debt)."""
        size = len(view)
        pos = 0
        # DATA matters only for a stream that keeps its response or ends with it; pings, priorities and
        # the like not at all.
        frames: list[tuple[int, int, int, int, int]] = []
        rewrite = False
        unpack = _FRAME_HEADER.unpack_from
        streams = self.streams
        while size - pos >= 9:
            high, low, ftype, flags, sid = unpack(view, pos)
            end = pos + 9 + (high << 16 | low)
            if end > size:
                break
            sid &= 0x7FFFFFFF
            if ftype == DATA:
                if flags & FLAG_END_STREAM or (sid in streams and streams[sid].collect):
                    frames.append((ftype, flags, sid, pos, end))
            elif ftype in _READ_ALONG:
                frames.append((ftype, flags, sid, pos, end))
                if ftype == WINDOW_UPDATE and self.window_debt:
                    rewrite = True
            pos = end
        return frames, pos, rewrite

    def _rewrite_window_updates(self, view: memoryview, frames: list[tuple[int, int, int, int, int]],
                                size: int) -> bytearray:
        """``view[:size]`` with connection WINDOW_UPDATEs reduced by what the relay still owes (window debt)."""
        out = bytearray()
        copied = 0
        for ftype, _flags, sid, start, end in frames:
            if ftype != WINDOW_UPDATE or sid != 0:
                continue
            out += view[copied:start]
            copied = end
            increment = int.from_bytes(view[start + 9:end], "big") & 0x7FFFFFFF
            with self.debt_lock:
                adjusted = increment - self.window_debt
                if adjusted <= 0:
                    self.window_debt -= increment
                    continue
                self.window_debt = 0
            out += frame(WINDOW_UPDATE, 0, 0, adjusted.to_bytes(4, "big"))
        out += view[copied:size]
        return out

    def _response_frame(self, ftype: int, flags: int, sid: int, payload: memoryview) -> None:
        if ftype == DATA:
            stream = self.streams.get(sid)
            if stream is not None:
                if stream.collect and stream.keep_response:
                    stream.response += _data_payload(flags, payload)
                if flags & FLAG_END_STREAM:
                    self._finish(stream, UNKNOWN, "stream ended without trailers")
        elif ftype == HEADERS or ftype == CONTINUATION:
            block = _header_payload(ftype, flags, payload)
            if not flags & FLAG_END_HEADERS or sid in self.response_blocks:
                pending = self.response_blocks.setdefault(sid, bytearray())
                pending += block
                if not flags & FLAG_END_HEADERS:
                    return
                block = memoryview(self.response_blocks.pop(sid))
            try:
                headers = self.response_decoder.decode(bytes(block))
            except Exception as err:
                self._go_blind(f"cannot decode response headers: {err}")
                return
            stream = self.streams.get(sid)
            if stream is None:
                return
            ended = bool(flags & FLAG_END_STREAM) if ftype == HEADERS else stream.response_headers_seen
            stream.response_headers_seen = True
            if ended or any(name == b"grpc-status" for name, _ in headers):
                code, message = UNKNOWN, ""
                for name, value in headers:
                    if name == b"grpc-status":
                        code = int(value) if value.isdigit() else UNKNOWN
                    elif name == b"grpc-message":
                        message = value.decode("utf-8", "replace")
                self._finish(stream, code, message)
        elif ftype == RST_STREAM:
            stream = self.streams.get(sid)
            if stream is not None:
                code = CANCELLED if int.from_bytes(payload, "big") == H2_CANCEL else INTERNAL
                self._finish(stream, code, "stream reset by the runtime")
        elif ftype == WINDOW_UPDATE:
            increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
            with self.flow_lock:
                if sid == 0:
                    self.send_window += increment
                elif sid in self.stream_windows:
                    self.stream_windows[sid] += increment
                else:
                    return
                if self.window_waiters:
                    self.flow.notify_all()
        elif ftype == SETTINGS and not flags & FLAG_ACK:
            for i in range(0, len(payload) - 5, 6):
                key, value = int.from_bytes(payload[i:i + 2], "big"), int.from_bytes(payload[i + 2:i + 6], "big")
                if key == SETTINGS_MAX_FRAME_SIZE:
                    self.upstream_max_frame = value
                elif key == SETTINGS_INITIAL_WINDOW_SIZE:
                    with self.flow:
                        delta = value - self.stream_initial_window
                        self.stream_initial_window = value
                        for held_sid in self.stream_windows:
                            self.stream_windows[held_sid] += delta
                        self.flow.notify_all()

    # -- bookkeeping -----------------------------------------------------------------------

    def _finish(self, stream: _Stream, code: int, message: str, count: bool = True) -> None:
        if self.streams.pop(stream.stream_id, None) is None and stream.status is not None:
            return
        if stream.hold:
            with self.flow:
                self.stream_windows.pop(stream.stream_id, None)
                self.flow.notify_all()
        stream.status, stream.message = code, message
        if stream.done is not None:
            stream.done.set()
        if not count:
            return
        latency = time.perf_counter() - stream.started
        code_name = status_name(code)
        self.server.metrics.observe(stream.name if stream.known else "other", code_name, latency)
        dumper = self.server.dumper
        if dumper.enabled(stream.name):
            request = grpc_message(bytes(stream.request)) if stream.collect else None
            response = grpc_message(bytes(stream.response)) if stream.collect and code == OK else None
            dumper.dump(stream.path, stream.name, request, response,
                        None if code == OK else f"{code_name}: {message}", latency)
        if stream.observer is not None and code == OK:
            # The stream is finished: nothing appends to its buffers any more, so views of them are safe.
            request_message, response_message = _unframed(stream.request), _unframed(stream.response)
            if request_message is not None and response_message is not None:
                stream.observer(request_message, response_message)

    # -- interception ----------------------------------------------------------------------

    def _send_request(self, stream: _Stream, payload: bytes) -> None:
        if stream.cancelled:
            return
        try:
            self._send_data(stream.stream_id, payload, True, stream_window=True)
        except OSError as err:
            # The stream or connection ended meanwhile; _finish has recorded how.
            log.debug("intercepted request not sent: %s", err, extra={"method": stream.name})

    def _intercept(self, stream: _Stream) -> None:
        original = bytes(stream.request)
        message = grpc_message(original)
        assert stream.method is not None
        if message is None:
            log.error("intercepted request is not a single uncompressed gRPC message; passing it through",
                      extra={"method": stream.name, "bytes": len(original)})
            self.server.metrics.relay_error(stream.name, "undecodable_request")
            self._send_request(stream, original)
            return

        def forward(outgoing: bytes) -> bytes:
            payload = original if outgoing is message else grpc_frame(outgoing)
            if len(payload) != len(original):
                with self.debt_lock:
                    self.window_debt += len(payload) - len(original)
            stream.done = threading.Event()
            if stream.status is not None:  # finished (reset, connection gone) before we sent anything
                stream.done.set()
            else:
                self._send_request(stream, payload)
            stream.done.wait()
            if stream.status != OK:
                raise UpstreamCallError(stream.status or UNKNOWN, stream.message)
            response = grpc_message(bytes(stream.response))
            return response if response is not None else bytes(stream.response)

        try:
            self.server.interceptor.handle(stream.method, message, forward)
        except UpstreamCallError:
            pass  # the runtime's answer already went to the client
        except Exception:
            log.exception("interception failed", extra={"method": stream.name})


class SpliceServer:
    """Accepts client connections on the relay socket and splices each onto a new runtime connection."""

    def __init__(self, *, relay_socket: str, runtime_socket: str, interceptor: Interceptor,
                 metrics: RelayMetrics, dumper: Dumper, intercepted: frozenset[str], max_workers: int = 64,
                 connect_timeout: float = 5.0, observers: Mapping[str, Observer] | None = None) -> None:
        self.relay_socket = relay_socket
        self.runtime_socket = runtime_socket
        self.interceptor = interceptor
        self.metrics = metrics
        self.dumper = dumper
        self.intercepted = intercepted
        self.observers = dict(observers or {})  # path -> reader of unary calls that are passed through
        # An intercepted call keeps its worker until the runtime answers (a StopContainer: its whole grace
        # period), and calls are not serialized: enough workers that parallel pod starts and slow stops
        # do not queue behind each other (made when needed, retired when idle).
        self.workers = WorkerPool(max_workers, name="intercept")
        self.connect_timeout = connect_timeout
        self.connections: set[_Connection] = set()
        self._routes: dict[bytes, _Route] = {}  # CRI paths only: any other path is worked out per call
        self._lock = threading.Lock()
        self._listener: socket.socket | None = None
        self._accepting = threading.Event()

    def bind(self, mode: int) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o777 & ~mode)  # never more open than ``mode``, not even briefly
        try:
            listener.bind(self.relay_socket)
        finally:
            os.umask(old_umask)
        os.chmod(self.relay_socket, mode)
        listener.listen(128)
        self._listener = listener

    def start(self) -> None:
        assert self._listener is not None, "bind() first"
        self._accepting.set()
        threading.Thread(target=self._accept_loop, args=(self._listener,), daemon=True,
                         name="splice-accept").start()

    def _accept_loop(self, listener: socket.socket) -> None:
        """Accept until stopped. Running out of file descriptors, memory or threads is transient:
        the loop backs off and goes on, so the relay accepts again once connections close (a loop
        that ended here would leave kubelet with a socket that never answers)."""
        backoff = 0.0
        last_report = 0.0
        while self._accepting.is_set():
            try:
                client, _ = listener.accept()
                threading.Thread(target=self._serve, args=(client,), daemon=True, name="splice-c2u").start()
                backoff = 0.0
                continue
            except OSError as err:
                if not self._accepting.is_set() or err.errno in (errno.EBADF, errno.EINVAL):
                    if self._accepting.is_set():
                        log.error("relay socket closed unexpectedly (%s); no longer accepting", err)
                    return
                kind, what = errno.errorcode.get(err.errno or 0, "OSError"), str(err)
            except RuntimeError as err:  # can't start new thread
                client.close()
                kind, what = "threads", str(err)
            self.metrics.relay_error("accept", kind.lower())
            now = time.monotonic()
            if now - last_report >= 10:
                log.error("cannot accept a connection (%s); retrying", what, extra={"error": kind})
                last_report = now
            backoff = min(0.5, backoff * 2 or 0.01)
            time.sleep(backoff)

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as err:  # out of descriptors: the client retries on a new connection
            log.error("cannot open a runtime connection: %s", err)
            self.metrics.relay_error("accept", errno.errorcode.get(err.errno or 0, "OSError").lower())
            client.close()
            return
        upstream.settimeout(self.connect_timeout)
        try:
            upstream.connect(self.runtime_socket)
        except OSError as err:
            upstream.close()
            reason = f"cri-resmgr: runtime at {self.runtime_socket} is unavailable: {err.strerror or err}"
            log.error(reason)
            from resmgr.relay.unavailable import answer_unavailable  # only needed when things are broken
            answer_unavailable(client, reason, self.metrics)
            return
        upstream.settimeout(None)
        connection = _Connection(self, client, upstream)
        with self._lock:
            self.connections.add(connection)
        connection.run()

    def route(self, raw_path: bytes) -> _Route:
        """How calls to ``raw_path`` (the :path header's bytes) are handled."""
        route = self._routes.get(raw_path)
        if route is None:
            path = raw_path.decode("utf-8", "replace")
            method = cri_methods().get(path)
            unary = method is not None and not method.server_streaming and not method.client_streaming
            route = _Route(path, short_name(path), method is not None, path in self.intercepted,
                           method is not None and method.server_streaming,
                           method if path in self.intercepted else None,
                           self.observers.get(path) if unary and path not in self.intercepted else None)
            if method is not None:  # bounded: a client inventing paths must not grow this
                self._routes[raw_path] = route
        return route

    def forget(self, connection: _Connection) -> None:
        with self._lock:
            self.connections.discard(connection)

    def stop(self, grace: float) -> None:
        """Stop accepting, ask clients to go away, wait for in-flight streams up to ``grace``, then close."""
        self._accepting.clear()
        if self._listener is not None:
            try:
                self._listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._listener.close()
            self._listener = None
        with self._lock:
            connections = list(self.connections)
        for connection in connections:
            connection.goaway()
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(c.streams for c in connections):
            time.sleep(0.05)
        for connection in connections:
            connection._shutdown()
        for connection in connections:
            connection.closed.wait(5)
        self.workers.shutdown()
