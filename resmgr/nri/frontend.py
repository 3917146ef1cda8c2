"""The NRI front end: connects to containerd's NRI socket, registers, serves, and connects again when the
connection ends (a containerd restart): containerd then synchronises the plugin, which brings the manager,
restored from its cache, in line with the containers that exist.

Updates that no event returns (cold starts ending, rebalancing, configs, Adjustments, late decisions) go
out through the runtime's ``UpdateContainers``, in decision order per container (``UpdateOrder``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable

from google.protobuf.message import DecodeError

from resmgr.nri import api_pb2 as nri
from resmgr.nri import translate, ttrpc
from resmgr.nri.connection import CallError, NriConnection
from resmgr.nri.plugin import RUNTIME_SERVICE, NriPlugin, UnknownMethod
from resmgr.options import DEFAULT_NRI_SOCKET
from resmgr.relay.hooks import ContainerUpdate, ResourceManagerHook
from resmgr.relay.metrics import RelayMetrics
from resmgr.relay.update_order import UpdateOrder

log = logging.getLogger(__name__)


REGISTER_TIMEOUT_S = 5.0
# The version of resmgr/nri/api.proto (told to the runtime when registering).
NRI_API_VERSION = "v0.12.3"


def _error_code(err: Exception) -> int:
    if isinstance(err, UnknownMethod):
        return ttrpc.CODE_UNIMPLEMENTED  # containerd then falls back to StateChange for that event
    if isinstance(err, DecodeError):
        return ttrpc.CODE_INVALID_ARGUMENT
    return ttrpc.CODE_INTERNAL


class NriFrontend:
    """Runs the plugin until ``stop``: connect, RegisterPlugin, serve; again with backoff when it ends."""

    def __init__(self, hook: ResourceManagerHook, metrics: RelayMetrics, socket_path: str = DEFAULT_NRI_SOCKET,
                 plugin_name: str = "cri-resmgr", plugin_index: str = "90",
                 observe: Callable[[str, float], None] | None = None) -> None:
        self.socket_path = socket_path
        self.plugin_name = plugin_name
        self.plugin_index = plugin_index
        self.metrics = metrics
        self.plugin = NriPlugin(hook, metrics, self.apply_updates, observe)
        self.order = UpdateOrder()
        self.stopping = threading.Event()
        self.registered = threading.Event()
        self._conn: NriConnection | None = None
        self._thread = threading.Thread(target=self._run, name="nri-frontend", daemon=True)

    def start(self) -> NriFrontend:
        self._thread.start()
        return self

    def stop(self, grace: float = 5.0) -> None:
        self.stopping.set()
        conn = self._conn
        if conn is not None:
            conn.close()
        self._thread.join(grace)
        self.plugin.close()

    def apply_updates(self, updates: Iterable[ContainerUpdate], reason: str) -> None:
        """Send updates to running containers through UpdateContainers; failures are logged and counted."""
        for update in updates:
            if not isinstance(update, ContainerUpdate) or not update.container_id:
                continue
            try:
                self.order.deliver(update, self._send_one)
            except CallError as err:
                log.error("container update failed", extra={"reason": reason, "container": update.container_id,
                                                            "error": str(err)})
                self.metrics.container_updates.labels("error").inc()
            else:
                self.metrics.container_updates.labels("ok").inc()

    def _send_one(self, update: ContainerUpdate) -> None:
        conn = self._conn
        if conn is None or conn.closed.is_set():
            raise CallError(ttrpc.CODE_UNAVAILABLE, "not connected to NRI (the next Synchronize re-places it)")
        request = nri.UpdateContainersRequest(update=[translate.container_update(update)])
        answer = conn.call(RUNTIME_SERVICE, "UpdateContainers", request, nri.UpdateContainersResponse)
        failed = [u.container_id for u in answer.failed]  # type: ignore[attr-defined]
        if failed:
            raise CallError(ttrpc.CODE_UNKNOWN, f"the runtime did not apply the update to {failed}")

    def _run(self) -> None:
        backoff = 0.1
        while not self.stopping.is_set():
            try:
                self._session()
                backoff = 0.1
            except (OSError, CallError) as err:
                log.warning("NRI: %s; retrying in %.1f s", err, backoff, extra={"socket": self.socket_path})
            self.registered.clear()
            if self.stopping.wait(backoff):
                break
            backoff = min(backoff * 2, 5.0)

    def _session(self) -> None:
        if not os.path.exists(self.socket_path):
            raise OSError(f"no NRI socket at {self.socket_path} (is NRI enabled in containerd?)")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(self.socket_path)
        self.plugin.connected()
        conn = self._conn = NriConnection(sock, self.plugin.serve, _error_code).start()
        try:
            conn.call(RUNTIME_SERVICE, "RegisterPlugin",
                      nri.RegisterPluginRequest(plugin_name=self.plugin_name, plugin_idx=self.plugin_index,
                                                NRI_version=NRI_API_VERSION),
                      nri.Empty, timeout=REGISTER_TIMEOUT_S)
            log.info("registered as an NRI plugin", extra={"socket": self.socket_path, "plugin": self.plugin_name,
                                                           "index": self.plugin_index})
            self.registered.set()
            while not conn.closed.wait(1.0) and not self.stopping.is_set():
                pass
        finally:
            conn.close()
