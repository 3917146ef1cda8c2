"""Unary gRPC on unix sockets for the cri-resmgr process, without grpcio.

grpcio alone costs a Python process about 20 MB of resident memory, half the relay's
budget. cri-resmgr only needs a few unary calls of its own (startup sync and container
updates toward the runtime, the Config API it serves, the agent it asks), so it uses
grpclib (gRPC on the ``h2`` library the splice transport already loads) on one background
asyncio loop. Callers stay plain blocking functions in threads.

Messages are protobuf classes, or ``bytes`` for a raw pass-through body.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref
from collections.abc import Callable, Coroutine
from concurrent import futures
from typing import Any, TypeVar

from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message_factory import GetMessageClass
from grpclib.client import Channel
from grpclib.const import Cardinality, Handler, Status
from grpclib.encoding.proto import ProtoCodec
from grpclib.exceptions import GRPCError, ProtocolError, StreamTerminatedError
from grpclib.server import Server, Stream

from resmgr.rpc.sockets import remove_stale_socket

log = logging.getLogger("resmgr.unixrpc")

SOCKET_MODE = 0o660
T = TypeVar("T")


class RpcError(Exception):
    """A failed call: ``code`` is the gRPC status name (``UNAVAILABLE``), ``message`` the details."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class _RawOrProtoCodec(ProtoCodec):
    """protobuf messages as usual; ``bytes`` bodies pass unchanged (nothing is decoded)."""

    def encode(self, message: Any, message_type: type) -> bytes:
        if message_type is bytes:
            return bytes(message)
        return super().encode(message, message_type)

    def decode(self, data: bytes, message_type: type) -> Any:
        if message_type is bytes:
            return bytes(data)
        return super().decode(data, message_type)


class _Loop:
    """One event loop in a daemon thread, shared by every client and server of the process."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="unixrpc")
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self.thread:
            raise RuntimeError("blocking RPC call from the RPC loop itself")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except futures.TimeoutError:
            future.cancel()
            raise


_loop: _Loop | None = None
_loop_lock = threading.Lock()


def rpc_loop() -> _Loop:
    global _loop
    with _loop_lock:
        if _loop is None:
            _loop = _Loop()
        return _loop


def _failure(err: BaseException) -> RpcError:
    if isinstance(err, GRPCError):
        return RpcError(err.status.name, err.message or "")
    if isinstance(err, (asyncio.TimeoutError, futures.TimeoutError)):
        return RpcError("DEADLINE_EXCEEDED", "deadline exceeded")
    if isinstance(err, (OSError, StreamTerminatedError, ProtocolError)):
        return RpcError("UNAVAILABLE", str(err) or type(err).__name__)
    return RpcError("UNKNOWN", f"{type(err).__name__}: {err}")


class UnaryClient:
    """Blocking unary calls to the gRPC server on ``socket_path``; one connection, re-dialled when lost."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self._rpc = rpc_loop()
        self._channel: Channel = self._rpc.run(self._open())

    async def _open(self) -> Channel:
        return Channel(path=self.socket_path, codec=_RawOrProtoCodec())

    def call(self, path: str, request: Any, reply_type: type[T], timeout: float) -> T:
        """Call ``path`` (``/pkg.Service/Method``); raise RpcError with the status on failure."""

        async def call() -> T:
            stream = self._channel.request(path, Cardinality.UNARY_UNARY, type(request), reply_type,
                                           timeout=timeout)
            async with stream:
                await stream.send_message(request, end=True)
                reply = await stream.recv_message()
                if reply is None:  # trailers-only answers raise above; this is a protocol slip
                    raise GRPCError(Status.INTERNAL, "no reply message")
                return reply

        try:
            # A second more than the call's own deadline, so grpclib reports it first.
            return self._rpc.run(call(), timeout + 1.0)
        except Exception as err:
            raise _failure(err) from None

    def call_method(self, service: ServiceDescriptor, name: str, request: Any, timeout: float) -> Any:
        """Call method ``name`` of a protobuf ``service``; the path and reply type come from the proto."""
        path, _, reply_type = method_types(service, name)
        return self.call(path, request, reply_type, timeout)

    def close(self) -> None:
        channel = self._channel

        async def close() -> None:
            channel.close()

        try:
            self._rpc.run(close(), 5.0)
        except Exception as err:  # closing must never fail a shutdown
            log.debug("closing the channel to %s: %s", self.socket_path, err)


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


class _Service:
    def __init__(self, methods: dict[str, Method], executor: futures.Executor, what: str) -> None:
        self.methods = methods
        self.executor = executor
        self.what = what

    def __mapping__(self) -> dict[str, Handler]:
        return {path: Handler(self._handler(path, function), Cardinality.UNARY_UNARY, request_type, reply_type)
                for path, (function, request_type, reply_type) in self.methods.items()}

    def _handler(self, path: str, function: Callable[[Any], Any]) -> Callable[[Stream], Coroutine[Any, Any, None]]:
        async def handle(stream: Stream) -> None:
            request = await stream.recv_message()
            # Handlers block (they apply configs and send container updates): keep them off the loop.
            try:
                reply = await asyncio.get_running_loop().run_in_executor(self.executor, function, request)
            except RpcError as err:
                raise GRPCError(Status[err.code] if err.code in Status.__members__ else Status.UNKNOWN,
                                err.message) from None
            except Exception as err:
                log.exception("%s API %s failed", self.what, path)
                raise GRPCError(Status.INTERNAL, f"{type(err).__name__}: {err}") from None
            await stream.send_message(reply)

        return handle


class _Server(Server):
    """grpclib's Server that also closes its open connections on stop.

    Python 3.11's asyncio leaves accepted connections open when a server closes; clients
    must see the connection drop (the agent re-sends its config after a restart).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.protocols: weakref.WeakSet[Any] = weakref.WeakSet()

    def _protocol_factory(self) -> Any:
        protocol = super()._protocol_factory()
        self.protocols.add(protocol)
        return protocol

    def close_connections(self) -> None:
        for protocol in list(self.protocols):
            connection = getattr(protocol, "connection", None)  # set once the connection is made
            if connection is not None:
                connection.close()


class UnaryServer:
    """Serves unary ``methods`` on a unix socket (mode 0660; a stale socket is replaced, a live one refused)."""

    def __init__(self, socket_path: str, methods: dict[str, Method], what: str, *, max_workers: int = 2) -> None:
        self.socket_path = socket_path
        self.what = what
        self._rpc = rpc_loop()
        self._executor = futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=what)
        self._service = _Service(methods, self._executor, what)
        self._server: _Server | None = None

    def start(self) -> UnaryServer:
        os.makedirs(os.path.dirname(self.socket_path) or ".", exist_ok=True)
        remove_stale_socket(self.socket_path)

        async def start() -> _Server:
            server = _Server([self._service], codec=_RawOrProtoCodec())
            old_umask = os.umask(0o777 & ~SOCKET_MODE)  # never more open than 0660, not even briefly
            try:
                await server.start(path=self.socket_path)
            finally:
                os.umask(old_umask)
            return server

        try:
            self._server = self._rpc.run(start(), 30.0)
        except OSError as err:
            raise OSError(f"cannot listen on {self.what} socket {self.socket_path}: {err}") from None
        os.chmod(self.socket_path, SOCKET_MODE)
        log.info("%s API serving", self.what, extra={"socket": self.socket_path})
        return self

    def stop(self, grace: float = 1.0) -> None:
        """Stop serving: running calls get ``grace`` seconds, then the socket is removed."""
        server, self._server = self._server, None
        if server is not None:
            async def stop() -> None:
                server.close()
                try:
                    await asyncio.wait_for(server.wait_closed(), grace)
                finally:
                    server.close_connections()

            try:
                self._rpc.run(stop(), grace + 5.0)
            except Exception as err:
                log.debug("%s API did not close cleanly: %s", self.what, err)
            self._executor.shutdown(wait=False, cancel_futures=True)
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
