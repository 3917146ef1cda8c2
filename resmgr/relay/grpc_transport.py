"""The gRPC transport of the relay: a gRPC server whose one generic handler re-issues every call.

Every call is terminated here and forwarded as raw bytes on a long-lived channel (no
decode), so the relay also serves methods it has never heard of. Slower than the splice
transport (a Python gRPC server plus client per call), but it can split one client
connection's calls between a runtime socket and a separate image service socket.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from typing import Any

import grpc

from resmgr.relay import forwarding
from resmgr.relay.dump import Dumper
from resmgr.relay.forwarding import Upstream
from resmgr.relay.interception import Interceptor
from resmgr.relay.methods import CriMethod, cri_methods, short_name
from resmgr.relay.metrics import RelayMetrics

log = logging.getLogger(__name__)

# Read-only calls kubelet makes constantly and that finish quickly: they take the fast
# blocking path. Everything else (state changes, ExecSync, image pulls, unknown methods)
# is forwarded cancellably, so a caller that gives up also stops the runtime's work.
HOT_METHODS = frozenset({
    "Version", "Status", "RuntimeConfig", "ListPodSandbox", "PodSandboxStatus", "ListContainers",
    "ContainerStatus", "ContainerStats", "ListContainerStats", "PodSandboxStats", "ListPodSandboxStats",
    "ListMetricDescriptors", "ListPodSandboxMetrics", "ListImages", "ImageStatus", "ImageFsInfo",
})

SERVER_OPTIONS: tuple[tuple[str, object], ...] = (
    ("grpc.max_receive_message_length", forwarding.MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", forwarding.MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
)



class _GenericHandler(grpc.GenericRpcHandler):
    def __init__(self, transport: GrpcTransport) -> None:
        self._transport = transport
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}
        self._lock = threading.Lock()

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        path = handler_call_details.method
        handler = self._handlers.get(path)
        if handler is None:
            with self._lock:
                handler = self._handlers.get(path)
                if handler is None:
                    handler = self._transport.build_handler(path)
                    # Bound the cache: unknown paths are rare, but must not grow memory forever.
                    if len(self._handlers) < 1024:
                        self._handlers[path] = handler
        return handler


class GrpcTransport:
    """Serves the relay socket with a gRPC server that forwards over ``upstream``."""

    def __init__(self, *, relay_socket: str, upstream: Upstream, interceptor: Interceptor, metrics: RelayMetrics,
                 dumper: Dumper, intercepted: frozenset[str], max_workers: int = 32,
                 observers: Mapping[str, Callable[[bytes, bytes], None]] | None = None) -> None:
        self.relay_socket = relay_socket
        self.upstream = upstream
        self.interceptor = interceptor
        self.metrics = metrics
        self.dumper = dumper
        self.intercepted = intercepted
        self.observers = dict(observers or {})  # path -> reader of a unary call's request and answer
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="relay"),
                                   handlers=[_GenericHandler(self)], options=SERVER_OPTIONS)

    def bind(self, mode: int) -> None:
        # Bind with a umask so the socket is never more open than ``mode``, not even briefly.
        old_umask = os.umask(0o777 & ~mode)
        try:
            port = self._server.add_insecure_port("unix://" + self.relay_socket)
        finally:
            os.umask(old_umask)
        if not port:
            raise OSError(f"cannot listen on relay socket {self.relay_socket}")

    def start(self) -> None:
        self._server.start()

    def stop(self, grace: float) -> None:
        self._server.stop(grace).wait()
        self.upstream.close()

    def build_handler(self, path: str) -> grpc.RpcMethodHandler:
        """Choose how to relay ``path``: intercepted, unary, server-streaming or unknown (any shape)."""
        method = cri_methods().get(path)
        name = short_name(path)
        runtime = self.upstream.endpoint_for(path)
        if method is None or method.client_streaming:
            # Unknown shape: relaying as stream-stream is exact for any cardinality.
            log.debug("relaying method as a raw stream", extra={"method": path})
            upstream_ss = self.upstream.stream_stream(path)
            label = name if method is not None else "other"

            def raw_stream(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
                responses = forwarding.forward_stream_stream(upstream_ss, requests, context, runtime)
                return self._observe_stream(path, label, responses, context)
            return grpc.stream_stream_rpc_method_handler(raw_stream)
        if method.server_streaming:
            upstream_us = self.upstream.unary_stream(path)

            def server_streaming(request: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
                responses = forwarding.forward_unary_stream(upstream_us, request, context, runtime)
                return self._observe_stream(path, name, responses, context)
            return grpc.unary_stream_rpc_method_handler(server_streaming)
        upstream_uu = self.upstream.unary(path)
        if path in self.intercepted:
            return grpc.unary_unary_rpc_method_handler(self._intercepted_handler(method, upstream_uu, runtime))
        return grpc.unary_unary_rpc_method_handler(
            self._unary_handler(path, name, upstream_uu, cancellable=name not in HOT_METHODS, runtime=runtime,
                                observer=self.observers.get(path)))

    def _unary_handler(self, path: str, name: str, upstream_uu: grpc.UnaryUnaryMultiCallable, *,
                       cancellable: bool, runtime: str, observer: Callable[[bytes, bytes], None] | None = None
                       ) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        observe = self.metrics.observe
        dumper = self.dumper

        def unary(request: bytes, context: grpc.ServicerContext) -> bytes:
            started = time.perf_counter()
            try:
                response = forwarding.forward_unary(upstream_uu, request, context, cancellable=cancellable,
                                                    runtime=runtime)
            except Exception:
                self._finish_error(path, name, request, context, started)
                raise
            latency = time.perf_counter() - started
            observe(name, "OK", latency)
            if dumper.enabled(name):
                dumper.dump(path, name, request, response, None, latency)
            if observer is not None:  # only hands the bytes over (resmgr.relay.exits reads them on its own thread)
                observer(request, response)
            return response
        return unary

    def _intercepted_handler(self, method: CriMethod, upstream_uu: grpc.UnaryUnaryMultiCallable, runtime: str
                             ) -> Callable[[bytes, grpc.ServicerContext], bytes]:
        path, name = method.path, method.name

        def intercepted(request: bytes, context: grpc.ServicerContext) -> bytes:
            started = time.perf_counter()
            sent: list[bytes] = []

            def forward(outgoing: bytes) -> bytes:
                sent.append(outgoing)
                return forwarding.forward_unary(upstream_uu, outgoing, context, cancellable=True, runtime=runtime)
            try:
                response = self.interceptor.handle(method, request, forward)
            except Exception:
                self._finish_error(path, name, sent[-1] if sent else request, context, started)
                raise
            latency = time.perf_counter() - started
            self.metrics.observe(name, "OK", latency)
            if self.dumper.enabled(name):
                self.dumper.dump(path, name, sent[-1] if sent else request, response, None, latency)
            return response
        return intercepted

    def _finish_error(self, path: str, name: str, request: bytes | None, context: Any,
                      started: float) -> None:
        latency = time.perf_counter() - started
        code = _context_code(context)
        self.metrics.observe(name, code, latency)
        if code == "UNAVAILABLE":
            self.metrics.relay_error(name, "upstream_unavailable")
        if self.dumper.enabled(name):
            details = _context_details(context)
            self.dumper.dump(path, name, request, None, f"{code}: {details}", latency)

    def _observe_stream(self, path: str, name: str, responses: Iterator[bytes],
                        context: grpc.ServicerContext) -> Iterator[bytes]:
        started = time.perf_counter()
        try:
            yield from responses
        except Exception:
            self._finish_error(path, name, None, context, started)
            raise
        self.metrics.observe(name, "OK", time.perf_counter() - started)


def _context_code(context: Any) -> str:
    code = context.code()
    return code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"


def _context_details(context: Any) -> str:
    details = context.details()
    if isinstance(details, bytes):
        return details.decode("utf-8", "replace")
    return str(details or "")
