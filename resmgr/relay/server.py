"""The relay's lifecycle: wait for the runtime, sync, serve the relay socket with a transport, drain.

Two transports carry the calls: ``splice`` (HTTP/2 frames copied between client and
runtime, the default) and ``grpc`` (a gRPC server re-issuing each call). Both hand the
INTERCEPTED_METHODS to the same Interceptor, and relay everything else untouched.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from resmgr.options import TRANSPORTS
from resmgr.relay.dump import Dumper
from resmgr.relay.exits import LISTING_METHOD, ExitWatcher
from resmgr.relay.hooks import INTERCEPTED_METHODS, ContainerUpdate, NoopHook, ResourceManagerHook
from resmgr.relay.interception import Interceptor
from resmgr.relay.methods import RUNTIME_SERVICE
from resmgr.relay.metrics import RelayMetrics
from resmgr.relay.splice import SpliceServer
from resmgr.relay.startup import (
    RuntimeSnapshot,
    container_resources,
    remove_pid_file,
    sync_from_runtime,
    wait_for_runtime,
    write_pid_file,
)
from resmgr.rpc.sockets import endpoint_path, remove_stale_socket
from resmgr.rpc.unixrpc import UnaryClient

if TYPE_CHECKING:
    from resmgr.relay.grpc_transport import GrpcTransport

log = logging.getLogger(__name__)

SOCKET_MODE = 0o660


class Relay:
    """A CRI relay between a client (kubelet) and the runtime.

    ``hook`` is the resource manager (the ``none`` policy by default). The hook is called
    under one lock for the INTERCEPTED_METHODS; all other calls pass through as raw bytes.
    """

    def __init__(self, *, relay_socket: str, runtime_socket: str, image_socket: str | None = None,
                 hook: ResourceManagerHook | None = None, metrics: RelayMetrics | None = None,
                 dumper: Dumper | None = None, pid_file: str | None = None, max_workers: int = 32,
                 runtime_wait_timeout: float | None = None, transport: str = "auto",
                 drift_check_period: float = 30.0) -> None:
        self.relay_socket = endpoint_path(relay_socket)
        self.runtime_socket = runtime_socket
        self.image_socket = image_socket or runtime_socket
        self.hook: ResourceManagerHook = hook if hook is not None else NoopHook()
        self.metrics = metrics or RelayMetrics()
        self.dumper = dumper or Dumper()
        self.pid_file = pid_file
        self.max_workers = max_workers
        self.runtime_wait_timeout = runtime_wait_timeout
        self.drift_check_period = drift_check_period
        if transport not in TRANSPORTS:
            raise ValueError(f"unknown transport {transport!r}; use one of {', '.join(TRANSPORTS)}")
        if transport == "auto":
            # Splicing frames needs one upstream per client connection; a separate image
            # service socket means splitting a connection's calls, which only gRPC can do.
            transport = "splice" if endpoint_path(self.image_socket) == endpoint_path(runtime_socket) else "grpc"
        elif transport == "splice" and endpoint_path(self.image_socket) != endpoint_path(runtime_socket):
            raise ValueError("the splice transport needs the image service on the runtime socket; use grpc")
        self.transport = transport
        # The relay's own calls (startup sync, container updates) use resmgr.rpc.unixrpc, never grpcio:
        # importing grpcio would double the relay's memory (see resmgr.rpc.unixrpc).
        self.runtime = UnaryClient(endpoint_path(runtime_socket))
        self.image = self.runtime if self.image_socket == runtime_socket else UnaryClient(
            endpoint_path(self.image_socket))
        # Exits come to light only in the runtime's ListContainers answers (resmgr.relay.exits); a hook that
        # tracks no containers (the none policy's NoopHook) has them passed through unread.
        self.exits = ExitWatcher(self.hook.containers_exited, lambda updates, method: self.interceptor.apply_updates(
            updates, method), self.metrics) if self.hook.keeps_containers() else None
        self.interceptor = Interceptor(self.hook, self.metrics, self._send_update, list_runtime=self._list_runtime,
                                       container_resources=lambda ids: container_resources(self.runtime, ids),
                                       settle_exits=self.exits.settle if self.exits else None)
        self._observers = {f"/{RUNTIME_SERVICE}/{LISTING_METHOD}": self.exits.offer} if self.exits else {}
        self.snapshot: RuntimeSnapshot | None = None
        self.stopping = threading.Event()
        self._transport: SpliceServer | GrpcTransport | None = None
        self._intercepted = frozenset(f"/{RUNTIME_SERVICE}/{name}" for name in INTERCEPTED_METHODS)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Wait for the runtime, sync, then serve on the relay socket (mode 0660) and write the pid file."""
        wait_for_runtime(self.runtime, self.runtime_socket, stop=self.stopping, timeout=self.runtime_wait_timeout)
        if self.image is not self.runtime:
            wait_for_runtime(self.image, self.image_socket, stop=self.stopping, timeout=self.runtime_wait_timeout)
        self.snapshot = sync_from_runtime(self.runtime)
        self._call_hook_entry("sync_with_runtime", self.hook.sync_with_runtime, self.snapshot.pods,
                              self.snapshot.containers)
        os.makedirs(os.path.dirname(self.relay_socket) or ".", exist_ok=True)
        remove_stale_socket(self.relay_socket)
        transport: SpliceServer | GrpcTransport
        if self.transport == "splice":
            transport = SpliceServer(relay_socket=self.relay_socket,
                                     runtime_socket=endpoint_path(self.runtime_socket), interceptor=self.interceptor,
                                     metrics=self.metrics, dumper=self.dumper, intercepted=self._intercepted,
                                     observers=self._observers)
        else:
            from resmgr.relay.forwarding import Upstream  # grpcio: only for this transport
            from resmgr.relay.grpc_transport import GrpcTransport
            transport = GrpcTransport(relay_socket=self.relay_socket,
                                      upstream=Upstream(self.runtime_socket, self.image_socket),
                                      interceptor=self.interceptor, metrics=self.metrics, dumper=self.dumper,
                                      intercepted=self._intercepted, max_workers=self.max_workers,
                                      observers=self._observers)
        transport.bind(SOCKET_MODE)
        if self.exits is not None:
            self.exits.start()
        transport.start()
        self._transport = transport
        if self.pid_file:
            write_pid_file(self.pid_file)
        if self.drift_check_period > 0:
            threading.Thread(target=self._check_drift_periodically, name="drift-check", daemon=True).start()
        log.info("relay serving", extra={"socket": self.relay_socket, "runtime": self.runtime_socket,
                                         "image": self.image_socket, "hook": type(self.hook).__name__,
                                         "transport": self.transport})

    def stop(self, grace: float = 5.0) -> None:
        """Stop accepting calls, let in-flight calls finish (up to ``grace`` s), then clean up."""
        self.stopping.set()
        transport, self._transport = self._transport, None
        if transport is not None:
            log.info("relay draining in-flight calls", extra={"grace_s": grace})
            transport.stop(grace)
            # Only a socket we created is ours to remove (never another relay's, never a stray file).
            try:
                os.unlink(self.relay_socket)
            except FileNotFoundError:
                pass
        if self.exits is not None:
            self.exits.close()
        self.runtime.close()
        if self.image is not self.runtime:
            self.image.close()
        if self.pid_file:
            remove_pid_file(self.pid_file)
        self.dumper.close()
        log.info("relay stopped")

    def reconfigure_hook(self, config: dict) -> None:
        """Hand a re-read config to the resource manager and apply its updates."""
        self._call_hook_entry("reconfigure", self.hook.reconfigure, config)

    def _call_hook_entry(self, entry: str, function: Callable[..., list[ContainerUpdate]], *args: object) -> None:
        """Call a resource-manager entry point (``sync_with_runtime``, ``reconfigure``) under the hook lock.

        Like the hook calls, a failure is logged and counted and never stops the relay; any
        container updates it returns are sent to the runtime right away.
        """
        with self.interceptor.lock:
            try:
                updates = function(*args)
            except Exception:
                log.exception("resource manager %s failed; continuing", entry)
                self.metrics.policy_error(entry, entry)
                return
            if updates:
                self.interceptor.apply_updates(updates, entry)

    def wait(self, timeout: float | None = None) -> bool:
        return self.stopping.wait(timeout)

    def _check_drift_periodically(self) -> None:
        """Catch what kubelet did on the runtime directly while it bypassed the relay (Interceptor.check_drift)."""
        while not self.stopping.wait(self.drift_check_period):
            try:
                self.interceptor.check_drift()
            except Exception as exc:  # the runtime restarting, say: the next period tries again
                log.warning("comparing with the runtime's containers failed: %s", exc)
                self.metrics.policy_error("resync", "drift-check")

    def _list_runtime(self) -> tuple[list, list]:
        """The runtime's pods and containers now (for a resync after kubelet bypassed the relay)."""
        snapshot = sync_from_runtime(self.runtime)
        return snapshot.pods, snapshot.containers

    def _send_update(self, request: bytes) -> object:
        return self.runtime.call(f"/{RUNTIME_SERVICE}/UpdateContainerResources", request, bytes, timeout=30)
