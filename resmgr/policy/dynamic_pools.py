"""The ``dynamic-pools`` policy: pools that resize with their containers' requests and CPU usage.

There is one pool per ``DynamicPoolTypes`` entry, plus the built-in ``shared`` and ``reserved``
pools. A container's pool comes from the dynamic-pool annotation, else ``reserved`` for kube-system
and ``ReservedPoolNamespaces``, else the first type (reserved, shared, then the configured ones)
whose ``Namespaces`` match, else ``shared``; containers without CPU request and limit always go to
``shared`` unless they are in a reserved namespace. Pools own disjoint CPUs; the reserved pool is
the reserved CPUs and never changes. Every other CPU belongs to one pool: each pool first gets
its containers' requests rounded up to whole CPUs, and the CPUs left over are divided in
proportion to the pools' measured CPU usage (upstream's rule, ``pool_sizes``). Without usage all
left-over CPUs go to ``shared``. Sizes are recomputed whenever a container comes or goes and
whenever fresh usage is handed in (``rebalance``): the relay samples the containers' cgroup CPU
time every ``--rebalance-interval`` (resmgr.manager.cpu_usage). A pool left without CPUs
(requests exceed the node) runs its containers on the reserved CPUs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from resmgr.config import ConfigError
from resmgr.model.resources import ContainerInfo, preference_annotation
from resmgr.policy.base import (
    Grant,
    Placement,
    PlacementMemo,
    PooledPolicy,
    RestoreError,
    is_reserved_namespace,
    log,
    namespace_matches,
    resolve_cpu_resources,
)
from resmgr.policy.cpu_allocator import release_cpus, take_cpus
from resmgr.topology.cpuset import format_cpuset, parse_cpuset

DYNAMIC_POOL_KEY = "dynamic-pool.dynamic-pools.cri-resource-manager.intel.com"
RESERVED = "reserved"
SHARED = "shared"


@dataclass
class PoolType:
    name: str
    namespaces: list[str] = field(default_factory=list)
    priority: int = 3  # upstream's default for the built-in pools (AllocatorPriority "none")
    cpu_class: str = ""  # CPU class of the pool's CPUs (resmgr.control.cpu_classes)


@dataclass
class DynamicPool:
    name: str
    cpus: frozenset[int] = frozenset()
    members: dict[str, int] = field(default_factory=dict)  # container id -> requested milli-CPU
    requested: int = 0  # sum of the members' requests, kept as they come and go
    usage: int = 0  # sum of the members' measured milli-CPU

    def add(self, cid: str, milli: int) -> None:
        self.members[cid] = milli
        self.requested += milli

    def remove(self, cid: str, used: int) -> bool:
        milli = self.members.pop(cid, None)
        if milli is None:
            return False
        self.requested -= milli
        self.usage -= used
        return True


def pool_sizes(free: int, requested: Mapping[str, int], usage: Mapping[str, float],
               populated: set[str]) -> dict[str, int]:
    """Whole CPUs per pool out of ``free`` (the CPUs outside the reserved pool), by upstream's rule.

    Each pool gets its requests (milli-CPU) rounded up. What is left is divided in proportion to the
    populated pools' ``usage``, rounded down; the rest of it goes to the busiest pool (``shared``
    when no pool is busier, or no usage is known). A populated ``shared`` pool gets at least one
    CPU. When requests exceed ``free`` (upstream fails the allocation), each populated pool gets
    one CPU while they last and the rest follows the requests, largest remainders first."""
    sizes = {name: -(-milli // 1000) for name, milli in requested.items()}
    remain = free - sum(sizes.values())
    if remain < 0:
        return _squeeze(free, sizes, populated)
    weights = {name: max(0.0, float(usage.get(name, 0.0))) if name in populated else 0.0 for name in sizes}
    total = sum(weights.values())
    if remain >= 1 and total > 0 and SHARED in populated and SHARED in sizes \
            and sizes[SHARED] + int(remain * weights[SHARED] / total) < 1:
        sizes[SHARED] = 1
        remain -= 1
    used = 0
    if total > 0:
        for name in sizes:
            add = int(remain * weights[name] / total)
            sizes[name] += add
            used += add
    if used < remain:
        busiest = SHARED if SHARED in sizes else min(sizes)
        for name in sorted(sizes):
            if weights[name] > weights[busiest]:
                busiest = name
        sizes[busiest] += remain - used
    return sizes


def _squeeze(free: int, wanted: dict[str, int], populated: set[str]) -> dict[str, int]:
    sizes = dict.fromkeys(wanted, 0)
    for name in sorted(populated & set(wanted)):
        if free and wanted[name]:
            sizes[name] = 1
            free -= 1
    rest = {name: wanted[name] - sizes[name] for name in wanted}
    total = sum(rest.values())
    if free and total:
        shares = {name: free * n / total for name, n in rest.items()}
        for name, share in shares.items():
            sizes[name] += math.floor(share)
        left = free - sum(math.floor(s) for s in shares.values())
        for name in sorted(shares, key=lambda n: (-(shares[n] - math.floor(shares[n])), n))[:left]:
            sizes[name] += 1
    return sizes


class DynamicPoolsPolicy(PooledPolicy):
    name = "dynamic-pools"
    description = "Pools sized by their containers' requests and measured CPU usage."
    wants_usage = True

    def setup(self) -> None:
        section = self.policy_config.dynamic_pools
        res = resolve_cpu_resources(self.policy_config, self.topology, sysfs_root=self.sysfs_root)
        self.available, self.reserved = res.available, res.reserved
        self._outside_reserved = self.available - self.reserved
        if not self.reserved:
            raise ConfigError("policy.ReservedResources.cpu",
                              "dynamic-pools needs at least one reserved CPU (the reserved pool)")
        self.pin_cpu, self.pin_memory = section.pin_cpu, section.pin_memory
        self.reserved_namespaces = list(section.reserved_pool_namespaces)
        self.types: dict[str, PoolType] = {RESERVED: PoolType(RESERVED), SHARED: PoolType(SHARED)}
        for index, t in enumerate(section.pool_types):
            name = t["Name"]
            if name in self.types and name not in (RESERVED, SHARED):
                raise ConfigError(f"policy.dynamic-pools.DynamicPoolTypes[{index}].Name",
                                  f"duplicate dynamic pool type {name!r}")
            self.types[name] = PoolType(name, list(t.get("Namespaces", [])), t.get("AllocatorPriority", 3),
                                        t.get("CPUClass", ""))
        self.pools = {name: DynamicPool(name) for name in self.types if name != RESERVED}
        self.usage: dict[str, int] = {}  # container id -> measured milli-CPU
        self._placement_memo = PlacementMemo(self.topology, self.pin_cpu, self.pin_memory)
        self._resize_all()

    # -- sizing ------------------------------------------------------------------------------------
    def _resize_all(self) -> None:
        requested = {name: p.requested for name, p in self.pools.items()}
        usage = {name: p.usage for name, p in self.pools.items()}
        populated = {name for name, p in self.pools.items() if p.members}
        sizes = pool_sizes(len(self._outside_reserved), requested, usage, populated)
        if all(len(p.cpus) == sizes[name] for name, p in self.pools.items()):
            return
        free = set(self._outside_reserved - frozenset().union(*(p.cpus for p in self.pools.values())))
        # Shrink first, then grow next to what each pool keeps: CPUs move only as far as sizes change.
        for name, pool in self.pools.items():
            extra = len(pool.cpus) - sizes[name]
            if extra > 0:
                given = release_cpus(self.topology, pool.cpus, extra)
                pool.cpus -= given
                free |= given
        order = sorted(self.pools.values(), key=lambda p: (self.types[p.name].priority, p.name))
        for pool in order:
            missing = sizes[pool.name] - len(pool.cpus)
            if missing > 0:
                taken = take_cpus(self.topology, free, min(missing, len(free)), near=pool.cpus)
                pool.cpus |= taken
                free -= taken
        log.info("dynamic-pools: pools resized: %s", ", ".join(
            f"{name}={format_cpuset(p.cpus) or '-'}" for name, p in self.pools.items()))

    def rebalance(self, usage: dict[str, int]) -> None:
        """Take fresh usage (container id -> milli-CPU over the last interval) and resize the pools."""
        self.usage = {cid: max(0, int(milli)) for cid, milli in usage.items() if cid in self.grants}
        for pool in self.pools.values():
            pool.usage = sum(self.usage.get(cid, 0) for cid in pool.members)
        self._resize_all()

    # -- decisions -----------------------------------------------------------------------------------
    def _pool_for(self, c: ContainerInfo) -> str:
        reserved_ns = is_reserved_namespace(c, self.reserved_namespaces)
        if not reserved_ns and not c.request_milli and not c.limit_milli:
            return SHARED
        wanted = preference_annotation(c, DYNAMIC_POOL_KEY)
        if wanted:
            if wanted in self.types:
                return wanted
            log.warning("dynamic-pools: %s/%s asks for unknown dynamic pool %r; using %s",
                        c.pod_name, c.name, wanted, SHARED)
            return SHARED
        if reserved_ns:
            return RESERVED
        for t in self.types.values():
            if namespace_matches(c.namespace, t.namespaces):
                return t.name
        return SHARED

    def decide(self, c: ContainerInfo) -> Grant:
        pool = self._pool_for(c)
        return Grant(pool=pool, kind="reserved" if pool == RESERVED else "shared", shared_milli=c.request_milli)

    def allocate(self, cid: str, container: ContainerInfo) -> None:
        super().allocate(cid, container)
        pool = self.pools.get(self.grants[cid].pool)
        if pool is not None:
            pool.add(cid, container.request_milli)
            self._resize_all()

    def on_release(self, cid: str, grant: Grant) -> None:
        used = self.usage.pop(cid, 0)
        pool = self.pools.get(grant.pool)
        if pool is not None and pool.remove(cid, used):
            self._resize_all()

    def on_rename(self, old: str, new: str) -> None:
        for pool in self.pools.values():
            if old in pool.members:
                pool.members[new] = pool.members.pop(old)
        if old in self.usage:
            self.usage[new] = self.usage.pop(old)

    # -- placement -------------------------------------------------------------------------------------
    def group_placement(self, key: str) -> Placement:
        pool = self.pools.get(key)
        cpus = pool.cpus if pool is not None and pool.cpus else self.reserved
        return self._placement_memo(cpus)  # one placement tuple per cpuset: cheap diffs

    def group_state(self) -> dict[str, Any]:
        return {**{name: p.cpus for name, p in self.pools.items()}, RESERVED: self.reserved}

    def exclusive_sets(self) -> dict[str, frozenset[int]]:
        return {name: p.cpus for name, p in self.pools.items() if p.cpus}

    def cpu_classes(self) -> dict[str, frozenset[int]]:
        """Upstream's rule: each pool's CPUs are in its type's CPUClass (the reserved pool's too)."""
        classes: dict[str, frozenset[int]] = {}
        for name, cpus in self.pool_cpus().items():
            cls = self.types[name].cpu_class
            if cls and cpus:
                classes[cls] = classes.get(cls, frozenset()) | cpus
        return classes

    def pool_cpus(self) -> dict[str, frozenset[int]]:
        return {RESERVED: self.reserved, **{name: p.cpus for name, p in self.pools.items()}}

    # -- cache -------------------------------------------------------------------------------------------
    def export_extra(self) -> dict[str, Any]:
        return {"dynamic_pools": [{"name": p.name, "cpus": format_cpuset(p.cpus), "members": dict(p.members)}
                                  for p in self.pools.values()]}

    def restore_extra(self, data: dict[str, Any]) -> None:
        pools = {name: DynamicPool(name) for name in self.pools}
        free = set(self._outside_reserved)
        dropped = False
        try:
            for item in data.get("dynamic_pools", []):
                name = str(item["name"])
                if name not in pools:
                    raise RestoreError(f"cached dynamic pool {name!r} is not configured")
                cpus = parse_cpuset(str(item["cpus"]))
                if cpus - free:
                    raise RestoreError(f"cached dynamic pool {name} CPUs {format_cpuset(cpus)} overlap reserved, "
                                       f"unavailable or other pools' CPUs")
                free -= cpus
                members = {str(cid): int(milli) for cid, milli in item.get("members", {}).items()}
                pools[name].cpus = cpus
                for cid, milli in members.items():
                    if cid in self.grants:
                        pools[name].add(cid, milli)
                dropped = dropped or len(members) != len(pools[name].members)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RestoreError(f"malformed cached dynamic pools: {exc}") from None
        for cid, g in self.grants.items():
            if g.pool != RESERVED and cid not in pools.get(g.pool, DynamicPool("")).members:
                raise RestoreError(f"cached grant of {cid} names dynamic pool {g.pool} which does not hold it")
        self.pools = pools
        self.usage = {}
        if dropped or free:  # containers gone while we were down, or a config with more CPUs
            self._resize_all()
