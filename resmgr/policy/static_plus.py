"""The ``static-plus`` policy: upstream's static policy with isolated CPUs and mixed allocations.

Every container that asks for at least one whole CPU gets that many exclusive CPUs,
whatever its QoS class: from the kernel-isolated CPUs (``isolcpus``) when enough are
left and the pod did not opt out with ``prefer-isolated-cpus``, else carved out of
the shared pool. The fraction of its request runs on the shared pool too
(exclusive ∪ shared). kube-system containers run on the reserved CPUs. When the
shared pool is used up by exclusive grants, or its containers ask for more than it
has, they run on the shared and the reserved CPUs (upstream's "out of free shared
capacity" fallback).

Differences from upstream, on purpose: upstream re-pins every non-isolated
container to the shared pool whenever it changes, kube-system and exclusive-only
ones included (so their exclusivity lasts until the next change), and picks which
containers overflow into the reserved CPUs by Go map order. Here exclusive-only
containers keep their CPUs, kube-system stays on the reserved CPUs, and overflow is
decided for the shared pool as a whole, so the same containers always get the same
cpusets.
"""

from __future__ import annotations

from typing import Any

from resmgr.config import ConfigError, parse_cpu_constraint
from resmgr.model.resources import ContainerInfo, preference_flag
from resmgr.policy.base import Grant, Placement, RestoreError, is_reserved_namespace, log, resolve_cpu_resources
from resmgr.policy.cpu_allocator import AllocationError, Prefer, take_cpus
from resmgr.policy.static import SHARED, StaticPolicy
from resmgr.topology.cpuset import format_cpuset

PREFER_ISOLATED_KEY = "prefer-isolated-cpus.cri-resource-manager.intel.com"
RESERVED = "reserved"
ISOLATED = "isolated"
EXCLUSIVE = "exclusive"
# Containers with exclusive CPUs plus a fraction: each one's cpuset follows the shared pool.
MIXED = "shared+exclusive"


class StaticPlusPolicy(StaticPolicy):
    name = "static-plus"
    description = "static with isolated CPUs: exclusive CPUs for whole-CPU requests, the fraction shared."

    def setup(self) -> None:
        resv_text = self.policy_config.reserved.get("cpu")
        if resv_text is None:
            raise ConfigError("policy.ReservedResources.cpu", "static-plus cannot run without reserved CPUs "
                                                              "(set a CPU count or cpuset)")
        res = resolve_cpu_resources(self.policy_config, self.topology, sysfs_root=self.sysfs_root)
        # Upstream takes isolated CPUs out of the available set before reserving.
        self.isolated_cpus = frozenset(self.topology.isolated & res.available)
        plain = res.available - self.isolated_cpus
        if not plain:
            raise ConfigError("policy.AvailableResources.cpu", "every available CPU is isolated; static-plus "
                                                               "needs non-isolated CPUs for the reserved pool")
        if parse_cpu_constraint(str(resv_text)).kind == "quantity":
            count = -(-res.reserved_milli // 1000)
            if count < 2 and 0 in plain:
                reserved = frozenset({0})  # upstream's choice for a single reserved CPU
            else:
                try:
                    reserved = take_cpus(self.topology, plain, count)
                except AllocationError as exc:
                    raise ConfigError("policy.ReservedResources.cpu", str(exc)) from None
        else:
            reserved = res.reserved
        if reserved & self.isolated_cpus:
            raise ConfigError("policy.ReservedResources.cpu",
                              f"reserved CPUs {format_cpuset(reserved & self.isolated_cpus)} are isolated")
        self.available = res.available  # the bounding set, isolated CPUs included
        self._plain = plain
        self.reserved = reserved
        self._reserved_placement: Placement = (self.reserved, None)
        self._exclusive: set[int] = set()
        self._isolated_taken: set[int] = set()
        self._demand = 0
        self._update_shared()

    # -- pools -------------------------------------------------------------------------------------
    def _update_shared(self) -> None:
        self._shared = self._plain - self.reserved - self._exclusive
        self._overflow = not self._shared or self._demand > 1000 * len(self._shared)
        cpus = self._shared | self.reserved if self._overflow else self._shared
        self._shared_placement = (frozenset(cpus), None)

    def _set_demand(self, delta: int) -> None:
        before = self._overflow
        self._demand += delta
        if (not self._shared or self._demand > 1000 * len(self._shared)) != before:
            if not before:
                log.warning("static-plus: shared pool %s is out of capacity (%d mCPU asked); "
                            "its containers use the reserved CPUs %s too", format_cpuset(self._shared),
                            self._demand, format_cpuset(self.reserved))
            self._update_shared()

    # -- decisions ---------------------------------------------------------------------------------
    def decide(self, container: ContainerInfo) -> Grant:
        milli = container.request_milli
        if is_reserved_namespace(container, []):
            return Grant(pool=RESERVED, kind="reserved", shared_milli=milli)
        full, part = divmod(milli, 1000)
        grant: Grant | None = None
        if full:
            grant = self._take_exclusive(container, full, part)
        if grant is None:
            grant = Grant(pool=SHARED, kind="shared", shared_milli=milli if full else part)
        if grant.shared_milli:
            self._set_demand(grant.shared_milli)
        return grant

    def _take_exclusive(self, container: ContainerInfo, full: int, part: int) -> Grant | None:
        free_isolated = self.isolated_cpus - self._isolated_taken
        if len(free_isolated) >= full and preference_flag(container, PREFER_ISOLATED_KEY) is not False:
            cpus = take_cpus(self.topology, free_isolated, full, prefer=Prefer.HIGH)  # as static, upstream
            self._isolated_taken |= cpus
            return Grant(pool=ISOLATED, kind="isolated", exclusive=cpus, shared_milli=part)
        if len(self._shared) >= full:
            cpus = take_cpus(self.topology, self._shared, full, prefer=Prefer.HIGH)
            self._exclusive |= cpus
            self._update_shared()
            return Grant(pool=EXCLUSIVE, kind="exclusive", exclusive=cpus, shared_milli=part)
        log.warning("static-plus: %s/%s wants %d exclusive CPUs, only %d shared and %d isolated are free; "
                    "using the shared pool", container.pod_name, container.name, full, len(self._shared),
                    len(free_isolated))
        return None

    def on_release(self, cid: str, grant: Grant) -> None:
        if grant.kind == "reserved":
            return
        if grant.kind == "isolated":
            self._isolated_taken -= grant.exclusive
        elif grant.exclusive:
            self._exclusive -= grant.exclusive
            self._update_shared()
        if grant.shared_milli:
            self._set_demand(-grant.shared_milli)

    # -- placements --------------------------------------------------------------------------------
    def placement(self, cid: str) -> Placement:
        grant = self.grants.get(cid)
        if grant is None or not grant.exclusive:
            return self._reserved_placement if grant is not None and grant.kind == "reserved" \
                else self._shared_placement
        if grant.shared_milli:
            return (grant.exclusive | self._shared_placement[0], None)
        return (grant.exclusive, None)

    def group_of(self, cid: str) -> str | None:
        grant = self.grants.get(cid)
        if grant is None or not grant.exclusive:
            return None if grant is not None and grant.kind == "reserved" else SHARED
        return MIXED if grant.shared_milli else None

    def group_state(self) -> dict[str, Any]:
        return {SHARED: self._shared_placement, MIXED: self._shared_placement}

    def pool_cpus(self) -> dict[str, frozenset[int]]:
        return {SHARED: self._shared_placement[0], RESERVED: self.reserved, ISOLATED: self.isolated_cpus,
                EXCLUSIVE: frozenset(self._exclusive)}

    # -- cache -------------------------------------------------------------------------------------
    def restore_extra(self, data: dict[str, Any]) -> None:
        self._exclusive, self._isolated_taken, self._demand = set(), set(), 0
        for cid, g in self.grants.items():
            if g.kind == "isolated":
                if g.exclusive - self.isolated_cpus:
                    raise RestoreError(f"cached isolated CPUs {format_cpuset(g.exclusive)} of {cid} are not "
                                       f"isolated and available ({format_cpuset(self.isolated_cpus)})")
                self._isolated_taken |= g.exclusive
            elif g.exclusive:
                if g.exclusive - (self._plain - self.reserved):
                    raise RestoreError(f"cached exclusive CPUs {format_cpuset(g.exclusive)} of {cid} are "
                                       f"reserved, isolated or not available")
                self._exclusive |= g.exclusive
            if g.kind != "reserved":
                self._demand += g.shared_milli
        self._update_shared()
