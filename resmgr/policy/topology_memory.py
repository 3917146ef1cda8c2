"""Memory capacity per pool for topology-aware, as cri-resource-manager accounts it.

Upstream's model (``pools.go`` ``allocatePool``, ``resources.go`` supply and grant), kept as it is:

* every pool has the memory of its NUMA nodes (DRAM plus the PMEM/HBM attached to them), per type;
* a container's memory (Guaranteed: its limit; Burstable: its limit, else its request; BestEffort: none)
  is granted from the pool that got its CPUs, PMEM first, then DRAM, then HBM, as its types allow. Only
  that pool's free memory shrinks: a parent does not see its children's grants;
* a grant in a pool with children is also reserved ("extra") in every pool below it, because its
  memory may all come from any one of their nodes;
* pools whose free memory cannot hold a request beside their extra reservations are not candidates
  (a cold-starting request must fit in PMEM);
* after a grant, a container whose memory pool lies below it and whose pool's extra reservations now
  exceed its free memory has its memory moved to the first ancestor that holds it: its cpuset.mems
  widen to that pool's nodes (its CPUs stay). Repeated until nothing moves.

Where upstream fails the container (no pool holds it, no ancestor takes a widened grant), the
memory is charged anyway and a warning logged: the relay never fails a container for a policy reason.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from resmgr.model.resources import QOS_BESTEFFORT, QOS_GUARANTEED, ContainerInfo
from resmgr.policy.memory_tiers import MemoryType
from resmgr.topology.model import Topology

log = logging.getLogger("resmgr.policy.memory")

# Upstream's allocation order; amounts are kept as one int per type in this order.
ORDER = (MemoryType.PMEM, MemoryType.DRAM, MemoryType.HBM)
_ORDER_BITS = tuple(int(t) for t in ORDER)  # plain ints: IntFlag's & costs a call per pool and decision


class MemoryPool(Protocol):
    name: str
    ancestors: list[Any]  # nearest first
    below: frozenset[str]  # names of the pools under it (not itself)


def memory_amount(c: ContainerInfo) -> int:
    """Bytes a container's memory grant holds (upstream's MemAmountToAllocate)."""
    if c.qos == QOS_BESTEFFORT:
        return 0
    if c.qos == QOS_GUARANTEED:
        return c.memory_limit
    return c.memory_limit or c.memory_request


@dataclass
class MemoryGrant:
    pool: str  # the pool the memory is granted from: the CPU pool, or an ancestor once widened
    amounts: tuple[int, int, int]  # per type, in ORDER

    @property
    def total(self) -> int:
        return sum(self.amounts)


class MemoryAccounting:
    """Free memory and extra reservations per pool, and each container's memory grant."""

    def __init__(self, topology: Topology, pools: Mapping[str, MemoryPool],
                 memsets: Mapping[str, Mapping[MemoryType, frozenset[int]]]) -> None:
        self.pools = pools
        dram = set().union(*(memsets[name][MemoryType.DRAM] for name in pools)) if pools else set()
        # Without MemTotal for every node with CPUs there is nothing to account against: off.
        self.enabled = bool(dram) and all(topology.node_memory.get(n, 0) > 0 for n in dram)
        self.capacity: dict[str, tuple[int, int, int]] = {
            name: tuple(sum(topology.node_memory.get(n, 0) for n in memsets[name].get(t, ())) for t in ORDER)
            for name in pools}  # type: ignore[misc]
        self.free: dict[str, list[int]] = {}
        self.extra: dict[str, list[int]] = {}
        self.grants: dict[str, MemoryGrant] = {}
        self.reset()

    def reset(self) -> None:
        self.free = {name: list(cap) for name, cap in self.capacity.items()}
        self.extra = {name: [0, 0, 0] for name in self.pools}
        self.grants = {}

    # -- candidates -------------------------------------------------------------------------------
    def fits(self, pool: str, amount: int, kind: MemoryType, cold_start: bool) -> bool:
        """Can ``pool`` take ``amount`` bytes of ``kind`` beside its extra reservations (upstream's
        filterInsufficientResources)?"""
        if not self.enabled:
            return True
        free, extra = self.free[pool], self.extra[pool]
        required, bits = amount, int(kind)
        for i, t in enumerate(_ORDER_BITS):
            if not bits & t:
                continue
            if extra[i] > free[i]:
                continue
            if required + extra[i] <= free[i]:
                return True
            if cold_start:  # a cold start must fit in PMEM, which comes first
                return False
            required -= free[i] - extra[i]
        return False

    # -- grants ---------------------------------------------------------------------------------------
    def allocate(self, cid: str, pool: str, amount: int, kind: MemoryType) -> list[str]:
        """Grant ``cid``'s memory from ``pool``; the containers whose memory pool moved up as a result."""
        grant = self._split(cid, pool, amount, kind, warn=True)
        self._place(grant)
        moved = self._widen(pool) if amount and self.pools[pool].below else []
        self.grants[cid] = grant
        return moved

    def restore(self, cid: str, pool: str, amount: int, kind: MemoryType) -> None:
        """Re-charge a cached grant where it was (the cached state was already settled)."""
        grant = self.grants[cid] = self._split(cid, pool, amount, kind, warn=False)
        self._place(grant)

    def _split(self, cid: str, pool: str, amount: int, kind: MemoryType, *, warn: bool) -> MemoryGrant:
        """The amount per type, taken from the pool's free memory in upstream's order (allocateMemory)."""
        amounts = [0, 0, 0]
        remaining = amount
        free = self.free[pool]
        for i, t in enumerate(ORDER):
            if remaining and kind & t:
                amounts[i] = min(remaining, max(free[i], 0))
                remaining -= amounts[i]
        if remaining:
            # Upstream fails the container here; it runs anyway, so its memory is charged to DRAM.
            if warn:
                log.warning("topology-aware: %s: %d bytes of memory more than pool %s has free; overcommitted",
                            cid, remaining, pool)
            amounts[ORDER.index(MemoryType.DRAM)] += remaining
        return MemoryGrant(pool, (amounts[0], amounts[1], amounts[2]))

    def release(self, cid: str) -> None:
        grant = self.grants.pop(cid, None)
        if grant is not None:
            self._unplace(grant)

    def rename(self, old: str, new: str) -> None:
        if old in self.grants:
            self.grants[new] = self.grants.pop(old)

    def pool_of(self, cid: str) -> str | None:
        grant = self.grants.get(cid)
        return None if grant is None else grant.pool

    # -- bookkeeping ------------------------------------------------------------------------------
    def _add(self, grant: MemoryGrant, sign: int) -> None:
        free = self.free[grant.pool]
        for i, a in enumerate(grant.amounts):
            free[i] -= sign * a
        if grant.total:
            for name in self.pools[grant.pool].below:
                extra = self.extra[name]
                for i, a in enumerate(grant.amounts):
                    extra[i] += sign * a

    def _place(self, grant: MemoryGrant) -> None:
        self._add(grant, +1)

    def _unplace(self, grant: MemoryGrant) -> None:
        self._add(grant, -1)

    def _widen(self, pool: str) -> list[str]:
        """Move grants below ``pool`` up until every pool holds its own grants beside its extra reservations.

        Upstream restarts its scan after each move, over a Go map (in no fixed order); the grants are
        scanned here oldest first, again after any move, until a scan moves nothing."""
        below = self.pools[pool].below
        if all(sum(self.extra[name]) <= sum(self.free[name]) for name in below):
            return []  # the usual case: every pool below still holds its own grants
        moved: list[str] = []
        changed = True
        while changed:
            changed = False
            for cid, grant in self.grants.items():
                if grant.pool in below and self._expand(cid, grant):
                    moved.append(cid)
                    changed = True
        return list(dict.fromkeys(moved))

    def _expand(self, cid: str, grant: MemoryGrant) -> bool:
        """Upstream's ExpandMemset: up to the first ancestor whose free memory holds the grant."""
        node = grant.pool
        if sum(self.extra[node]) <= sum(self.free[node]):
            return False
        required = grant.total
        for parent in self.pools[node].ancestors:
            if sum(self.extra[parent.name]) + required <= sum(self.free[parent.name]):
                break
        else:
            log.warning("topology-aware: %s: no pool above %s holds its %d bytes beside the reservations "
                        "made there; its memory stays where it is", cid, node, required)
            return False
        self._unplace(grant)
        grant.pool = parent.name
        self._place(grant)
        log.info("topology-aware: moved the memory of %s upward from %s to %s to guarantee memory",
                 cid, node, parent.name)
        return True

    def state(self, names: Iterable[str] | None = None) -> dict[str, dict[str, Sequence[int]]]:
        """Free memory and extra reservations per pool (for tests and debugging)."""
        return {name: {"free": list(self.free[name]), "extra": list(self.extra[name])}
                for name in (names if names is not None else self.pools)}
