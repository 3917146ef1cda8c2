"""The ``topology-aware`` policy: a pool tree over sockets, dies and NUMA nodes.

Each pool owns the available CPUs under its part of the tree. Pools are ranked for a container as
upstream's ``compareScores`` does (see ``_rank``): a pool the request would leave without shared
capacity last, then affinity, memory types, device hints, depth, and among equals isolated or
sliceable capacity, fewer colocated containers, more shared capacity; pools whose memory cannot hold
the container are left out (``topology_memory``). Guaranteed containers of one CPU or more get whole
CPUs exclusively (kernel-isolated ones when preferred), plus the pool's shared CPUs for a fraction, by
upstream's rules in ``_preferences``; everything else shares. Exclusive CPUs are sliced off only while
every pool on the way up keeps a shared CPU, so a container that fits nowhere still has shared CPUs
to run on. ``kube-system`` and ``ReservedPoolNamespaces`` run on the reserved CPUs while those have
room for the request, else on the root pool's shared CPUs. ``PinMemory`` pins memory to the pool's
NUMA nodes, wider when the memory accounting moved a container's memory up the tree. Preferences can
be overridden per pod or container with cri-resource-manager's annotations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from resmgr.model.explanation import (
    FRACTIONAL_CPU,
    NO_FREE_CPUS,
    NOT_GUARANTEED,
    PREFERS_RESERVED,
    PREFERS_SHARED,
    RESERVED_NAMESPACE,
)
from resmgr.model.resources import (
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
from resmgr.policy.cpu_allocator import AllocationError, Prefer, take_cpus
from resmgr.policy.memory_tiers import DEFAULT, MemoryType, PoolMemory, memory_request
from resmgr.policy.topology_hints import container_hints, pool_hint_scores
from resmgr.policy.topology_memory import MemoryAccounting, memory_amount
from resmgr.topology.cpuset import format_cpuset

RESERVED = "reserved"
PREFER_ISOLATED_KEY = "prefer-isolated-cpus.cri-resource-manager.intel.com"
PREFER_SHARED_KEY = "prefer-shared-cpus.cri-resource-manager.intel.com"
PREFER_RESERVED_KEY = "prefer-reserved-cpus.cri-resource-manager.intel.com"

@dataclass
class Pool:
    name: str
    cpus: frozenset[int]
    mems: frozenset[int]
    depth: int
    parent: Pool | None = None
    children: list[Pool] = field(default_factory=list)
    subtree: list[Pool] = field(default_factory=list)  # self and all descendants
    ancestors: list[Pool] = field(default_factory=list)  # nearest first
    below: frozenset[str] = frozenset()  # names of all descendants
    id: int = 0  # upstream's node id: depth-first, children before their parent (ties go to the lower)


class TopologyAwarePolicy(Policy):
    name = "topology-aware"
    description = "Pool tree of sockets, dies and NUMA nodes; exclusive, isolated and shared CPUs."

    def setup(self) -> None:
        self.opts = self.policy_config.topology_aware
        res = resolve_cpu_resources(self.policy_config, self.topology, sysfs_root=self.sysfs_root)
        self.available, self.reserved = res.available, res.reserved
        self.isolated = (self.topology.isolated & self.available) - self.reserved
        self.pools: dict[str, Pool] = {}
        self._build_tree()
        self._affinity = AffinityScorer()
        self.memory = PoolMemory(self.topology, self.pools)  # memory tiers: pool mems become DRAM+PMEM
        self.accounting = MemoryAccounting(self.topology, self.pools, self.memory.memsets)
        self._widened: dict[str, object] = {}  # group key of widened containers -> state token
        self._memory_pools: dict[str, str] = {}  # container -> the pool above its own that its memory moved to
        self._reset_accounting()

    def _reset_accounting(self) -> None:
        self._taken: set[int] = set()
        self._granted: dict[str, int] = {name: 0 for name in self.pools}  # shared milli at the pool and below
        self._users: dict[str, int] = {name: 0 for name in self.pools}  # grants with a shared part
        self._colocated: dict[str, int] = {name: 0 for name in self.pools}  # all (non-reserved) grants
        self._reserved_milli = 0
        self.accounting.reset()
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
            pool.below = frozenset(p.name for p in pool.subtree if p is not pool)
            a, pool.ancestors = pool.parent, []
            while a is not None:
                pool.ancestors.append(a)
                a = a.parent
        ids = iter(range(len(self.pools)))

        def number(pool: Pool) -> None:  # upstream's DepthFirst: children first, the root last
            for child in pool.children:
                number(child)
            pool.id = next(ids)

        number(root)
        self._by_depth = sorted(self.pools.values(), key=lambda p: (-p.depth, p.name))
        self._top_down = self._by_depth[::-1]  # every pool after its parent

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
        return (cpus if self.opts.pin_cpu else None, mems if self.opts.pin_memory else None)

    # -- accounting -------------------------------------------------------------------
    def _shared_users(self, pool: Pool) -> int:
        return sum(self._users[q.name] for q in pool.subtree)

    def _free_shared(self, pool: Pool) -> int:
        """Upstream's AllocatableSharedCPU: free shared milli-CPU of the pool and of each ancestor (its
        own shared CPUs less what is granted at it and below it), the smallest."""
        free = len(self._shared[pool.name]) * 1000 - self._granted[pool.name]
        for a in pool.ancestors:
            free = min(free, len(self._shared[a.name]) * 1000 - self._granted[a.name])
        return free

    def _free_shared_all(self) -> dict[str, int]:
        """``_free_shared`` of every pool, in one pass down the tree."""
        out: dict[str, int] = {}
        for p in self._top_down:
            own = len(self._shared[p.name]) * 1000 - self._granted[p.name]
            out[p.name] = own if p.parent is None else min(own, out[p.parent.name])
        return out

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
            prefer_isolated = self.opts.prefer_isolated_cpus if isolated_note is None else isolated_note
            prefer_shared = self.opts.prefer_shared_cpus if shared_note is None else shared_note
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
            free = len(self._shared[q.name] - cpus) * 1000 - self._granted[q.name]
            if free < max(frac, 1):
                return False
        for q in pool.subtree:
            if q is pool or not q.cpus & cpus:
                continue
            remaining = len(self._shared[q.name] - cpus)
            if remaining * 1000 < self._granted[q.name] or (self._shared_users(q) and not remaining):
                return False
        return True

    def _try_pool(self, pool: Pool, full: int, frac: int, isolate: bool) -> Grant | None:
        if full:
            free_iso = self._free_isolated(pool)
            if isolate and len(free_iso) >= full and self._free_shared(pool) >= frac:
                # Exclusive picks prefer high-priority CPUs, as upstream's resources.go takeCPUs.
                cpus = take_cpus(self.topology, free_iso, full, prefer=Prefer.HIGH)
                return Grant(pool=pool.name, kind="isolated", exclusive=cpus, shared_milli=frac)
            sharable = self._shared[pool.name]
            if len(sharable) < full:
                return None
            try:
                cpus = take_cpus(self.topology, sharable, full, prefer=Prefer.HIGH)
            except AllocationError:
                return None
            if not self._exclusive_fits(pool, cpus, frac):
                return None
            return Grant(pool=pool.name, kind="exclusive", exclusive=cpus, shared_milli=frac)
        if not self._shared[pool.name] or self._free_shared(pool) < frac:
            return None
        return Grant(pool=pool.name, kind="shared", shared_milli=frac)

    def decide(self, c: ContainerInfo) -> Grant:
        grant = self._reserved_grant(c) if self._wants_reserved(c) else self._pool_grant(c)
        self._account(grant, +1)
        return grant

    def _wants_reserved(self, c: ContainerInfo) -> bool:
        reserved_note = annotated_bool(c, PREFER_RESERVED_KEY)  # None: not annotated
        return bool(reserved_note) or (
            reserved_note is None and is_reserved_namespace(c, list(self.opts.reserved_pool_namespaces)))

    def _reserved_grant(self, c: ContainerInfo) -> Grant:
        """The reserved CPUs while they have room for the request, else (as upstream's supply.AllocateCPU
        falls back to normal CPUs, and with no reserved CPUs at all) the root pool's shared CPUs."""
        milli = c.request_milli
        if self.reserved:
            room = len(self.reserved) * 1000 - self._reserved_milli
            if not milli or room >= milli or not self._shared["root"]:
                return Grant(pool=RESERVED, kind="reserved", shared_milli=milli, unpinned=self._why_reserved(c))
            log.warning("topology-aware: %s/%s needs %dm of reserved CPU, only %dm left of %s; "
                        "using the root pool's shared CPUs instead", c.pod_name, c.name, milli, room,
                        format_cpuset(self.reserved))
        return Grant(pool="root", kind="shared", shared_milli=milli, unpinned=self._why_reserved(c))

    def _why_reserved(self, c: ContainerInfo) -> str:
        return RESERVED_NAMESPACE if is_reserved_namespace(c, list(self.opts.reserved_pool_namespaces)) \
            else PREFERS_RESERVED

    def _pool_grant(self, c: ContainerInfo) -> Grant:
        full, frac, isolate = self._preferences(c)
        if c.is_kube_system:  # kube-system opted out of the reserved CPUs: the root pool, as upstream
            ordered = [self.pools["root"]]
        else:
            ordered = self._rank(c, full, frac, isolate)
        for pool in ordered:
            grant = self._try_pool(pool, full, frac, isolate)
            if grant is not None:
                break
        else:
            grant = self._fallback(c, full, frac)
        if not grant.exclusive:
            grant.unpinned = NO_FREE_CPUS if full else self._why_shared(c)
        return grant

    @staticmethod
    def _why_shared(c: ContainerInfo) -> str:
        """Why a container that asked for no exclusive CPUs (``_preferences``) shares."""
        if c.qos != QOS_GUARANTEED:
            return NOT_GUARANTEED
        return FRACTIONAL_CPU if c.request_milli % 1000 or not c.request_milli else PREFERS_SHARED

    def _rank(self, c: ContainerInfo, full: int, frac: int, isolate: bool) -> list[Pool]:
        """The pools that can hold the container's memory, best first, by upstream's compareScores.

        Its rules as a sort key, in its order: (1) a pool short of isolated CPUs (when asked for) or
        left without shared capacity by the request loses; (2) higher affinity wins; (3) a pool with
        the annotated memory types wins; (4) with device hints, the better hint score, then non-zero
        hint score, and for a tie the deeper pool, then the lower id; (5) the deeper pool wins; (6) for
        reserved requests more reserved capacity per container (never reached: reserved requests go
        to the root, here as upstream); (7) isolated requests: more isolated capacity wins, then the
        lower id; (8) exclusive requests: more sliceable capacity wins, then the lower id; (9) fewer
        colocated containers, then more shared capacity; (10) the lower id. Capacities are what the
        pool would keep after the request, as upstream's score computes them. Where (1) meets a pool
        short of isolated CPUs against one short of shared capacity, upstream's comparison answers
        for whichever comes first; the key puts isolated capacity first."""
        part = frac if full or frac else 1  # upstream scores a request of nothing as 1 milli-CPU
        affinity = self._affinity_scores(c)
        found = container_hints(c, self.sysfs_root) if c.host_paths else {}
        hints = pool_hint_scores(found, self.pools, self.topology) if found else None
        lacks_memory = self.memory.lacking(c, self.pools)
        amount, kind, cold = self._memory_request(c)
        fits = self.accounting.fits
        colocated = self._colocated
        free_shared = self._free_shared_all()

        def key(p: Pool) -> tuple:
            iso = len(self._free_isolated(p)) - full if isolate else 0
            shared = free_shared[p.name] - part - (1000 * full if not isolate or iso < 0 else 0)
            k: tuple = (iso < 0, shared <= 0, -affinity.get(p.name, 0.0), p.name in lacks_memory)
            if hints is not None:
                hs, nz = hints[p.name]
                k += (-hs, -nz, (-p.depth, p.id) if hs or nz else (0, 0))
            k += (-p.depth,)
            if isolate:
                k += ((-iso, p.id) if iso > 0 else (0, 0),)
            if full:
                k += ((-shared, p.id) if shared > 0 else (0, 0),)
            return (*k, colocated[p.name], -shared, p.id)

        return sorted((p for p in self._by_depth if fits(p.name, amount, kind, cold)), key=key)

    def _memory_request(self, c: ContainerInfo) -> tuple[int, MemoryType, bool]:
        """(bytes, memory types, cold start) of a container, for the memory accounting."""
        if not self.memory.tiered:
            return memory_amount(c), DEFAULT, False
        req = memory_request(c, self.memory.cold_start_off)
        return memory_amount(c), req.kind, req.cold_start > 0

    def _affinity_scores(self, c: ContainerInfo) -> dict[str, float]:
        """Pool name -> c's affinity score (empty: no affinities); reserved containers count at the root."""
        affinities = container_affinities(c, colocate_pods=self.opts.colocate_pods,
                                          colocate_namespaces=self.opts.colocate_namespaces)
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
            self._reserved_milli += sign * grant.shared_milli
            return
        if grant.exclusive:
            if sign > 0:
                self._taken |= grant.exclusive
            else:
                self._taken -= grant.exclusive
            self._recompute_shared()
        self._colocated[grant.pool] += sign
        if grant.kind == "shared" or grant.shared_milli:
            pool = self.pools[grant.pool]
            self._users[pool.name] += sign
            for q in (pool, *pool.ancestors):
                self._granted[q.name] += sign * grant.shared_milli

    def _memory_pool(self, grant: Grant) -> str:
        return "root" if grant.pool == RESERVED else grant.pool  # reserved grants are the root's, as upstream

    def on_release(self, cid: str, grant: Grant) -> None:
        self._account(grant, -1)
        self.accounting.release(cid)
        self.memory.forget(cid)
        if self._memory_pools.pop(cid, None) is not None:
            self._widened = {key: token for key, token in self._widened.items() if key in self.members}

    def on_rename(self, old: str, new: str) -> None:
        self.memory.rename(old, new)
        self.accounting.rename(old, new)
        if old in self._memory_pools:
            self._memory_pools[new] = self._memory_pools.pop(old)

    def allocate(self, cid: str, container: ContainerInfo) -> None:
        super().allocate(cid, container)
        self.memory.request(cid, container)  # a cold start begins with the allocation
        grant = self.grants.get(cid)
        if grant is None:
            return
        amount, kind, _ = self._memory_request(container)
        moved = self.accounting.allocate(cid, self._memory_pool(grant), amount, kind)
        if moved:  # their cpuset.mems widen: a new group state per group they join
            for other in moved:
                self._memory_pools[other] = self.accounting.pool_of(other) or "root"
            self.rebuild_members()
            for other in moved:
                key = self.group_of(other)
                if key is not None:
                    self._widened[key] = object()

    def placement(self, cid: str) -> Placement:
        grant = self.grants.get(cid)
        if grant is None:
            return (None, None)
        if grant.pool == RESERVED:
            return self._reserved_placement  # its memory is the root's: never widened
        if not grant.exclusive:
            placed = self._pool_placement[grant.pool]
        else:
            cpus = grant.exclusive
            if grant.shared_milli:
                cpus = cpus | self._shared[grant.pool]
            placed = self._pin(cpus, self.pools[grant.pool].mems)
        pool, default = grant.pool, placed[1]
        widened = self._memory_pools.get(cid)
        if widened is not None and default is not None:
            pool, default = widened, self.pools[widened].mems
        mems = self.memory.mems(cid, self.containers.get(cid), pool, default)
        return placed if mems is placed[1] else (placed[0], mems)

    # -- memory tiers: cold start (the resource manager runs the timers) ---------------------------
    def cold_starts(self) -> dict[str, float]:
        """Container id -> when its cold start ends (time.time()), for containers still placed."""
        return self.memory.prune(self.grants)

    def finish_cold_start(self, cid: str) -> bool:
        """The cold start of ``cid`` is over: its mems widen to its memory types (True if it was cold)."""
        return self.memory.finish_cold_start(cid)

    def group_of(self, cid: str) -> str | None:
        """A shared pool's name for its containers; ``pool>memory pool`` for containers whose memory was
        widened (``>memory pool`` if they hold only exclusive CPUs); None for other exclusive ones."""
        grant = self.grants.get(cid)
        if grant is None:
            return None
        only_exclusive = bool(grant.exclusive) and not grant.shared_milli
        widened = self._memory_pools.get(cid)
        if widened is not None:
            return f"{'' if only_exclusive else grant.pool}>{widened}"
        return None if only_exclusive else grant.pool

    def group_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {**self._pool_placement, RESERVED: self._reserved_placement}
        for key, token in self._widened.items():
            pool = key.partition(">")[0]
            state[key] = (state.get(pool), token)
        return state

    def export_extra(self) -> dict[str, Any]:
        return {"memory": self.memory.export(self.grants), "memory_pools": dict(self._memory_pools)}

    def restore_extra(self, data: dict[str, Any]) -> None:
        self.memory.restore(data.get("memory", {}), self.grants)
        self._reset_accounting()
        self._widened, self._memory_pools = {}, {}
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
        widened = data.get("memory_pools", {})
        if not isinstance(widened, dict):
            raise RestoreError("malformed cached memory pools")
        for cid, g in self.grants.items():
            pool = widened.get(cid, self._memory_pool(g))
            own = self.pools.get(self._memory_pool(g))
            if pool not in self.pools or own is None or (pool != own.name and pool not in
                                                          {a.name for a in own.ancestors}):
                raise RestoreError(f"cached memory pool {pool!r} of {cid} is not above its pool {own and own.name}")
            amount, kind, _ = self._memory_request(self.containers[cid])
            self.accounting.restore(cid, pool, amount, kind)
            if pool != own.name:
                self._memory_pools[cid] = pool
        for cid in self._memory_pools:
            key = self.group_of(cid)
            if key is not None:
                self._widened[key] = object()

    def pool_cpus(self) -> dict[str, frozenset[int]]:
        """Each pool's shared CPUs (exclusive ones belong to their containers), and the reserved CPUs."""
        return {**self._shared, RESERVED: self.reserved}

    def describe_pools(self) -> dict[str, str]:
        return {name: format_cpuset(self._shared[name]) for name in self.pools}
