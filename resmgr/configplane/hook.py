"""Keeps Adjustments in force for containers that start after the Adjustment arrived."""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message

from resmgr.configplane.plane import ConfigPlane
from resmgr.relay.hooks import ContainerUpdate, HookResult, ResourceManagerHook


class AdjustingHook:
    """Wraps the resource manager's hook: after StartContainer and UpdateContainerResources the node's
    adjustments are applied again, so a new container in an adjustment's scope gets its override and a
    resized one keeps it (sent as ContainerUpdates by the applier). Everything else is the wrapped
    hook's. ``plane`` may be set after construction."""

    def __init__(self, inner: ResourceManagerHook, plane: ConfigPlane | None = None) -> None:
        self.inner = inner
        self.plane = plane

    def before(self, method: str, request: Message) -> HookResult:
        return self.inner.before(method, request)

    def after(self, method: str, request: Message, response: Message, *call: object) -> list[ContainerUpdate]:
        updates = self.inner.after(method, request, response, *call)  # call: before()'s reservation
        # A new container may be in scope; a kubelet resize re-places a container without its override.
        if method in ("StartContainer", "UpdateContainerResources") and self.plane is not None:
            self.plane.refresh_adjustments()
        return updates

    def __getattr__(self, name: str) -> Any:  # sync, placements, ...: the resource manager's own
        return getattr(self.inner, name)
