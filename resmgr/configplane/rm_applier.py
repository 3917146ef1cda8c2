"""A ConfigApplier over ``resmgr.manager.resource_manager.ResourceManager``.

Configs go through ``ResourceManager.set_config`` (which persists the applied config
in the cache under the relay dir, and refuses a policy switch at runtime) or, for the
forced file re-read on SIGHUP, ``reconfigure``. Adjustments re-size the selected containers
through ``ResourceManager.re_place``, which lets the policy re-decide their placement under the
resource manager's own lock. Every resulting cpuset change goes out as a ``ContainerUpdate``
through ``send_updates``: the relay's UpdateContainerResources path. Their ``classes`` (rdt,
blockio) go to ``ResourceManager.set_class_overrides``, which re-assigns the containers' classes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from resmgr.config import ConfigError, ConfigSections
from resmgr.configplane.adjustments import ContainerOverride, ContainerView, container_view
from resmgr.control.toptier import OVERRIDE_KEY as TOPTIER_OVERRIDE
from resmgr.manager.resource_manager import Resize, ResourceManager
from resmgr.model.explanation import Explanation
from resmgr.model.placement_change import DryRun
from resmgr.model.resources import ContainerInfo, qos_from_resources
from resmgr.relay.hooks import ContainerUpdate

log = logging.getLogger("resmgr.configplane")

UpdateSender = Callable[[list[ContainerUpdate], str], None]
ConfigListener = Callable[[ConfigSections, str], None]


class ResourceManagerApplier:
    """Applies configs and adjustments to a ResourceManager.

    ``send_updates(updates, reason)`` sends ContainerUpdates to the runtime (the relay's
    ``interceptor.apply_updates``). ``on_applied(config, source)`` lets the relay apply its
    own sections (dump, logger, instrumentation) once the resource manager accepted a config.
    """

    def __init__(self, rm: ResourceManager, send_updates: UpdateSender,
                 on_applied: ConfigListener | None = None) -> None:
        self.rm = rm
        self.send_updates = send_updates
        self.on_applied = on_applied
        # container id -> the override in effect. The resource manager's own ContainerInfo keeps the
        # container's real resources (and is what is cached); only the policy sees the adjusted ones.
        self._active: dict[str, ContainerOverride] = {}

    def apply_config(self, config: ConfigSections, source: str, *, forced: bool = False) -> str | None:
        # The resource manager keeps (caches, compares) the normalised mapping; the relay takes the sections.
        raw = config.raw
        try:
            updates = self.rm.reconfigure(raw, source) if forced else self.rm.set_config(raw, source=source)
        except ConfigError as exc:
            return str(exc)
        self.send_updates(updates, "SetConfig")
        if self.on_applied is not None:
            self.on_applied(config, source)
        return None

    def dry_run(self, config: ConfigSections, source: str) -> DryRun:
        return self.rm.dry_run(config.raw, source=source)

    def list_containers(self) -> list[ContainerView]:
        return [container_view(c, pod) for c, pod in self.rm.running()]

    def placements(self) -> tuple[str, list[Explanation]]:
        return self.rm.policy.name, self.rm.explanations()

    def apply_adjustments(self, overrides: dict[str, ContainerOverride]) -> dict[str, str]:
        # Containers that lost their override get their own resources back (None).
        resize: dict[str, Resize | None] = {cid: None for cid in self._active}
        resize.update({cid: partial(adjusted, override=override) for cid, override in overrides.items()})
        result = self.rm.re_place(resize, reason="adjustment")
        errors = {cid: "container is not running" for cid in result.missing if cid in overrides}
        errors.update(result.errors)
        for cid in resize:
            override = overrides.get(cid)
            if override is None or cid in result.missing or cid in result.errors:
                self._active.pop(cid, None)
            else:
                self._active[cid] = override
        self.send_updates(result.updates, "SetAdjustment")
        # classes.rdt / classes.blockio / toptierLimit: the controllers move the containers (resmgr.control)
        applied = self.rm.set_class_overrides({cid: class_overrides(o) for cid, o in overrides.items()
                                               if class_overrides(o) and cid not in result.missing})
        for cid, got in applied.items():  # an Adjustment's status names a class that did not take
            wrong = [f"{kind} class {cls!r} not applied ({got.get(kind, 'controller off or failed')})"
                     for kind, cls in overrides[cid].classes.items() if got.get(kind) != cls]
            if wrong and cid not in errors:
                errors[cid] = "; ".join(wrong)
        return errors


def class_overrides(override: ContainerOverride) -> dict[str, str]:
    """What an Adjustment sets beside resources: its classes, and its toptierLimit in bytes."""
    if override.toptier_limit is None:
        return dict(override.classes)
    return {**override.classes, TOPTIER_OVERRIDE: str(override.toptier_limit)}


def adjusted(container: ContainerInfo, override: ContainerOverride) -> ContainerInfo:
    """The container as the policy should see it under ``override`` (unset fields keep its own values)."""
    request = container.request_milli if override.request_milli is None else override.request_milli
    limit = container.limit_milli if override.limit_milli is None else override.limit_milli
    memory = container.memory_limit if override.memory_limit is None else override.memory_limit
    return replace(container, request_milli=request, limit_milli=limit, memory_limit=memory,
                   qos=qos_from_resources(request, limit, memory))
