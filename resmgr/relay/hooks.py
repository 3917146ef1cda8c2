"""The contract between the CRI relay and the resource manager (policies).

The relay decodes the state-changing CRI calls and hands them to a
``ResourceManagerHook``. Calls run concurrently: the hook serializes its own
decisions, and no lock is held while the runtime works on a call.

1. ``before(method, request)`` runs before the call is forwarded. It may return
   a modified request, ask for updates to other containers, and hand back a
   ``call`` handle for what it reserved.
2. The (possibly modified) request is forwarded to the runtime.
3. ``after(method, request, response[, call])`` runs after the runtime answered with
   success: it confirms what ``before`` reserved (ids assigned by the runtime,
   released resources) and may ask for more updates to other containers.
   If the runtime failed the call instead, ``failed(method, request[, call])`` (optional)
   gives back what ``before`` reserved. ``call`` is passed only when ``before`` returned one.

Requested ``ContainerUpdate``s are sent to the runtime with
``UpdateContainerResources`` by the relay, through ``resmgr.relay.update_order``: a
container never ends up with an update older (lower ``seq``) than one it already got.
A hook that raises never fails the kubelet call: the relay logs, counts and forwards
the original bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from google.protobuf.message import Message

# Methods of runtime.v1.RuntimeService that pass through the resource manager.
INTERCEPTED_METHODS: tuple[str, ...] = (
    "RunPodSandbox",
    "StopPodSandbox",
    "RemovePodSandbox",
    "CreateContainer",
    "StartContainer",
    "StopContainer",
    "RemoveContainer",
    "UpdateContainerResources",
)


@dataclass
class ContainerUpdate:
    """Ask the relay to apply new Linux resources to an existing container."""

    container_id: str
    cpuset_cpus: str | None = None
    cpuset_mems: str | None = None
    reason: str = ""
    # The decision that produced it, numbered by the hook in decision order (0: unnumbered, sent as newest).
    seq: int = 0


@dataclass
class HookResult:
    """What a hook decided: an optional replacement request and side updates.

    ``call`` is the hook's handle for what it reserved; the relay passes it back to
    ``after``/``failed``. ``placed`` is the cpuset the forwarded request itself sets on an
    existing container (UpdateContainerResources), numbered like the updates, so that the
    relay orders it with them.
    """

    request: Message | None = None
    updates: list[ContainerUpdate] = field(default_factory=list)
    call: object | None = None
    placed: ContainerUpdate | None = None


class ResourceManagerHook(Protocol):
    """Implemented by the resource manager; called by the relay concurrently (the hook locks its own state).

    Entry points that are optional, called when the hook has them (the updates they return are sent):
    ``failed(method, request[, call])`` when the runtime failed a call, ``sync_with_runtime(pods,
    containers)`` at startup with the runtime's listing, ``reconfigure(config)`` with a re-read
    forced config, and ``containers_exited(ids)`` with the containers a ListContainers answer to
    kubelet listed as exited (resmgr.relay.exits; the same ids come again at every relist, so it
    must be cheap for ids it already released). A hook without ``containers_exited`` costs the
    relay nothing per ListContainers.
    """

    def before(self, method: str, request: Message) -> HookResult:
        """Before forwarding: maybe a replacement request, and updates for other containers."""
        ...

    def after(self, method: str, request: Message, response: Message) -> list[ContainerUpdate]:
        """After the runtime answered with success: record the outcome; updates for other containers."""
        ...


class NoopHook:
    """The 'none' policy: changes nothing and asks for nothing."""

    def before(self, method: str, request: Message) -> HookResult:
        return HookResult()

    def after(self, method: str, request: Message, response: Message) -> list[ContainerUpdate]:
        return []
