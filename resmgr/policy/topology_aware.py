"""The ``topology-aware`` policy: a pool tree over sockets, dies and NUMA nodes.

Each pool owns the available CPUs under its part of the tree. A container goes
to the deepest (smallest) pool that fits it, the one with the most free shared
capacity among equals, which spreads load across NUMA nodes. Guaranteed
containers of one CPU or more get whole CPUs exclusively (kernel-isolated ones
when preferred), plus the pool's shared CPUs for a fraction, by upstream's
rules in ``_preferences``; everything else shares. Exclusive CPUs are sliced
off only while every pool on the way up keeps a shared CPU, so a container that
fits nowhere still has shared CPUs to run on. ``kube-system`` and
``ReservedPoolNamespaces`` run on the reserved CPUs. ``PinMemory`` pins memory
to the pool's NUMA nodes. Preferences can be overridden per pod or container
with cri-resource-manager's annotations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from resmgr.manager.resources import (
    QOS_BESTEFFORT,
    QOS_GUARANTEED,
    ContainerInfo,
    annotated_bool,
    preference_flag,
)
from resmgr.policy.affinity import AffinityScorer, container_affinities, pool_scores
from resmgr.policy.base import (
    Grant,
    Placement,
    Policy,
    RestoreError,
    is_reserved_namespace,
    log,
    resolve_cpu_resources,
)
from resmgr.policy.cpu_allocator import AllocationError, take_cpus
from resmgr.policy.memory_tiers import PoolMemory
from resmgr.policy.topology_hints import container_hints, pool_hint_scores
from resmgr.topology.cpuset import format_cpuset

RESERVED = "reserved"
PREFER_ISOLATED_KEY = "prefer-isolated-cpus.cri-resource-manager.intel.com"
PREFER_SHARED_KEY = "prefer-shared-cpus.cri-resource-manager.intel.com"
PREFER_RESERVED_KEY = "prefer-reserved-cpus.cri-resource-manager.intel.com"

DEFAULTS = {"PinCPU": True, "PinMemory": True, "PreferIsolatedCPUs": True, "PreferSharedCPUs": False,
            "ReservedPoolNamespaces": ["kube-system"], "ColocatePods": False, "ColocateNamespaces": False}


@dataclass
class Pool:
    name: str
    cpus: frozenset[int]
    mems: frozenset[int]
    depth: int
    parent: Pool | None = None
    children: list[Pool] = field(default_factory=list)
    subtree: list[Pool] = field(default_factory=list)  # self and all descendants
    ancestors: list[Pool] = field(default_factory=list)


class TopologyAwarePolicy(Policy):
    name = "topology-aware"
    description = "Pool tree of sockets, dies and NUMA nodes; exclusive, isolated and shared CPUs."

    def setup(self) -> None:
        opts = dict(DEFAULTS)
        opts.update(self.config.get("policy", {}).get("topology-aware", {}))
        self.opts = opts
        res = resolve_cpu_resources(self.config, self.topology, sysfs_root=self.sysfs_root)
        self.available, self.reserved = res.available, res.reserved
        self.isolated = (self.topology.isolated & self.available) - self.reserved
        self.pools: dict[str, Pool] = {}
        self._build_tree()
        self._affinity = AffinityScorer()
        self.memory = PoolMemory(self.topology, self.pools)  # memory tiers: pool mems become DRAM+PMEM
        self._taken: set[int] = set()
        self._direct: dict[str, int] = {name: 0 for name in self.pools}
        self._users: dict[str, int] = {name: 0 for name in self.pools}
        self._recompute_shared()

    # -- pool tree ------------------------------------------------------------------
    def _add(self, name: str, cpus: frozenset[int], parent: Pool | None) -> Pool | None:
        cpus = cpus & self.available
        if not cpus:
            return None
        if parent is not None and cpus == parent.cpus:
            return parent  # a single child adds nothing: collapse the level
        pool = Pool(name=name, cpus=cpus, mems=self.topology.nodes_of(cpus),
                    depth=0 if parent is None else parent.depth + 1, parent=parent)
        if parent is not None:
            parent.children.append(pool)
        self.pools[name] = pool
        return pool

    def _build_tree(self) -> None:
        topo = self.topology
        root = self._add("root", topo.online, None)
        assert root is not None
        for pkg, pkg_cpus in topo.packages.items():
            socket = self._add(f"socket #{pkg}", pkg_cpus, root)
            if socket is None:
                continue
            for (dpkg, die), die_cpus in topo.dies.items():
                if dpkg != pkg:
                    continue
                die_pool = self._add(f"die #{pkg}.{die}", die_cpus, socket)
                if die_pool is None:
                    continue
                for node, node_cpus in topo.nodes.items():
                    if node_cpus & die_cpus:
                        self._add(f"NUMA node #{node}", node_cpus & die_cpus, die_pool)
        for pool in self.pools.values():
            pool.subtree = [p for p in self.pools.values() if self._is_under(p, pool)]
            a, pool.ancestors = pool.parent, []
            while a is not None:
                pool.ancestors.append(a)
                a = a.parent
        self._by_depth = sorted(self.pools.values(), key=lambda p: (-p.depth, p.name))

    @staticmethod
    def _is_under(p: Pool, ancestor: Pool) -> bool:
        while p is not None:
            if p is ancestor:
                return True
            p = p.parent
        return False

    def _recompute_shared(self) -> None:
        base = self.available - self.reserved - self.isolated
        self._shared = {name: (pool.cpus & base) - self._taken for name, pool in self.pools.items()}
        # One placement tuple per pool, shared by all its shared containers (cheap diffs).
        self._pool_placement = {name: self._pin(self._shared[name], pool.mems) for name, pool in self.pools.items()}
        self._reserved_placement = self._pin(self.reserved, self.topology.nodes_of(self.reserved))

    def _pin(self, cpus: frozenset[int], mems: frozenset[int]) -> Placement:
        return (cpus if self.opts["PinCPU"] else None, mems if self.opts["PinMemory"] else None)

    # -- accounting -------------------------------------------------------------------
    def _used(self, pool: Pool) -> int:
        used = sum(self._direct[q.name] for q in pool.subtree)
        for a in pool.ancestors:
            if self._direct[a.name]:
                used += self._direct[a.name] * len(pool.cpus) // len(a.cpus)
        return used

    def _shared_users(self, pool: Pool) -> int:
        return sum(self._users[q.name] for q in pool.subtree)

    def _free_shared(self, pool: Pool) -> int:
        return len(self._shared[pool.name]) * 1000 - self._used(pool)

    def _free_isolated(self, pool: Pool) -> frozenset[int]:
        return (pool.cpus & self.isolated) - self._taken

    # -- decisions -----------------------------------------------------------------------
    def _preferences(self, c: ContainerInfo) -> tuple[int, int, bool]:
        """(whole exclusive CPUs, shared milli-CPU, prefer isolated) for a container, by upstream's rules:
        only Guaranteed containers of at least one CPU get exclusive CPUs. With 1 <= request < 2 CPUs,
        ``PreferSharedCPUs`` (config or annotation) makes a fractional request shared, but an integer
        one only when annotated; ``PreferIsolatedCPUs`` applies from config or annotation. With two
        or more CPUs a fractional request is shared unless annotated not to be, an integer one is
        exclusive unless annotated shared, and isolated CPUs are used only when annotated."""
        if c.qos == QOS_BESTEFFORT:
            return 0, 0, False
        shared = (0, c.request_milli, False)
        if c.qos != QOS_GUARANTEED:
            return shared
        full, frac = divmod(c.request_milli, 1000)
        shared_note = preference_flag(c, PREFER_SHARED_KEY)
        isolated_note = preference_flag(c, PREFER_ISOLATED_KEY)
        if full == 0:
            return shared
        if full == 1:
            prefer_isolated = self.opts["PreferIsolatedCPUs"] if isolated_note is None else isolated_note
            prefer_shared = self.opts["PreferSharedCPUs"] if shared_note is None else shared_note
            if (prefer_shared if frac else shared_note is True):
                return shared
            return full, frac, bool(prefer_isolated)
        if (shared_note is not False) if frac else (shared_note is True):
            return shared
        return full, frac, isolated_note is True

    def _exclusive_fits(self, pool: Pool, cpus: frozenset[int], frac: int) -> bool:
        """May ``cpus`` be sliced off ``pool`` for a container that also wants ``frac`` shared milli-CPU?

        As upstream: the pool and each ancestor keep free shared capacity after the slice, enough for
        ``frac`` and never zero, so shared containers (and the fallback to the root pool) always
        have a CPU that nobody owns. A descendant that loses CPUs must still hold its own users."""
        for q in [pool, *pool.ancestors]:
            free = len(self._shared[q.name] - cpus) * 1000 - self._used(q)
            if free < max(frac, 1):
                return False
        for q in pool.subtree:
            if q is pool or not q.cpus & cpus:
                continue
            remaining = len(self._shared[q.name] - cpus)
            if remaining * 1000 < self._used(q) or (self._shared_users(q) and not remaining):
                return False
        return True

    def _try_pool(self, pool: Pool, full: int, frac: int, isolate: bool) -> Grant | None:
        if full:
            free_iso = self._free_isolated(pool)
            if isolate and len(free_iso) >= full and self._free_shared(pool) >= frac:
                cpus = take_cpus(self.topology, free_iso, full)
                return Grant(pool=pool.name, kind="isolated", exclusive=cpus, shared_milli=frac)
            sharable = self._shared[pool.name]
            if len(sharable) < full:
                return None
            try:
                cpus = take_cpus(self.topology, sharable, full)
            except AllocationError:
                return None
            if not self._exclusive_fits(pool, cpus, frac):
                return None
            return Grant(pool=pool.name, kind="exclusive", exclusive=cpus, shared_milli=frac)
        if not self._shared[pool.name] or self._free_shared(pool) < frac:
            return None
        return Grant(pool=pool.name, kind="shared", shared_milli=frac)

    def decide(self, c: ContainerInfo) -> Grant:
        reserved_note = annotated_bool(c, PREFER_RESERVED_KEY)  # None: not annotated
        if reserved_note or (reserved_note is None and is_reserved_namespace(c, self.opts["ReservedPoolNamespaces"])):
            if self.reserved:
                return Grant(pool=RESERVED, kind="reserved", shared_milli=c.request_milli)
            # No reserved CPUs (ReservedResources 0): upstream's fallback, the root pool's shared CPUs.
            grant = Grant(pool="root", kind="shared", shared_milli=c.request_milli)
            self._account(grant, +1)
            return grant
        full, frac, isolate = self._preferences(c)
        grant = None
        affinity = self._affinity_scores(c)
        hints = pool_hint_scores(container_hints(c, self.sysfs_root), self.pools, self.topology) \
            if c.host_paths else {}  # device topology hints: (score, non-zero score) per pool
        # Pools with the annotated memory types first, then the deepest; among equals the one with
        # the most free shared capacity.
        lacks_memory = self.memory.lacking(c, self.pools)

        def rank(p: Pool) -> tuple:
            lacks_isolated = bool(full and isolate and len(self._free_isolated(p)) < full)
            hinted = hints.get(p.name, (0.0, 0.0))
            return (-affinity.get(p.name, 0.0), p.name in lacks_memory, -hinted[0], -hinted[1],
                    -p.depth, lacks_isolated, -self._free_shared(p), p.name)

        # Affinity, memory types, then hints rank first (see rank); kube-system opted out of the reserved
        # CPUs: the root pool, as upstream.
        ordered = [self.pools["root"]] if c.is_kube_system else sorted(self._by_depth, key=rank)
        for pool in ordered:
            grant = self._try_pool(pool, full, frac, isolate)
            if grant is not None:
                break
        if grant is None:
            grant = self._fallback(c, full, frac)
        self._account(grant, +1)
        return grant

    def _affinity_scores(self, c: ContainerInfo) -> dict[str, float]:
        """Pool name -> c's affinity score (empty: no affinities); reserved containers count at the root."""
        affinities = container_affinities(c, colocate_pods=self.opts["ColocatePods"],
                                          colocate_namespaces=self.opts["ColocateNamespaces"])
        if not affinities:
            return {}
        per_pool: dict[str, int] = {}
        for cid, weight in self._affinity.container_weights(affinities, self.containers, self.grants,
                                                            exclude=c).items():
            pool = self.grants[cid].pool
            pool = "root" if pool == RESERVED else pool
            per_pool[pool] = per_pool.get(pool, 0) + weight
        return pool_scores(per_pool, self.pools)

    def _fallback(self, c: ContainerInfo, full: int, frac: int) -> Grant:
        """No pool fits: the root pool's shared CPUs, which exclusive slicing never empties; the
        reserved CPUs if the node has no shared CPU at all (everything reserved or isolated).
        Upstream refuses the container instead (see the README)."""
        where = "the root pool's shared CPUs" if self._shared["root"] else "the reserved CPUs"
        log.warning("topology-aware: no pool fits %s/%s (exclusive=%d, shared=%dm); running it on %s",
                    c.pod_name, c.name, full, frac, where)
        if self._shared["root"]:
            return Grant(pool="root", kind="shared", shared_milli=c.request_milli)
        return Grant(pool=RESERVED, kind="reserved", shared_milli=c.request_milli)

    def _account(self, grant: Grant, sign: int) -> None:
        if grant.pool == RESERVED:
            return
        if grant.exclusive:
            if sign > 0:
                self._taken |= grant.exclusive
            else:
                self._taken -= grant.exclusive
            self._recompute_shared()
        if grant.kind == "shared" or grant.shared_milli:
            self._direct[grant.pool] += sign * grant.shared_milli
            self._users[grant.pool] += sign

    def on_release(self, cid: str, grant: Grant) -> None:
        self._account(grant, -1)
        self.memory.forget(cid)

    def on_rename(self, old: str, new: str) -> None:
        self.memory.rename(old, new)

    def allocate(self, cid: str, container: ContainerInfo) -> None:
        super().allocate(cid, container)
        self.memory.request(cid, container)  # a cold start begins with the allocation

    def placement(self, cid: str) -> Placement:
        grant = self.grants.get(cid)
        if grant is None:
            return (None, None)
        if grant.pool == RESERVED:
            return self._reserved_placement
        if not grant.exclusive:
            placed = self._pool_placement[grant.pool]
        else:
            cpus = grant.exclusive
            if grant.shared_milli:
                cpus = cpus | self._shared[grant.pool]
            placed = self._pin(cpus, self.pools[grant.pool].mems)
        mems = self.memory.mems(cid, self.containers.get(cid), grant.pool, placed[1])
        return placed if mems is placed[1] else (placed[0], mems)

    # -- memory tiers: cold start (the resource manager runs the timers) ---------------------------
    def cold_starts(self) -> dict[str, float]:
        """Container id -> when its cold start ends (time.time()), for containers still placed."""
        return self.memory.prune(self.grants)

    def finish_cold_start(self, cid: str) -> bool:
        """The cold start of ``cid`` is over: its mems widen to its memory types (True if it was cold)."""
        return self.memory.finish_cold_start(cid)

    def export_extra(self) -> dict[str, Any]:
        return {"memory": self.memory.export(self.grants)}

    def group_of(self, cid: str) -> str | None:
        grant = self.grants.get(cid)
        if grant is None or (grant.exclusive and not grant.shared_milli):
            return None
        return grant.pool

    def group_state(self) -> dict[str, Any]:
        return {**self._pool_placement, RESERVED: self._reserved_placement}

    def restore_extra(self, data: dict[str, Any]) -> None:
        self.memory.restore(data.get("memory", {}), self.grants)
        self._taken = set()
        self._direct = {name: 0 for name in self.pools}
        self._users = {name: 0 for name in self.pools}
        self._recompute_shared()
        for cid, g in self.grants.items():
            if g.pool != RESERVED and g.pool not in self.pools:
                raise RestoreError(f"cached pool {g.pool!r} of {cid} does not exist on this topology")
            if g.exclusive:
                pool = self.pools[g.pool]
                allowed = pool.cpus - self.reserved
                if g.exclusive - allowed or g.exclusive & self._taken:
                    raise RestoreError(f"cached exclusive CPUs {format_cpuset(g.exclusive)} of {cid} "
                                       f"do not fit pool {g.pool}")
            self._account(g, +1)
        for cid, g in self.grants.items():
            if g.pool != RESERVED and (g.kind == "shared" or g.shared_milli) and not self._shared[g.pool]:
                raise RestoreError(f"cached shared grant of {cid} is in pool {g.pool}, which has no shared CPU left")

    def pool_cpus(self) -> dict[str, frozenset[int]]:
        """Each pool's shared CPUs (exclusive ones belong to their containers), and the reserved CPUs."""
        return {**self._shared, RESERVED: self.reserved}

    def describe_pools(self) -> dict[str, str]:
        return {name: format_cpuset(self._shared[name]) for name in self.pools}
