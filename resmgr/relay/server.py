"""The relay: a gRPC server on the relay socket that forwards every call to the runtime.

Routing is done by one generic handler, so the server needs no generated servicer and
relays methods it has never heard of. Handlers are built once per method path.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc

from resmgr.dump import Dumper
from resmgr.hooks import INTERCEPTED_METHODS, NoopHook, ResourceManagerHook
from resmgr.metrics import RelayMetrics
from resmgr.relay import forwarding
from resmgr.relay.forwarding import Upstream, endpoint_path
from resmgr.relay.interception import Interceptor
from resmgr.relay.methods import RUNTIME_SERVICE, CriMethod, cri_methods, short_name
from resmgr.relay.splice import SpliceServer
from resmgr.relay.startup import (
    RuntimeSnapshot,
    remove_pid_file,
    remove_stale_socket,
    sync_from_runtime,
    wait_for_runtime,
    write_pid_file,
)

log = logging.getLogger(__name__)

DEFAULT_RELAY_SOCKET = "/var/run/cri-resmgr/cri-resmgr.sock"
DEFAULT_RUNTIME_SOCKET = "/var/run/containerd/containerd.sock"
DEFAULT_PID_FILE = "/var/run/cri-resmgr/cri-resmgr.pid"
SOCKET_MODE = 0o660
# splice: copy HTTP/2 frames (fast); grpc: a gRPC server + client per call (can split runtime/image sockets).
TRANSPORTS = ("auto", "splice", "grpc")

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


class _RelayHandler(grpc.GenericRpcHandler):
    def __init__(self, relay: Relay) -> None:
        self._relay = relay
        self._handlers: dict[str, grpc.RpcMethodHandler] = {}
        self._lock = threading.Lock()

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        path = handler_call_details.method
        handler = self._handlers.get(path)
        if handler is None:
            with self._lock:
                handler = self._handlers.get(path)
                if handler is None:
                    handler = self._relay.build_handler(path)
                    # Bound the cache: unknown paths are rare, but must not grow memory forever.
                    if len(self._handlers) < 1024:
                        self._handlers[path] = handler
        return handler


class Relay:
    """A CRI relay between a client (kubelet) and the runtime.

    ``hook`` is the resource manager (the ``none`` policy by default). The hook is called
    under one lock for the INTERCEPTED_METHODS; all other calls pass through as raw bytes.
    """

    def __init__(self, *, relay_socket: str, runtime_socket: str, image_socket: str | None = None,
                 hook: ResourceManagerHook | None = None, metrics: RelayMetrics | None = None,
                 dumper: Dumper | None = None, pid_file: str | None = None, max_workers: int = 32,
                 runtime_wait_timeout: float | None = None, transport: str = "auto") -> None:
        self.relay_socket = endpoint_path(relay_socket)
        self.runtime_socket = runtime_socket
        self.image_socket = image_socket or runtime_socket
        self.hook: ResourceManagerHook = hook if hook is not None else NoopHook()
        self.metrics = metrics or RelayMetrics()
        self.dumper = dumper or Dumper()
        self.pid_file = pid_file
        self.max_workers = max_workers
        self.runtime_wait_timeout = runtime_wait_timeout
        if transport not in TRANSPORTS:
            raise ValueError(f"unknown transport {transport!r}; use one of {', '.join(TRANSPORTS)}")
        if transport == "auto":
            # Splicing frames needs one upstream per client connection; a separate image
            # service socket means splitting a connection's calls, which only gRPC can do.
            transport = "splice" if endpoint_path(self.image_socket) == endpoint_path(runtime_socket) else "grpc"
        elif transport == "splice" and endpoint_path(self.image_socket) != endpoint_path(runtime_socket):
            raise ValueError("the splice transport needs the image service on the runtime socket; use grpc")
        self.transport = transport
        self.upstream = Upstream(runtime_socket, self.image_socket)
        self.interceptor = Interceptor(self.hook, self.metrics, self._send_update)
        self.snapshot: RuntimeSnapshot | None = None
        self.stopping = threading.Event()
        self._server: grpc.Server | None = None
        self._splice: SpliceServer | None = None
        self._intercepted = frozenset(f"/{RUNTIME_SERVICE}/{name}" for name in INTERCEPTED_METHODS)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Wait for the runtime, sync, then serve on the relay socket (mode 0660) and write the pid file."""
        wait_for_runtime(self.upstream.runtime_channel, self.runtime_socket, stop=self.stopping,
                         timeout=self.runtime_wait_timeout)
        if self.image_socket != self.runtime_socket:
            wait_for_runtime(self.upstream.image_channel, self.image_socket, stop=self.stopping,
                             timeout=self.runtime_wait_timeout)
        self.snapshot = sync_from_runtime(self.upstream.runtime_channel)
        sync = getattr(self.hook, "sync", None)
        if callable(sync):
            try:
                sync(self.snapshot.pods, self.snapshot.containers)
            except Exception:
                log.exception("resource manager failed to sync startup state; continuing")
                self.metrics.policy_error("sync", "sync")
        os.makedirs(os.path.dirname(self.relay_socket) or ".", exist_ok=True)
        remove_stale_socket(self.relay_socket)
        if self.transport == "splice":
            splice = SpliceServer(relay_socket=self.relay_socket, runtime_socket=endpoint_path(self.runtime_socket),
                                  interceptor=self.interceptor, metrics=self.metrics, dumper=self.dumper,
                                  intercepted=self._intercepted)
            splice.bind(SOCKET_MODE)
            splice.start()
            self._splice = splice
        else:
            self._start_grpc_server()
        if self.pid_file:
            write_pid_file(self.pid_file)
        log.info("relay serving", extra={"socket": self.relay_socket, "runtime": self.runtime_socket,
                                         "image": self.image_socket, "hook": type(self.hook).__name__,
                                         "transport": self.transport})

    def _start_grpc_server(self) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self.max_workers,
                                                        thread_name_prefix="relay"),
                             handlers=[_RelayHandler(self)], options=SERVER_OPTIONS)
        # Bind with a umask so the socket is never more open than 0660, not even briefly.
        old_umask = os.umask(0o117)
        try:
            port = server.add_insecure_port("unix://" + self.relay_socket)
        finally:
            os.umask(old_umask)
        if not port:
            raise OSError(f"cannot listen on relay socket {self.relay_socket}")
        server.start()
        os.chmod(self.relay_socket, SOCKET_MODE)
        self._server = server

    def stop(self, grace: float = 5.0) -> None:
        """Stop accepting calls, let in-flight calls finish (up to ``grace`` s), then clean up."""
        self.stopping.set()
        server, self._server = self._server, None
        splice, self._splice = self._splice, None
        if server is not None or splice is not None:
            log.info("relay draining in-flight calls", extra={"grace_s": grace})
            if server is not None:
                server.stop(grace).wait()
            if splice is not None:
                splice.stop(grace)
            # Only a socket we created is ours to remove (never another relay's, never a stray file).
            try:
                os.unlink(self.relay_socket)
            except FileNotFoundError:
                pass
        self.upstream.close()
        if self.pid_file:
            remove_pid_file(self.pid_file)
        self.dumper.close()
        log.info("relay stopped")

    def wait(self, timeout: float | None = None) -> bool:
        return self.stopping.wait(timeout)

    # -- per-method handlers ---------------------------------------------------------------

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
        if path in self._intercepted:
            return grpc.unary_unary_rpc_method_handler(self._intercepted_handler(method, upstream_uu, runtime))
        return grpc.unary_unary_rpc_method_handler(
            self._unary_handler(path, name, upstream_uu, cancellable=name not in HOT_METHODS, runtime=runtime))

    def _unary_handler(self, path: str, name: str, upstream_uu: grpc.UnaryUnaryMultiCallable, *,
                       cancellable: bool, runtime: str) -> Callable[[bytes, grpc.ServicerContext], bytes]:
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

    def _send_update(self, request: bytes) -> object:
        return self.upstream.unary(f"/{RUNTIME_SERVICE}/UpdateContainerResources")(request, timeout=30)


def _context_code(context: Any) -> str:
    code = context.code()
    return code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"


def _context_details(context: Any) -> str:
    details = context.details()
    if isinstance(details, bytes):
        return details.decode("utf-8", "replace")
    return str(details or "")
