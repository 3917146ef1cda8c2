"""Controllers and timers beside the policy: cold-start timers, usage rebalancing, and the RDT, block I/O and CPU
classes of containers (resmgr.control)."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from resmgr.manager.placement_diff import diff_groups, fmt_cpus
from resmgr.manager.state import (
    ManagerState,
    confirmed,
)
from resmgr.relay.hooks import ContainerUpdate

log = logging.getLogger("resmgr.resource-manager")


class ControllersTimers(ManagerState):
    """Cold-start timers, rebalancing by CPU usage, container classes."""

    def _arm_timers(self) -> None:
        """The outbox is bound: cold starts' updates can go out, so their timers arm."""
        with self._lock:
            self._sync_timers()

    def _follow_policy(self) -> None:
        """After every decision: cold-start timers and CPU classes follow what the policy holds now."""
        self._sync_timers()
        self._sync_cpu_classes()

    def _sync_timers(self) -> None:
        if not self.outbox.bound:
            return
        self._cold_timers.sync({cid: due for cid, due in self.policy.cold_starts().items() if confirmed(cid)})

    def finish_cold_start(self, cid: str) -> list[ContainerUpdate]:
        """End a container's cold start: the update that widens its memory to its types (none if not cold)."""
        with self._lock:
            if not confirmed(cid) or not self.policy.finish_cold_start(cid):
                return []
            self._mutations += 1
            self.save()
            cpus, mems = self.policy.placement(cid)
            log.info("cold start of %s done: memory nodes %s", cid, fmt_cpus(mems))
            return self._decided([ContainerUpdate(cid, fmt_cpus(cpus), fmt_cpus(mems), reason="cold start done")])

    def _cold_start_due(self, cid: str) -> None:
        self.outbox(self.finish_cold_start(cid), "ColdStartDone")

    def rebalance(self, usage: Mapping[str, int]) -> list[ContainerUpdate]:
        """Hand measured CPU usage (container id -> milli-CPU) to the policy; updates for whom it moved."""
        with self._lock:
            old = self.policy.group_state()
            self.policy.rebalance(dict(usage))
            new = self.policy.group_state()
            if all(old.get(key) == state for key, state in new.items()):
                return []
            self._mutations += 1
            self.save()
            return self._decided(diff_groups(self.policy, old, reason="pools resized by CPU usage"))

    def _apply_container_classes(self, cid: str) -> dict[str, str]:
        """Put a started container into its RDT and block I/O classes (never raises: logged and counted)."""
        container = self.containers.get(cid)
        if container is None:
            return {}
        return self.controllers.container_started(container, self.pods.get(container.pod_id),
                                                  self.class_overrides.get(cid))

    def _sync_cpu_classes(self) -> None:
        if self.controllers.running["cpu"] and self.controllers.cpu.active:  # no classes: nothing to follow
            self.controllers.sync_cpu_classes(self.policy.cpu_classes())

    def set_class_overrides(self, overrides: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
        """Adjustments' ``classes`` (container id -> {rdt, blockio}); containers whose classes changed are
        re-assigned now. Returns what was applied per container."""
        with self._lock:
            wanted = {cid: dict(c) for cid, c in overrides.items() if c}
            changed = {cid for cid in set(wanted) | set(self.class_overrides)
                       if wanted.get(cid) != self.class_overrides.get(cid)}
            self.class_overrides = wanted
            return {cid: self._apply_container_classes(cid) for cid in sorted(changed) if cid in self.containers}
