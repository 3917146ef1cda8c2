"""The contract between the CRI relay and the resource manager (policies).

The relay decodes the state-changing CRI calls and hands them to a
``ResourceManagerHook`` one at a time, under a single lock:

1. ``before(method, request)`` runs before the call is forwarded. It may return
   a modified request and ask for updates to other containers.
2. The (possibly modified) request is forwarded to the runtime.
3. ``after(method, request, response)`` runs after the runtime answered with
   success. It records the outcome (ids assigned by the runtime, released
   resources) and may ask for more updates to other containers.

Requested ``ContainerUpdate``s are sent to the runtime with
``UpdateContainerResources`` by the relay. A hook that raises never fails the
kubelet call: the relay logs, counts and forwards the original bytes.
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


@dataclass
class HookResult:
    """What a hook decided: an optional replacement request and side updates."""

    request: Message | None = None
    updates: list[ContainerUpdate] = field(default_factory=list)


class ResourceManagerHook(Protocol):
    """Implemented by the resource manager; called by the relay under its lock.

    Two entry points are optional, called when the hook has them (the updates they return are sent):
    ``sync_with_runtime(pods, containers)`` once at startup with the runtime's listing, and
    ``reconfigure(config)`` with a re-read forced config.
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
