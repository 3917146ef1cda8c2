"""Keeps Adjustments in force for containers that start after the Adjustment arrived."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from google.protobuf.message import Message

from resmgr.configplane.plane import ConfigPlane
from resmgr.manager.outbox import UpdateOutbox
from resmgr.relay.hooks import ContainerUpdate, HookResult, ResourceManagerHook


class AdjustingHook:
    """Wraps the resource manager's hook: after StartContainer and UpdateContainerResources the node's
    adjustments are applied again, so a new container in an adjustment's scope gets its override and a
    resized one keeps it (sent as ContainerUpdates by the applier). The rest of the contract is the
    wrapped hook's, passed through one method each. ``plane`` may be set after construction.

    The adjustments' updates are this call's: ``outbox`` (the one the applier sends through) holds them while
    the plane runs, and ``after`` returns them with the wrapped hook's, so nothing re-enters the relay from
    inside its own hook."""

    def __init__(self, inner: ResourceManagerHook, plane: ConfigPlane | None = None, *,
                 outbox: UpdateOutbox | None = None) -> None:
        self.inner = inner
        self.plane = plane
        self.outbox = outbox if outbox is not None else UpdateOutbox()

    def before(self, method: str, request: Message) -> HookResult:
        return self.inner.before(method, request)

    def after(self, method: str, request: Message, response: Message, *call: object) -> list[ContainerUpdate]:
        updates = self.inner.after(method, request, response, *call)  # call: before()'s reservation
        # A new container may be in scope; a kubelet resize re-places a container without its override.
        if method in ("StartContainer", "UpdateContainerResources") and self.plane is not None:
            with self.outbox.held() as adjusted:
                self.plane.refresh_adjustments()
            return [*updates, *adjusted]
        return updates

    def failed(self, method: str, request: Message, *call: object) -> list[ContainerUpdate]:
        return self.inner.failed(method, request, *call)

    def sync_with_runtime(self, pods: list[Any], containers: list[Any], resources: dict[str, Any] | None = None,
                          since: tuple[frozenset[str], frozenset[str]] | None = None) -> list[ContainerUpdate]:
        return self.inner.sync_with_runtime(pods, containers, resources, since=since)

    def reconfigure(self, config: dict[str, Any]) -> list[ContainerUpdate]:
        return self.inner.reconfigure(config)

    def keeps_containers(self) -> bool:
        return self.inner.keeps_containers()

    def containers_exited(self, container_ids: Collection[str]) -> list[ContainerUpdate]:
        return self.inner.containers_exited(container_ids)

    def runtime_drift(self, containers: list[Any]) -> frozenset[str]:
        return self.inner.runtime_drift(containers)

    def request_resync(self, reason: str) -> None:
        self.inner.request_resync(reason)

    def resync_wanted(self) -> bool:
        return self.inner.resync_wanted()

    def begin_resync(self) -> tuple[frozenset[str], frozenset[str]]:
        return self.inner.begin_resync()
