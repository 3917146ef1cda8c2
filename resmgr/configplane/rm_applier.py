"""A ConfigApplier over ``resmgr.manager.resource_manager.ResourceManager``.

Configs go through ``ResourceManager.set_config`` (which persists the applied config
in the cache under the relay dir, and refuses a policy switch at runtime) or, for the
forced file, ``reload_forced_config``. Adjustments re-size the selected containers and
let the policy re-decide their placement. Every resulting cpuset change goes out as a
``ContainerUpdate`` through ``send_updates``: the relay's UpdateContainerResources path.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from resmgr.config import ConfigError
from resmgr.configplane.adjustments import ContainerOverride, ContainerView, container_view
from resmgr.manager.resources import qos_from_resources
from resmgr.relay.hooks import ContainerUpdate

log = logging.getLogger("resmgr.configplane")

UpdateSender = Callable[[list[ContainerUpdate], str], None]
ConfigListener = Callable[[dict[str, Any], str], None]

class ResourceManagerApplier:
    """Applies configs and adjustments to a ResourceManager.

    ``send_updates(updates, reason)`` sends ContainerUpdates to the runtime (the relay's
    ``interceptor.apply_updates``). ``on_applied(config, source)`` lets the relay apply its
    own sections (dump, logger, instrumentation) once the resource manager accepted a config.
    """

    def __init__(self, rm: Any, send_updates: UpdateSender, on_applied: ConfigListener | None = None) -> None:
        self.rm = rm
        self.send_updates = send_updates
        self.on_applied = on_applied
        # container id -> the override in effect. The resource manager's own ContainerInfo keeps the
        # container's real resources (and is what is cached); only the policy sees the adjusted ones.
        self._active: dict[str, ContainerOverride] = {}

    def apply_config(self, config: dict[str, Any], source: str, *, forced: bool = False) -> str | None:
        try:
            updates = self.rm.reload_forced_config(source) if forced else self.rm.set_config(config, source=source)
        except ConfigError as exc:
            return str(exc)
        self.send_updates(updates, "SetConfig")
        if self.on_applied is not None:
            self.on_applied(config, source)
        return None

    def list_containers(self) -> list[ContainerView]:
        with self.rm._lock:  # the resource manager's own lock: its maps change under CRI calls
            return [container_view(c, self.rm.pods.get(c.pod_id)) for cid, c in self.rm.containers.items()
                    if cid and not cid.startswith("pending:") and cid in self.rm.policy.containers]

    def _set_active(self, cid: str, override: ContainerOverride | None) -> None:
        if override is None:
            self._active.pop(cid, None)
        else:
            self._active[cid] = override

    def apply_adjustments(self, overrides: dict[str, ContainerOverride]) -> dict[str, str]:
        from resmgr.manager.placement_diff import diff_placements

        errors: dict[str, str] = {}
        with self.rm._lock:
            policy = self.rm.policy
            old = policy.placements()
            changed = False
            for cid in sorted(set(overrides) | set(self._active)):
                container = self.rm.containers.get(cid)
                override = overrides.get(cid)
                if container is None or cid not in policy.containers:
                    self._active.pop(cid, None)
                    if override is not None:
                        errors[cid] = "container is not running"
                    continue
                target = container if override is None else adjusted(container, override)
                if _same_resources(policy.containers[cid], target):
                    # Already placed that way; also notices when something else (a kubelet resize)
                    # re-placed the container without the override, so it is put back.
                    self._set_active(cid, override)
                    continue
                try:
                    policy.release(cid)
                    policy.allocate(cid, target)
                except Exception as exc:  # the policy could not place it: put the container back as it was
                    log.error("adjustment of %s failed: %s", cid, exc)
                    errors[cid] = f"the {policy.name} policy could not apply it: {exc}"
                    policy.release(cid)
                    policy.allocate(cid, container)
                    self._active.pop(cid, None)
                    continue
                self._set_active(cid, override)
                changed = True
            if changed:
                self.rm.save()
            updates = diff_placements(old, policy.placements(), reason="adjustment")
        self.send_updates(updates, "SetAdjustment")
        return errors


def _same_resources(a: Any, b: Any) -> bool:
    return all(getattr(a, f) == getattr(b, f) for f in ("request_milli", "limit_milli", "memory_limit", "qos"))


def adjusted(container: Any, override: ContainerOverride) -> Any:
    """The container as the policy should see it under ``override`` (unset fields keep its own values)."""
    request = container.request_milli if override.request_milli is None else override.request_milli
    limit = container.limit_milli if override.limit_milli is None else override.limit_milli
    memory = container.memory_limit if override.memory_limit is None else override.memory_limit
    return replace(container, request_milli=request, limit_milli=limit, memory_limit=memory,
                   qos=qos_from_resources(request, limit, memory))
