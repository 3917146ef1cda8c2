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
   If the runtime failed the call instead, ``failed(method, request[, call])``
   gives back what ``before`` reserved. ``call`` is passed only when ``before`` returned one.

Requested ``ContainerUpdate``s are sent to the runtime with
``UpdateContainerResources`` by the relay, through ``resmgr.relay.update_order``: a
container never ends up with an update older (lower ``seq``) than one it already got.
A hook that raises never fails the kubelet call: the relay logs, counts and forwards
the original bytes.

The NRI front end (``resmgr.nri``) drives the same contract: containerd tells it about a call the runtime
is carrying out, so it writes the event as the CRI request kubelet sent and calls ``before`` and then at
once ``after`` (with the id the runtime already assigned); the returned request becomes NRI's adjustment,
the updates NRI container updates. Synchronize, on every connection, is ``sync_with_runtime``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

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


@runtime_checkable
class ResourceManagerHook(Protocol):
    """Everything a front end (the CRI relay, the NRI plugin) may call on the resource manager; nothing else.

    Called concurrently: the hook locks its own state. Every method returns the updates for other
    containers that the front end then sends. A hook without some ability implements it as a no-op
    (``NoopHook``), so a front end calls each method directly, never probing for it.
    """

    def before(self, method: str, request: Message) -> HookResult:
        """Before forwarding: maybe a replacement request, updates for other containers, a reservation."""
        ...

    def after(self, method: str, request: Message, response: Message, call: object = None) -> list[ContainerUpdate]:
        """The runtime succeeded: confirm ``before``'s reservation ``call`` (passed only when there is one)."""
        ...

    def failed(self, method: str, request: Message, call: object = None) -> list[ContainerUpdate]:
        """The runtime failed the call, or its answer is unreadable: give back what ``before`` reserved."""
        ...

    def sync_with_runtime(self, pods: list[Any], containers: list[Any], resources: dict[str, Any] | None = None,
                          since: tuple[frozenset[str], frozenset[str]] | None = None) -> list[ContainerUpdate]:
        """Reconcile with the runtime's listing (at startup; in a resync ``since`` is ``begin_resync``'s)."""
        ...

    def reconfigure(self, config: dict[str, Any]) -> list[ContainerUpdate]:
        """Apply a re-read forced config (SIGHUP)."""
        ...

    def keeps_containers(self) -> bool:
        """Whether the hook tracks containers: only then does the front end report exits and drift (costs a read)."""
        ...

    def containers_exited(self, container_ids: Collection[str]) -> list[ContainerUpdate]:
        """The runtime listed these as exited (again at every relist): release what they still hold, cheaply."""
        ...

    def runtime_drift(self, containers: list[Any]) -> frozenset[str]:
        """Ids where the runtime's container list and the hook's knowledge disagree now."""
        ...

    def request_resync(self, reason: str) -> None:
        """Ask for a resync with the runtime at the next chance."""
        ...

    def resync_wanted(self) -> bool:
        """Whether a resync was asked for (by ``request_resync`` or by a call about an unknown container)."""
        ...

    def begin_resync(self) -> tuple[frozenset[str], frozenset[str]]:
        """Before listing the runtime for a resync: the pod and container ids known now; clears the request."""
        ...


class NoopHook:
    """The 'none' policy and relay-only mode: changes nothing, tracks nothing, asks for nothing."""

    def before(self, method: str, request: Message) -> HookResult:
        return HookResult()

    def after(self, method: str, request: Message, response: Message, call: object = None) -> list[ContainerUpdate]:
        return []

    def failed(self, method: str, request: Message, call: object = None) -> list[ContainerUpdate]:
        return []

    def sync_with_runtime(self, pods: list[Any], containers: list[Any], resources: dict[str, Any] | None = None,
                          since: tuple[frozenset[str], frozenset[str]] | None = None) -> list[ContainerUpdate]:
        return []

    def reconfigure(self, config: dict[str, Any]) -> list[ContainerUpdate]:
        return []

    def keeps_containers(self) -> bool:
        return False

    def containers_exited(self, container_ids: Collection[str]) -> list[ContainerUpdate]:
        return []

    def runtime_drift(self, containers: list[Any]) -> frozenset[str]:
        return frozenset()

    def request_resync(self, reason: str) -> None:
        pass

    def resync_wanted(self) -> bool:
        return False

    def begin_resync(self) -> tuple[frozenset[str], frozenset[str]]:
        return frozenset(), frozenset()
