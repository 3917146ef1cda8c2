"""The NRI Plugin service that containerd calls: each event is handed to the resource manager's hook.

Events are written as the CRI calls they stand for (``translate``) and go through the declared contract:
``before`` then ``after`` (the runtime has decided already when NRI asks: the container id exists), and
the hook's request comes back as an adjustment, its updates for other containers as NRI updates.

containerd gives a plugin ``request_timeout`` (2 s by default) per event and drops a plugin that misses
it. A decision therefore gets half of it (``budget``): one that is not done by then is answered without
an adjustment, and when it finishes, its placement and updates go out through ``UpdateContainers``
(``send_late``), so a slow decision never gets the plugin disconnected.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import Message

from resmgr.nri import api_pb2 as nri
from resmgr.nri import translate
from resmgr.relay.cri import api_pb2 as cri
from resmgr.relay.hooks import ContainerUpdate, HookResult, ResourceManagerHook
from resmgr.relay.metrics import RelayMetrics

log = logging.getLogger(__name__)

PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
DEFAULT_REQUEST_TIMEOUT_S = 2.0  # containerd's default plugin request timeout

# The events the resource manager needs (NRI's Event numbers; mask bit = 1 << (event - 1)).
EVENTS = (nri.RUN_POD_SANDBOX, nri.STOP_POD_SANDBOX, nri.REMOVE_POD_SANDBOX, nri.CREATE_CONTAINER,
          nri.START_CONTAINER, nri.UPDATE_CONTAINER, nri.STOP_CONTAINER, nri.REMOVE_CONTAINER)
EVENT_MASK = sum(1 << (event - 1) for event in EVENTS)

# Sends updates through the runtime's UpdateContainers (late decisions).
LateSender = Callable[[list[ContainerUpdate], str], object]


class UnknownMethod(Exception):
    """containerd called a method this plugin does not serve (answered as Unimplemented)."""


@dataclass
class Handler:
    request_class: type[Message]
    serve: Callable[[Any], Message]


@dataclass
class _Sync:
    pods: list[nri.PodSandbox] = field(default_factory=list)
    containers: list[nri.Container] = field(default_factory=list)


class NriPlugin:
    """Answers containerd's Plugin calls with the hook's decisions, each well inside the request timeout."""

    def __init__(self, hook: ResourceManagerHook, metrics: RelayMetrics, send_late: LateSender,
                 observe: Callable[[str, float], None] | None = None) -> None:
        self.hook = hook
        self.metrics = metrics
        self.send_late = send_late
        self.observe = observe  # (method, seconds spent deciding) for each event
        self.budget = DEFAULT_REQUEST_TIMEOUT_S / 2
        self._sync = _Sync()
        self._sync_lock = threading.Lock()
        # Decisions run here, so that the serving thread can answer at the budget whatever happens.
        self._deciders = ThreadPoolExecutor(max_workers=4, thread_name_prefix="nri-decide")
        # containerd holds its NRI lock while it waits for an event's answer, and UpdateContainers takes the
        # same lock: updates no answer can carry are sent from here, in order, never from a serving thread.
        self._sender = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nri-send")
        self.configured = threading.Event()
        self.synchronized = threading.Event()
        self.handlers: dict[str, Handler] = {
            "Configure": Handler(nri.ConfigureRequest, self.configure),
            "Synchronize": Handler(nri.SynchronizeRequest, self.synchronize),
            "Shutdown": Handler(nri.Empty, lambda _r: nri.Empty()),
            "RunPodSandbox": Handler(nri.RunPodSandboxRequest, self.run_pod_sandbox),
            "StopPodSandbox": Handler(nri.StopPodSandboxRequest, self.stop_pod_sandbox),
            "RemovePodSandbox": Handler(nri.RemovePodSandboxRequest, self.remove_pod_sandbox),
            "CreateContainer": Handler(nri.CreateContainerRequest, self.create_container),
            "StartContainer": Handler(nri.StartContainerRequest, self.start_container),
            "UpdateContainer": Handler(nri.UpdateContainerRequest, self.update_container),
            "StopContainer": Handler(nri.StopContainerRequest, self.stop_container),
            "RemoveContainer": Handler(nri.RemoveContainerRequest, self.remove_container),
            "StateChange": Handler(nri.StateChangeEvent, lambda _r: nri.Empty()),
        }

    def connected(self) -> None:
        """A new connection to the runtime: its Synchronize starts over (parts of an earlier one are stale)."""
        with self._sync_lock:
            self._sync = _Sync()

    def close(self) -> None:
        self._deciders.shutdown(wait=False, cancel_futures=True)
        self._sender.shutdown(wait=False, cancel_futures=True)

    def serve(self, service: str, method: str, payload: bytes) -> bytes:
        """One call from containerd: the encoded answer; raises UnknownMethod, or DecodeError for a bad payload.

        Counted in the relay's request metrics as ``nri/<method>`` (one label for every method we do not serve).
        """
        start = time.perf_counter()
        handler = self.handlers.get(method) if service == PLUGIN_SERVICE else None
        label, code = f"nri/{method}" if handler is not None else "nri/unknown", "INTERNAL"
        try:
            if handler is None:
                code = "UNIMPLEMENTED"
                raise UnknownMethod(f"{service}/{method}")
            answer = handler.serve(handler.request_class.FromString(payload)).SerializeToString()
            code = "OK"
            return answer
        finally:
            self.metrics.observe(label, code, time.perf_counter() - start)

    # -- configuration and synchronisation ------------------------------------------------------------

    def configure(self, request: nri.ConfigureRequest) -> nri.ConfigureResponse:
        if request.request_timeout > 0:
            self.budget = request.request_timeout / 1000 / 2
        log.info("configured by the runtime", extra={"runtime": request.runtime_name,
                                                     "runtime_version": request.runtime_version,
                                                     "nri_version": request.NRI_version,
                                                     "decision_budget_s": self.budget})
        self.configured.set()
        return nri.ConfigureResponse(events=EVENT_MASK)

    def synchronize(self, request: nri.SynchronizeRequest) -> nri.SynchronizeResponse:
        """The runtime's pods and containers, possibly in parts (``more``): the manager syncs with them as
        with the runtime's listing after a restart, its cache giving back what it had decided."""
        with self._sync_lock:
            self._sync.pods += request.pods
            self._sync.containers += request.containers
            if request.more:
                return nri.SynchronizeResponse(more=True)
            sync, self._sync = self._sync, _Sync()
        pods, containers, resources = translate.synchronized(sync.pods, sync.containers)
        updates = self._decide("Synchronize", lambda: self.hook.sync_with_runtime(pods, containers, resources),
                               late=lambda u: self._late(u or [], "Synchronize"))
        self.synchronized.set()
        log.info("synchronized with the runtime", extra={"pods": len(pods), "containers": len(containers),
                                                         "updates": len(updates or [])})
        return nri.SynchronizeResponse(update=self._updates(updates))

    # -- pods -------------------------------------------------------------------------------------------

    def run_pod_sandbox(self, request: nri.RunPodSandboxRequest) -> nri.RunPodSandboxResponse:
        cri_request, cri_response = translate.run_pod(request.pod)
        self._before_after("RunPodSandbox", cri_request, cri_response)
        return nri.RunPodSandboxResponse()

    def stop_pod_sandbox(self, request: nri.StopPodSandboxRequest) -> nri.StopPodSandboxResponse:
        self._late(self._before_after("StopPodSandbox", cri.StopPodSandboxRequest(pod_sandbox_id=request.pod.id),
                                      cri.StopPodSandboxResponse()), "StopPodSandbox")
        return nri.StopPodSandboxResponse()

    def remove_pod_sandbox(self, request: nri.RemovePodSandboxRequest) -> nri.RemovePodSandboxResponse:
        self._late(self._before_after("RemovePodSandbox",
                                      cri.RemovePodSandboxRequest(pod_sandbox_id=request.pod.id),
                                      cri.RemovePodSandboxResponse()), "RemovePodSandbox")
        return nri.RemovePodSandboxResponse()

    # -- containers -------------------------------------------------------------------------------------

    def create_container(self, request: nri.CreateContainerRequest) -> nri.CreateContainerResponse:
        cri_request, cri_response = translate.create_container(request.pod, request.container)
        cid = request.container.id

        def decide() -> tuple[HookResult, list[ContainerUpdate]]:
            result = self.hook.before("CreateContainer", cri_request)
            extra = () if result.call is None else (result.call,)
            decided = result.request if isinstance(result.request, cri.CreateContainerRequest) else cri_request
            after = self.hook.after("CreateContainer", decided, cri_response, *extra)
            return result, list(after or [])

        def late(outcome: tuple[HookResult, list[ContainerUpdate]] | None) -> None:
            if outcome is None:
                return
            result, after = outcome
            own = _own_placement(cid, cri_request, result.request)
            self._late([*([own] if own else []), *result.updates, *after], "CreateContainer")

        outcome = self._decide("CreateContainer", decide, late)
        if outcome is None:
            return nri.CreateContainerResponse()
        result, after = outcome
        response = nri.CreateContainerResponse(update=self._updates([*result.updates, *after]))
        if isinstance(result.request, cri.CreateContainerRequest):
            response.adjust.CopyFrom(translate.adjustment(cri_request, result.request))
        return response

    def start_container(self, request: nri.StartContainerRequest) -> nri.StartContainerResponse:
        self._late(self._before_after("StartContainer", cri.StartContainerRequest(container_id=request.container.id),
                                      cri.StartContainerResponse()), "StartContainer")
        return nri.StartContainerResponse()

    def update_container(self, request: nri.UpdateContainerRequest) -> nri.UpdateContainerResponse:
        """kubelet resizes a container: the policy may re-place it (its own cpuset goes back as an update of it)."""
        cri_request = translate.update_resources(request.container, request.linux_resources)

        def decide() -> list[ContainerUpdate]:
            result = self.hook.before("UpdateContainerResources", cri_request)
            extra = () if result.call is None else (result.call,)
            decided = result.request if result.request is not None else cri_request
            after = self.hook.after("UpdateContainerResources", decided, cri.UpdateContainerResourcesResponse(),
                                    *extra)
            own = [result.placed] if result.placed is not None else []
            return [*own, *result.updates, *(after or [])]

        updates = self._decide("UpdateContainer", decide, lambda u: self._late(u or [], "UpdateContainer"))
        return nri.UpdateContainerResponse(update=self._updates(updates))

    def stop_container(self, request: nri.StopContainerRequest) -> nri.StopContainerResponse:
        updates = self._before_after("StopContainer", cri.StopContainerRequest(container_id=request.container.id),
                                     cri.StopContainerResponse())
        return nri.StopContainerResponse(update=self._updates(updates))

    def remove_container(self, request: nri.RemoveContainerRequest) -> nri.RemoveContainerResponse:
        # NRI's RemoveContainer answer carries no updates: what the removal frees goes out separately.
        self._late(self._before_after("RemoveContainer",
                                      cri.RemoveContainerRequest(container_id=request.container.id),
                                      cri.RemoveContainerResponse()), "RemoveContainer")
        return nri.RemoveContainerResponse()

    # -- the hook, within the budget --------------------------------------------------------------------

    def _before_after(self, method: str, request: Message, response: Message) -> list[ContainerUpdate] | None:
        """``before`` then ``after`` (NRI reports what the runtime does): the updates for other containers."""
        def decide() -> list[ContainerUpdate]:
            result = self.hook.before(method, request)
            extra = () if result.call is None else (result.call,)
            return [*result.updates, *(self.hook.after(method, request, response, *extra) or [])]
        return self._decide(method, decide, lambda u: self._late(u or [], method))

    def _decide(self, method: str, decide: Callable[[], Any], late: Callable[[Any], None]) -> Any:
        """``decide()``'s result if it is done within the budget; else None, and ``late`` gets it when it is."""
        start = time.perf_counter()
        future: Future[Any] = self._deciders.submit(decide)
        try:
            return future.result(timeout=self.budget)
        except FutureTimeout:
            log.warning("decision took longer than its budget; answering without it, its result follows by "
                        "UpdateContainers", extra={"method": method, "budget_s": self.budget})
            self.metrics.policy_error(method, "late")
            future.add_done_callback(lambda f: self._finish_late(method, f, late))
            return None
        except Exception:
            log.exception("resource-manager hook failed; the event passes unchanged", extra={"method": method})
            self.metrics.policy_error(method, "decide")
            return None
        finally:
            spent = time.perf_counter() - start
            log.debug("decided", extra={"method": method, "seconds": round(spent, 6)})
            if self.observe is not None:
                self.observe(method, spent)

    def _finish_late(self, method: str, future: Future[Any], late: Callable[[Any], None]) -> None:
        try:
            late(future.result())
        except Exception:
            log.exception("late decision failed", extra={"method": method})
            self.metrics.policy_error(method, "late")

    def _late(self, updates: list[ContainerUpdate] | None, reason: str) -> None:
        if not updates:
            return
        try:
            self._sender.submit(self._send, list(updates), reason)
        except RuntimeError:
            log.warning("plugin closing: %d container update(s) not sent", len(updates), extra={"reason": reason})

    def _send(self, updates: list[ContainerUpdate], reason: str) -> None:
        try:
            self.send_late(updates, reason)
        except Exception:
            log.exception("sending container updates failed", extra={"reason": reason})
            self.metrics.policy_error(reason, "updates")

    def _updates(self, updates: list[ContainerUpdate] | None) -> list[nri.ContainerUpdate]:
        return [translate.container_update(u) for u in updates or [] if isinstance(u, ContainerUpdate)
                and u.container_id]


def _own_placement(cid: str, original: cri.CreateContainerRequest, decided: Message | None) -> ContainerUpdate | None:
    """A create decided too late for the adjustment: its cpuset as an update of the created container."""
    if not isinstance(decided, cri.CreateContainerRequest):
        return None
    adjust = translate.adjustment(original, decided)
    cpu = adjust.linux.resources.cpu
    if not cpu.cpus and not cpu.mems:
        return None
    return ContainerUpdate(cid, cpu.cpus or None, cpu.mems or None, reason="placed after a late decision")
