"""Unary gRPC on unix sockets for the cri-resmgr process, without grpcio and without asyncio.

grpcio alone costs a Python process about 20 MB of resident memory, half the relay's budget;
grpclib needs asyncio, and the two cost the relay another 3.5 MB. cri-resmgr only needs a few
unary calls of its own (startup sync and container updates toward the runtime, the Config API
it serves, the agent it asks), so this is gRPC's unary subset on the ``h2`` library's HTTP/2
state machine (sans-I/O), driven by blocking sockets: one reader thread per connection, and each
caller blocks on its own stream.

Messages are protobuf classes, or ``bytes`` for a raw pass-through body.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote, unquote_to_bytes

import h2.config
import h2.connection
import h2.events
import h2.exceptions
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError
from google.protobuf.message_factory import GetMessageClass

from resmgr.rpc.sockets import remove_stale_socket
from resmgr.rpc.wire import STATUS_CODES, grpc_frame, grpc_message, status_name
from resmgr.rpc.workers import WorkerPool

log = logging.getLogger("resmgr.unixrpc")

SOCKET_MODE = 0o660
T = TypeVar("T")

MAX_MESSAGE_BYTES = 64 << 20  # a larger answer or request is refused (containerd's own limit is 16 MiB)
_H2_CANCEL = 0x8
_RECV_BYTES = 64 * 1024


class RpcError(Exception):
    """A failed call: ``code`` is the gRPC status name (``UNAVAILABLE``), ``message`` the details."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def _unframe(body: bytes | bytearray) -> bytes:
    """The one uncompressed message of a unary body; RpcError INTERNAL for anything else."""
    message = grpc_message(bytes(body))
    if message is None:
        raise RpcError("INTERNAL", "body is not one uncompressed gRPC message")
    return message


def _encode(message: Any) -> bytes:
    return bytes(message) if isinstance(message, (bytes, bytearray)) else message.SerializeToString()


def _decode(data: bytes, message_type: type[T]) -> T:
    if message_type is bytes:
        return data  # type: ignore[return-value]
    try:
        return message_type.FromString(data)  # type: ignore[attr-defined,no-any-return]
    except DecodeError as err:
        raise RpcError("INTERNAL", f"cannot decode {message_type.__name__}: {err}") from None


def _headers(pairs: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    return {name: value for name, value in pairs}


@dataclass(eq=False)
class _Stream:
    headers: dict[bytes, bytes] = field(default_factory=dict)
    trailers: dict[bytes, bytes] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)
    ended: bool = False
    reset: int | None = None  # RST_STREAM error code
    oversized: bool = False


class _Connection:
    """One HTTP/2 connection: h2's state machine under one lock, its socket, and the thread reading it.

    Everything that touches ``h2`` holds ``cond``; callers wait on it for their stream's end or for
    flow-control window (the reader notifies after each batch of frames). Bytes are written under
    the same lock, so they leave in the order h2 produced them; the peers are gRPC stacks that read
    all the time, and the writes are bounded by their flow-control windows.
    """

    def __init__(self, sock: socket.socket, *, client_side: bool, name: str,
                 on_event: Callable[[_Connection, h2.events.Event], None] | None = None) -> None:
        self.sock = sock
        self.name = name
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=client_side,
                                                                       header_encoding=None))
        self.cond = threading.Condition(threading.Lock())
        self.streams: dict[int, _Stream] = {}
        self.closed = False
        self.goaway = False
        self._on_event = on_event

    def start(self) -> None:
        with self.cond:
            self.h2.initiate_connection()
            self.flush()
        threading.Thread(target=self._read, daemon=True, name=f"{self.name}-h2").start()

    def flush(self) -> None:
        """Send what h2 has queued (``cond`` held)."""
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def send_body(self, stream_id: int, body: bytes, deadline: float | None, *, end_stream: bool = True) -> None:
        """Send ``body`` on ``stream_id`` as the peer's windows allow (``cond`` held; waits release it);
        ``end_stream`` false leaves the stream open for trailers."""
        sent = 0
        while sent < len(body):
            if self.closed:
                raise RpcError("UNAVAILABLE", "connection closed")
            stream = self.streams.get(stream_id)
            if stream is not None and stream.reset is not None:
                raise RpcError("CANCELLED", "stream reset by the peer")
            window = min(self.h2.local_flow_control_window(stream_id), self.h2.max_outbound_frame_size)
            if window <= 0:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise RpcError("DEADLINE_EXCEEDED", "deadline exceeded")
                self.cond.wait(remaining if remaining is not None else 1.0)
                continue
            chunk = body[sent:sent + window]
            sent += len(chunk)
            self.h2.send_data(stream_id, chunk, end_stream=end_stream and sent >= len(body))
            self.flush()

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _read(self) -> None:
        try:
            while True:
                data = self.sock.recv(_RECV_BYTES)
                if not data:
                    break
                with self.cond:
                    for event in self.h2.receive_data(data):
                        self._event(event)
                    self.flush()
                    self.cond.notify_all()
        except (OSError, h2.exceptions.H2Error) as err:
            log.debug("%s connection ends: %s", self.name, err)
        finally:
            with self.cond:
                self.closed = True
                self.cond.notify_all()
            self.sock.close()
            if self._on_event is not None:
                self._on_event(self, h2.events.ConnectionTerminated())

    def _event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.DataReceived):
            self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            stream = self.streams.get(event.stream_id)
            if stream is not None and not stream.oversized:
                if len(stream.body) + len(event.data) > MAX_MESSAGE_BYTES + 5:
                    stream.oversized = True
                    stream.body.clear()
                else:
                    stream.body += event.data
        elif isinstance(event, h2.events.RequestReceived):
            self.streams[event.stream_id] = _Stream(headers=_headers(event.headers))
        elif isinstance(event, h2.events.ResponseReceived):
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream.headers = _headers(event.headers)
        elif isinstance(event, h2.events.TrailersReceived):
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream.trailers = _headers(event.headers)
        elif isinstance(event, h2.events.StreamReset):
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream.reset = event.error_code
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.goaway = True  # no new streams here; calls in flight go on
        if isinstance(event, h2.events.StreamEnded):
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream.ended = True
        if self._on_event is not None and isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
            self._on_event(self, event)


def _status(stream: _Stream) -> tuple[str, str]:
    """The call's grpc-status name and message, from its trailers (or a trailers-only answer)."""
    fields = stream.trailers or stream.headers
    raw = fields.get(b"grpc-status")
    if raw is None:
        http = stream.headers.get(b":status", b"?").decode()
        return "UNKNOWN", f"no grpc-status in the answer (HTTP status {http})"
    code = int(raw) if raw.isdigit() else STATUS_CODES["UNKNOWN"]
    return status_name(code), unquote_to_bytes(fields.get(b"grpc-message", b"")).decode("utf-8", "replace")


class UnaryClient:
    """Blocking unary calls to the gRPC server on ``socket_path``; one connection, dialled again when lost."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._lock = threading.Lock()
        self._connection: _Connection | None = None

    def _connect(self, timeout: float) -> _Connection:
        with self._lock:
            connection = self._connection
            if connection is not None and not connection.closed and not connection.goaway:
                return connection
            if connection is not None:
                connection.close()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(max(0.01, min(timeout, 5.0)))
            try:
                sock.connect(self.socket_path)
            except OSError as err:
                sock.close()
                raise RpcError("UNAVAILABLE", f"cannot connect to {self.socket_path}: {err}") from None
            sock.settimeout(None)
            connection = _Connection(sock, client_side=True, name="rpc-client")
            try:
                connection.start()
            except OSError as err:
                sock.close()
                raise RpcError("UNAVAILABLE", f"cannot start HTTP/2 on {self.socket_path}: {err}") from None
            self._connection = connection
            return connection

    def call(self, path: str, request: Any, reply_type: type[T], timeout: float) -> T:
        """Call ``path`` (``/pkg.Service/Method``); raise RpcError with the status on failure."""
        deadline = time.monotonic() + timeout
        body = grpc_frame(_encode(request))
        connection = self._connect(timeout)
        headers = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", path.encode()),
                   (b":authority", b"localhost"), (b"content-type", b"application/grpc"), (b"te", b"trailers"),
                   (b"grpc-timeout", f"{min(max(1, int(timeout * 1000)), 99_999_999)}m".encode())]  # 8 digits
        stream_id = None
        with connection.cond:
            try:
                stream_id = connection.h2.get_next_available_stream_id()
                stream = connection.streams[stream_id] = _Stream()
                connection.h2.send_headers(stream_id, headers)
                connection.flush()
                connection.send_body(stream_id, body, deadline)
                while not (stream.ended or stream.reset is not None or connection.closed):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise RpcError("DEADLINE_EXCEEDED", "deadline exceeded")
                    connection.cond.wait(remaining)
            except (OSError, h2.exceptions.H2Error) as err:
                raise RpcError("UNAVAILABLE", f"{type(err).__name__}: {err}") from None
            except RpcError:
                if stream_id is not None:
                    self._cancel(connection, stream_id)
                raise
            finally:
                if stream_id is not None:
                    connection.streams.pop(stream_id, None)
        if not stream.ended:
            if stream.reset is not None:
                raise RpcError("CANCELLED" if stream.reset == _H2_CANCEL else "UNAVAILABLE",
                               f"stream reset by the server (HTTP/2 error {stream.reset})")
            raise RpcError("UNAVAILABLE", "connection closed")
        code, message = _status(stream)
        if code != "OK":
            raise RpcError(code, message)
        if stream.oversized:
            raise RpcError("RESOURCE_EXHAUSTED", f"answer over {MAX_MESSAGE_BYTES} bytes")
        return _decode(_unframe(stream.body), reply_type)

    @staticmethod
    def _cancel(connection: _Connection, stream_id: int) -> None:
        try:
            connection.h2.reset_stream(stream_id, _H2_CANCEL)
            connection.flush()
        except (OSError, h2.exceptions.H2Error):
            pass  # the stream or the connection is gone already

    def call_method(self, service: ServiceDescriptor, name: str, request: Any, timeout: float) -> Any:
        """Call method ``name`` of a protobuf ``service``; the path and reply type come from the proto."""
        path, _, reply_type = method_types(service, name)
        return self.call(path, request, reply_type, timeout)

    def close(self) -> None:
        with self._lock:
            connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


# A served method: the handler takes the decoded request and returns the reply, or raises RpcError.
Method = tuple[Callable[[Any], Any], type, type]


def method_types(service: ServiceDescriptor, name: str) -> tuple[str, type, type]:
    """``/package.Service/Method``, request class, reply class; KeyError for a method the service lacks."""
    method = service.methods_by_name[name]
    return (f"/{service.full_name}/{method.name}", GetMessageClass(method.input_type),
            GetMessageClass(method.output_type))


def method_path(service: ServiceDescriptor, name: str) -> str:
    return method_types(service, name)[0]


def service_methods(service: ServiceDescriptor, handlers: dict[str, Callable[[Any], Any]]) -> dict[str, Method]:
    """Served methods from a protobuf service descriptor and handlers by method name (types come from the proto)."""
    methods: dict[str, Method] = {}
    for name, function in handlers.items():
        path, request_type, reply_type = method_types(service, name)
        methods[path] = (function, request_type, reply_type)
    return methods


class UnaryServer:
    """Serves unary ``methods`` on a unix socket (mode 0660; a stale socket is replaced, a live one refused)."""

    def __init__(self, socket_path: str, methods: dict[str, Method], what: str, *, max_workers: int = 2) -> None:
        self.socket_path = socket_path
        self.methods = methods
        self.what = what
        self._pool = WorkerPool(max_workers, name=what)  # daemon threads: a stuck handler never blocks exit
        self._listener: socket.socket | None = None
        self._connections: set[_Connection] = set()
        self._lock = threading.Lock()
        self._running = 0  # calls being handled
        self._idle = threading.Condition(self._lock)

    def start(self) -> UnaryServer:
        os.makedirs(os.path.dirname(self.socket_path) or ".", exist_ok=True)
        remove_stale_socket(self.socket_path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o777 & ~SOCKET_MODE)  # never more open than 0660, not even briefly
        try:
            listener.bind(self.socket_path)
        except OSError as err:
            listener.close()
            raise OSError(f"cannot listen on {self.what} socket {self.socket_path}: {err}") from None
        finally:
            os.umask(old_umask)
        os.chmod(self.socket_path, SOCKET_MODE)
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True, name=f"{self.what}-accept").start()
        log.info("%s API serving", self.what, extra={"socket": self.socket_path})
        return self

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError as err:
                if self._listener is listener:  # not stopped: out of descriptors and the like
                    log.error("%s API cannot accept a connection: %s", self.what, err)
                    time.sleep(0.5)
                    continue
                return
            connection = _Connection(sock, client_side=False, name=self.what, on_event=self._event)
            with self._lock:
                self._connections.add(connection)
            try:
                connection.start()
            except OSError:
                connection.close()

    def _event(self, connection: _Connection, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.ConnectionTerminated):  # the reader ended: the connection is gone
            with self._lock:
                self._connections.discard(connection)
            return
        stream = connection.streams.pop(event.stream_id, None)  # cond held (called from the reader)
        if stream is None or not isinstance(event, h2.events.StreamEnded):
            return  # a reset request is simply dropped
        with self._lock:
            self._running += 1
        try:
            self._pool.submit(self._handle, connection, event.stream_id, stream)
        except RuntimeError:  # shut down
            with self._lock:
                self._running -= 1

    def _handle(self, connection: _Connection, stream_id: int, stream: _Stream) -> None:
        try:
            self._answer(connection, stream_id, *self._call(stream))
        finally:
            with self._lock:
                self._running -= 1
                self._idle.notify_all()

    def _call(self, stream: _Stream) -> tuple[str, str, bytes | None]:
        """The status name, message and reply body for one request."""
        path = stream.headers.get(b":path", b"").decode("utf-8", "replace")
        method = self.methods.get(path)
        if method is None:
            return "UNIMPLEMENTED", f"unknown method {path}", None
        function, request_type, _ = method
        try:
            if stream.oversized:
                raise RpcError("RESOURCE_EXHAUSTED", f"request over {MAX_MESSAGE_BYTES} bytes")
            request = _decode(_unframe(stream.body), request_type)
            return "OK", "", grpc_frame(_encode(function(request)))
        except RpcError as err:
            return (err.code if err.code in STATUS_CODES else "UNKNOWN"), err.message, None
        except Exception as err:
            log.exception("%s API %s failed", self.what, path)
            return "INTERNAL", f"{type(err).__name__}: {err}", None

    @staticmethod
    def _answer(connection: _Connection, stream_id: int, code: str, message: str, body: bytes | None) -> None:
        status = [(b"grpc-status", str(STATUS_CODES[code]).encode())]
        if message:
            status.append((b"grpc-message", quote(message, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~").encode()))
        headers = [(b":status", b"200"), (b"content-type", b"application/grpc")]
        with connection.cond:
            try:
                if body is None:  # trailers-only
                    connection.h2.send_headers(stream_id, headers + status, end_stream=True)
                    connection.flush()
                    return
                connection.h2.send_headers(stream_id, headers)
                connection.flush()
                connection.send_body(stream_id, body, None, end_stream=False)  # the trailers end the stream
                connection.h2.send_headers(stream_id, status, end_stream=True)
                connection.flush()
            except (OSError, h2.exceptions.H2Error, RpcError) as err:  # the client went away or reset the call
                log.debug("%s API answer not sent: %s", connection.name, err)

    def stop(self, grace: float = 1.0) -> None:
        """Stop serving: running calls get ``grace`` seconds, then connections close and the socket goes."""
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
            with self._lock:
                self._idle.wait_for(lambda: self._running == 0, grace)
                connections = list(self._connections)
            for connection in connections:
                connection.close()
            self._pool.shutdown(cancel_queued=True)  # the connections are closed: no one takes an answer
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
