"""Hands the state-changing CRI calls to the resource-manager hook, concurrently.

The rule that matters: the relay never fails a kubelet request on its own account. An
undecodable request, a hook that raises, or a request the hook returns that cannot be
encoded all mean the ORIGINAL bytes are forwarded unchanged, with an error log and a metric.
Only the runtime's own answer decides the outcome of the call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from google.protobuf.message import Message

from resmgr.relay.cri import api_pb2
from resmgr.relay.hooks import ContainerUpdate, HookResult, ResourceManagerHook
from resmgr.relay.methods import CriMethod
from resmgr.relay.metrics import RelayMetrics
from resmgr.relay.update_order import UpdateOrder

log = logging.getLogger(__name__)

# Sends an encoded UpdateContainerResourcesRequest to the runtime; raises on failure.
UpdateSender = Callable[[bytes], object]
# Lists the runtime's pods and containers (CRI PodSandbox and Container messages).
RuntimeLister = Callable[[], tuple[list[Any], list[Any]]]


class Interceptor:
    """Runs ``before`` / forward / ``after`` (or ``failed``) for intercepted methods, concurrently.

    No lock is held across the runtime call: the hook serializes its own decisions, and
    container updates go out through ``UpdateOrder``, so that the newest decision's cpuset is
    the one a container keeps. A call's own updates are sent before its request is forwarded
    (room is made before a container is created on it) and before its answer is returned.
    """

    def __init__(self, hook: ResourceManagerHook, metrics: RelayMetrics, send_update: UpdateSender,
                 list_runtime: RuntimeLister | None = None,
                 container_resources: Callable[[list[str]], dict[str, Any]] | None = None,
                 settle_exits: Callable[[], None] | None = None) -> None:
        self.hook = hook
        # Exits already handed over from ListContainers answers are released before a create is decided.
        self.settle_exits = settle_exits
        self.list_runtime = list_runtime
        self.container_resources = container_resources
        self._resyncing = threading.Lock()
        self._last_drift: frozenset[str] = frozenset()
        self.metrics = metrics
        self.send_update = send_update
        self.order = UpdateOrder()
        # Held only by the relay's own entry points (startup sync, SIGHUP reconfigure), never by calls.
        self.lock = threading.Lock()

    def handle(self, method: CriMethod, raw_request: bytes, forward: Callable[[bytes], bytes]) -> bytes:
        """Decode, consult the hook, forward, report the outcome; return the runtime's raw response.

        ``forward`` sends bytes to the runtime and raises on a runtime error, which propagates
        (after the hook's ``failed`` gave back what ``before`` reserved).
        """
        name = method.name
        request = self._decode(method.request_class, raw_request, name, "request")
        if request is None:
            return forward(raw_request)
        outgoing = raw_request
        call: object = None
        placed: ContainerUpdate | None = None
        if name == "CreateContainer" and self.settle_exits is not None:
            self._call_hook(name, "exits", self.settle_exits)
        result = self._call_hook(name, "before", self.hook.before, name, request)
        if isinstance(result, HookResult):
            if result.request is not None and result.request is not request:
                encoded = self._encode(result.request, method, name)
                if encoded is not None:
                    outgoing, request = encoded, result.request
                    placed = result.placed
            elif result.request is request:
                # The hook edited the decoded request in place.
                encoded = self._encode(request, method, name)
                if encoded is not None:
                    outgoing = encoded
            call = result.call
            self.apply_updates(result.updates, name)
        elif result is not None:
            log.error("hook returned %r instead of a HookResult; forwarding unchanged",
                      type(result).__name__, extra={"method": name})
            self.metrics.policy_error(name, "before")
        try:
            if isinstance(placed, ContainerUpdate) and placed.container_id:
                raw_response = self.order.forward(placed, lambda: forward(outgoing), self._send)
            elif name == "StartContainer" and request.container_id:  # type: ignore[attr-defined]
                raw_response = self.order.exclusive(request.container_id,  # type: ignore[attr-defined]
                                                    lambda: forward(outgoing))
            else:
                raw_response = forward(outgoing)
        except BaseException:
            self._failed(name, request, call)
            raise
        response = self._decode(method.response_class, raw_response, name, "response")
        if response is None:
            self._failed(name, request, call)  # what the runtime made is unknown: give the reservation back
            return raw_response
        extra = () if call is None else (call,)
        updates = self._call_hook(name, "after", self.hook.after, name, request, response, *extra)
        if updates:
            self.apply_updates(updates, name)
        self._resync_if_wanted()
        return raw_response

    def check_drift(self) -> None:
        """Compare the runtime's containers with the hook's; resync when they disagree twice in a row.

        Kubelet may have run against the runtime directly (the installer's fallback, a guard at boot)
        without a single call about an unknown container coming through afterwards (say, only removals).
        A create or remove in flight disagrees for one look at most, so only a lasting difference counts.
        """
        if self.list_runtime is None or not self.hook.keeps_containers():
            return
        _, containers = self.list_runtime()
        drift = self.hook.runtime_drift(containers)
        lasting, self._last_drift = drift & self._last_drift, drift
        if lasting:
            self.hook.request_resync(
                f"{len(lasting)} container(s) differ from the runtime's list, e.g. {sorted(lasting)[0][:13]}")
            self._resync_if_wanted()

    def _resync_if_wanted(self) -> None:
        """The hook saw calls about things it never knew (kubelet bypassed the relay): sync with the runtime."""
        if self.list_runtime is None or not self.hook.resync_wanted():
            return
        if not self._resyncing.acquire(blocking=False):
            return  # one resync at a time; the one running covers this call
        try:
            since = self.hook.begin_resync()
            pods, containers = self.list_runtime()
            # A container made without the relay and not started yet is left for a later look: containerd
            # keeps an update sent before the start in its spec only, never in the cgroup (seen in tests).
            containers = [c for c in containers if c.state != api_pb2.CONTAINER_CREATED or c.id in since[1]]
            # What kubelet asked for the containers made without the relay: a Guaranteed one gets its CPUs.
            new_ids = [c.id for c in containers if c.state != api_pb2.CONTAINER_EXITED and c.id not in since[1]]
            resources = self.container_resources(new_ids) if self.container_resources and new_ids else None
            updates = self.hook.sync_with_runtime(pods, containers, resources, since=since)
            self.apply_updates(updates, "resync")
        except Exception:
            log.exception("resync with the runtime failed; the next unknown container tries again")
            self.metrics.policy_error("resync", "resync")
        finally:
            self._resyncing.release()

    def _failed(self, name: str, request: object, call: object) -> None:
        extra = () if call is None else (call,)
        updates = self._call_hook(name, "failed", self.hook.failed, name, request, *extra)
        if updates:
            self.apply_updates(updates, name)

    def _decode(self, message_class: type[Message], raw: bytes, name: str, what: str) -> Message | None:
        try:
            return message_class.FromString(raw)
        except Exception as err:  # DecodeError, but also anything odd from the C++ parser
            log.error("cannot decode %s; passing it through unchanged", what,
                      extra={"method": name, "error": str(err), "bytes": len(raw)})
            self.metrics.relay_error(name, f"undecodable_{what}")
            return None

    def _encode(self, message: Message, method: CriMethod, name: str) -> bytes | None:
        try:
            if not isinstance(message, method.request_class):
                raise TypeError(f"expected {method.request_class.__name__}, got {type(message).__name__}")
            return message.SerializeToString()
        except Exception as err:
            log.error("hook returned a request that cannot be sent; forwarding the original",
                      extra={"method": name, "error": str(err)})
            self.metrics.policy_error(name, "encode")
            return None

    def _call_hook(self, name: str, phase: str, function: Callable[..., object], *args: object) -> object:
        try:
            return function(*args)
        except Exception:
            log.exception("resource-manager hook failed; the request passes through unchanged",
                          extra={"method": name, "phase": phase})
            self.metrics.policy_error(name, phase)
            return None

    def apply_updates(self, updates: Iterable[ContainerUpdate] | object, reason_method: str) -> None:
        """Send the hook's container updates; failures are logged and counted, never raised."""
        if not updates:
            return
        try:
            items = list(updates)  # type: ignore[call-overload]
        except TypeError:
            log.error("hook returned non-iterable updates", extra={"method": reason_method})
            self.metrics.policy_error(reason_method, "updates")
            return
        for update in items:
            if not isinstance(update, ContainerUpdate) or not update.container_id:
                log.error("ignoring malformed container update %r", update, extra={"method": reason_method})
                self.metrics.policy_error(reason_method, "updates")
                continue
            try:
                sent = self.order.deliver(update, self._send)
            except Exception as err:
                log.error("container update failed",
                          extra={"method": reason_method, "container": update.container_id,
                                 "cpuset_cpus": update.cpuset_cpus, "cpuset_mems": update.cpuset_mems,
                                 "reason": update.reason, "error": _error_text(err)})
                self.metrics.container_updates.labels("error").inc()
                self.metrics.relay_error("UpdateContainerResources", "policy_update")
            else:
                if not sent:
                    log.debug("container update superseded by a newer decision",
                              extra={"method": reason_method, "container": update.container_id,
                                     "seq": update.seq})
                    continue
                log.info("updated container resources",
                         extra={"method": reason_method, "container": update.container_id,
                                "cpuset_cpus": update.cpuset_cpus, "cpuset_mems": update.cpuset_mems,
                                "reason": update.reason})
                self.metrics.container_updates.labels("ok").inc()

    def _send(self, update: ContainerUpdate) -> object:
        linux = api_pb2.LinuxContainerResources(cpuset_cpus=update.cpuset_cpus or "",
                                                cpuset_mems=update.cpuset_mems or "")
        request = api_pb2.UpdateContainerResourcesRequest(container_id=update.container_id, linux=linux)
        return self.send_update(request.SerializeToString())


def _error_text(err: Exception) -> str:
    if hasattr(err, "code") and hasattr(err, "details"):
        try:
            return f"{err.code().name}: {err.details()}"
        except Exception:
            pass
    return str(err)
