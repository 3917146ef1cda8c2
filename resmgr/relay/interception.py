"""Hands the state-changing CRI calls to the resource-manager hook, one at a time.

The rule that matters: the relay never fails a kubelet request on its own account. An
undecodable request, a hook that raises, or a request the hook returns that cannot be
encoded all mean the ORIGINAL bytes are forwarded unchanged, with an error log and a metric.
Only the runtime's own answer decides the outcome of the call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from google.protobuf.message import Message

from resmgr.relay.cri import api_pb2
from resmgr.relay.hooks import ContainerUpdate, HookResult, ResourceManagerHook
from resmgr.relay.methods import CriMethod
from resmgr.relay.metrics import RelayMetrics

log = logging.getLogger(__name__)

# Sends an encoded UpdateContainerResourcesRequest to the runtime; raises on failure.
UpdateSender = Callable[[bytes], object]


class Interceptor:
    """Runs ``before`` / forward / ``after`` for intercepted methods under one lock."""

    def __init__(self, hook: ResourceManagerHook, metrics: RelayMetrics, send_update: UpdateSender) -> None:
        self.hook = hook
        self.metrics = metrics
        self.send_update = send_update
        # One state-changing request at a time through the resource manager, like cri-resource-manager.
        self.lock = threading.Lock()

    def handle(self, method: CriMethod, raw_request: bytes, forward: Callable[[bytes], bytes]) -> bytes:
        """Decode, consult the hook, forward, report the outcome; return the runtime's raw response.

        ``forward`` sends bytes to the runtime and raises on a runtime error, which propagates.
        """
        name = method.name
        with self.lock:
            request = self._decode(method.request_class, raw_request, name, "request")
            if request is None:
                return forward(raw_request)
            outgoing = raw_request
            result = self._call_hook(name, "before", self.hook.before, name, request)
            if isinstance(result, HookResult):
                if result.request is not None and result.request is not request:
                    encoded = self._encode(result.request, method, name)
                    if encoded is not None:
                        outgoing, request = encoded, result.request
                elif result.request is request:
                    # The hook edited the decoded request in place.
                    encoded = self._encode(request, method, name)
                    if encoded is not None:
                        outgoing = encoded
                self.apply_updates(result.updates, name)
            elif result is not None:
                log.error("hook returned %r instead of a HookResult; forwarding unchanged",
                          type(result).__name__, extra={"method": name})
                self.metrics.policy_error(name, "before")
            raw_response = forward(outgoing)
            response = self._decode(method.response_class, raw_response, name, "response")
            if response is not None:
                updates = self._call_hook(name, "after", self.hook.after, name, request, response)
                if updates:
                    self.apply_updates(updates, name)
            return raw_response

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
            linux = api_pb2.LinuxContainerResources(cpuset_cpus=update.cpuset_cpus or "",
                                                    cpuset_mems=update.cpuset_mems or "")
            request = api_pb2.UpdateContainerResourcesRequest(container_id=update.container_id, linux=linux)
            try:
                self.send_update(request.SerializeToString())
            except Exception as err:
                log.error("container update failed",
                          extra={"method": reason_method, "container": update.container_id,
                                 "cpuset_cpus": update.cpuset_cpus, "cpuset_mems": update.cpuset_mems,
                                 "reason": update.reason, "error": _error_text(err)})
                self.metrics.container_updates.labels("error").inc()
                self.metrics.relay_error("UpdateContainerResources", "policy_update")
            else:
                log.info("updated container resources",
                         extra={"method": reason_method, "container": update.container_id,
                                "cpuset_cpus": update.cpuset_cpus, "cpuset_mems": update.cpuset_mems,
                                "reason": update.reason})
                self.metrics.container_updates.labels("ok").inc()


def _error_text(err: Exception) -> str:
    if hasattr(err, "code") and hasattr(err, "details"):
        try:
            return f"{err.code().name}: {err.details()}"
        except Exception:
            pass
    return str(err)
