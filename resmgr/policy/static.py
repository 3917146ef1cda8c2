"""The ``static`` policy: kubelet's static CPU manager semantics.

Guaranteed containers with an integer CPU request get that many exclusive CPUs,
taken by topology (the CPU allocator, preferring high-priority CPUs, as upstream).
Reserved CPUs (``ReservedResources``) are never handed out exclusively; they stay in
the shared pool, which every other container runs on and which shrinks and grows as
exclusive CPUs are taken and returned.
"""

from __future__ import annotations

from typing import Any

from resmgr.model.explanation import FRACTIONAL_CPU, NO_FREE_CPUS, NOT_GUARANTEED
from resmgr.model.resources import QOS_GUARANTEED, ContainerInfo
from resmgr.policy.base import Grant, Placement, Policy, RestoreError, log, resolve_cpu_resources
from resmgr.policy.cpu_allocator import AllocationError, Prefer, take_cpus
from resmgr.topology.cpuset import format_cpuset

SHARED = "shared"


class StaticPolicy(Policy):
    name = "static"
    description = "kubelet's static CPU manager: exclusive CPUs for integer Guaranteed containers."

    def setup(self) -> None:
        res = resolve_cpu_resources(self.policy_config, self.topology, sysfs_root=self.sysfs_root)
        self.available = res.available
        self.reserved = res.reserved
        self._exclusive: set[int] = set()
        self._update_shared()

    def _update_shared(self) -> None:
        self._shared = self.available - self._exclusive
        # One tuple object for all shared containers keeps placement diffs cheap.
        self._shared_placement: Placement = (self._shared, None)

    def decide(self, container: ContainerInfo) -> Grant:
        milli = container.request_milli
        if container.qos != QOS_GUARANTEED:
            why = NOT_GUARANTEED
        elif milli < 1000 or milli % 1000 or container.limit_milli not in (0, milli):
            why = FRACTIONAL_CPU
        else:
            free = self.available - self.reserved - self._exclusive
            try:
                # Upstream takes exclusive CPUs preferring high-priority ones.
                cpus = take_cpus(self.topology, free, milli // 1000, prefer=Prefer.HIGH)
            except AllocationError as exc:
                log.warning("static: %s/%s wants %d exclusive CPUs: %s; using the shared pool",
                            container.pod_name, container.name, milli // 1000, exc)
                why = NO_FREE_CPUS
            else:
                self._exclusive |= cpus
                self._update_shared()
                return Grant(pool=SHARED, kind="exclusive", exclusive=cpus)
        return Grant(pool=SHARED, kind="shared", shared_milli=milli, unpinned=why)

    def on_release(self, cid: str, grant: Grant) -> None:
        if grant.exclusive:
            self._exclusive -= grant.exclusive
            self._update_shared()

    def placement(self, cid: str) -> Placement:
        grant = self.grants.get(cid)
        if grant is not None and grant.exclusive:
            return (grant.exclusive, None)
        return self._shared_placement

    def group_of(self, cid: str) -> str | None:
        grant = self.grants.get(cid)
        return None if grant is not None and grant.exclusive else SHARED

    def group_state(self) -> dict[str, Any]:
        return {SHARED: self._shared_placement}

    def group_placement(self, key: str) -> Placement | None:
        return self._shared_placement if key == SHARED else None

    def pool_cpus(self) -> dict[str, frozenset[int]]:
        return {SHARED: frozenset(self._shared)}

    def restore_extra(self, data: dict[str, Any]) -> None:
        self._exclusive = set()
        for cid, g in self.grants.items():
            if g.exclusive - (self.available - self.reserved):
                raise RestoreError(f"cached exclusive CPUs {format_cpuset(g.exclusive)} of {cid} are "
                                   f"reserved or not available")
            self._exclusive |= g.exclusive
        self._update_shared()

    @property
    def shared_cpus(self) -> frozenset[int]:
        return frozenset(self._shared)
