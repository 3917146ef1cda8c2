"""Where a balloon grows or shrinks: upstream balloons' CPU tree (``cputree.go``), the same choices.

The tree is system > packages > dies > NUMA nodes > cores > threads. To grow a CPU set by ``n`` CPUs,
the deepest tree node that still has ``n`` free CPUs is chosen; among equals, the one whose ancestors
(level by level from the top) hold the most CPUs of the set, then the one whose ancestors have the
fewest free CPUs (packing) or, with ``AllocatorTopologyBalancing``, the most (spreading), then by
name. The CPUs are then picked among that node's free CPUs by the CPU allocator. Shrinking gives back
one CPU at a time: from the branch that holds the fewest CPUs of the set, then the fewest free CPUs,
then the highest name. With ``PreferSpreadOnPhysicalCores`` every NUMA node is split by hyperthread
index (first threads of its cores, second threads, ...), so a set grows onto separate physical cores
first, and one CPU at a time.

Node names are upstream's (``p0d0n0cpu4t12``) because ties end on a string comparison of names.
Sets are int bit masks here and a decision walks only the branches it compares: on a 256-CPU node one
growing or shrinking step costs about 0.05-0.15 ms.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from resmgr.topology.model import Topology


class TreeAllocationError(RuntimeError):
    """Not enough free CPUs anywhere in the tree."""


def to_mask(cpus: Iterable[int]) -> int:
    mask = 0
    for cpu in cpus:
        mask |= 1 << cpu
    return mask


def to_set(mask: int) -> frozenset[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return frozenset(out)


def _best(nodes: list[int], counts: list[int], most: bool) -> list[int]:
    best = max(counts) if most else min(counts)
    return [n for n, c in zip(nodes, counts, strict=True) if c == best]


@dataclass
class _Level:
    masks: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    parents: list[int] = field(default_factory=list)  # index in the level above
    children: list[list[int]] = field(default_factory=list)  # indices in the level below

    def add(self, mask: int, name: str, parent: int) -> int:
        self.masks.append(mask)
        self.names.append(name)
        self.parents.append(parent)
        self.children.append([])
        return len(self.masks) - 1


class CpuTree:
    """One allocator per option pair (upstream: one cpuTreeAllocator per balloon type with its own options)."""

    def __init__(self, topology: Topology, *, balancing: bool = False, spread_cores: bool = False) -> None:
        self.balancing = balancing
        self.spread_cores = spread_cores
        self.levels: list[_Level] = []
        self._build(topology)
        # ancestors[l][i]: the index of node i's ancestor at every level 0..l (itself last)
        self.ancestors: list[list[tuple[int, ...]]] = [[(0,)]]
        for depth in range(1, len(self.levels)):
            above = self.ancestors[depth - 1]
            self.ancestors.append([above[p] + (i,) for i, p in enumerate(self.levels[depth].parents)])
        self.widest = [max((m.bit_count() for m in lv.masks), default=0) for lv in self.levels]

    def _level(self, depth: int) -> _Level:
        while len(self.levels) <= depth:
            self.levels.append(_Level())
        return self.levels[depth]

    def _node(self, depth: int, mask: int, name: str, parent: int) -> int:
        index = self._level(depth).add(mask, name, parent)
        if depth:
            self.levels[depth - 1].children[parent].append(index)
        return index

    def _build(self, topology: Topology) -> None:
        cpus = topology.cpus
        self._node(0, to_mask(cpus), "system", -1)
        # A CPU's hyperthread index: its place among its core's threads (upstream's SiblingIndex).
        thread_index = {cpu: i for core in topology.cores.values() for i, cpu in enumerate(sorted(core))}
        classes = sorted(set(thread_index.values()))
        for pkg in sorted(topology.packages):
            p_name = f"p{pkg}"
            p = self._node(1, to_mask(topology.packages[pkg]), p_name, 0)
            for (pk, die), die_cpus in topology.dies.items():
                if pk != pkg:
                    continue
                d_name = f"{p_name}d{die}"
                d = self._node(2, to_mask(die_cpus), d_name, p)
                for node in sorted({cpus[c].node for c in die_cpus}):
                    node_cpus = sorted(topology.nodes[node] & die_cpus)
                    n_name = f"{d_name}n{node}"
                    n = self._node(3, to_mask(node_cpus), n_name, d)
                    if not self.spread_cores:
                        self._cores(4, n, n_name, node_cpus, topology, None)
                        continue
                    for k in classes:
                        members = [c for c in node_cpus if thread_index[c] == k]
                        cls = self._node(4, to_mask(members), f"{n_name}class{k}", n)
                        self._cores(5, cls, n_name, node_cpus, topology, set(members))

    def _cores(self, depth: int, parent: int, n_name: str, node_cpus: list[int], topology: Topology,
               only: set[int] | None) -> None:
        seen: set[int] = set()
        for cpu in node_cpus:
            if cpu in seen:
                continue
            threads = sorted(topology.cores[topology.core_of(cpu)])
            seen.update(threads)
            if only is not None:
                threads = [t for t in threads if t in only]
                if not threads:
                    continue
            c_name = f"{n_name}cpu{cpu}"
            core = self._node(depth, to_mask(threads), c_name, parent)
            for t in threads:
                self._node(depth + 1, 1 << t, f"{c_name}t{t}", core)

    # -- choosing ------------------------------------------------------------------------------
    def _pick(self, depth: int, ok: list[set[int]] | None, current: int, free: int, grow: bool) -> int:
        """The best qualifying node at ``depth``, compared as upstream's sorters compare (see the module doc).
        A node qualifies if it is in ``ok`` at its level; without ``ok`` if it has a free CPU (growing by
        one) or a CPU of the set (shrinking)."""
        levels = self.levels
        having = free if grow else current

        def expand(frontier: list[int], lvl: int, of: int, counts_qualify: bool, most: bool) -> list[int]:
            above, masks = levels[lvl - 1].children, levels[lvl].masks
            kids = [c for n in frontier for c in above[n]]
            if ok is not None:
                kids = [c for c in kids if c in ok[lvl]]
            elif not counts_qualify:
                kids = [c for c in kids if masks[c] & having]
            counts = [(masks[c] & of).bit_count() for c in kids]
            if ok is None and counts_qualify:  # counting what qualifies: a count of 0 does not qualify
                kids = [c for c, n in zip(kids, counts, strict=True) if n]
                counts = [n for n in counts if n]
            return _best(kids, counts, most)

        # 1. The most (growing) or fewest (shrinking) CPUs of the set, level by level from the top.
        frontier, stop = [0], depth
        for lvl in range(1, depth + 1):
            frontier = expand(frontier, lvl, current, not grow, grow)
            if grow and not levels[lvl].masks[frontier[0]] & current:
                stop = lvl  # nothing of the set below: the rest of step 1 ties everywhere
                break
        # 2. Then the fewest free CPUs (packing, and always when shrinking) or the most (balancing), again
        # from the top: first among the ancestors of what step 1 kept, then below it.
        most_free = grow and self.balancing
        anc = self.ancestors[stop]
        for lvl in range(1, stop + 1):
            masks = levels[lvl].masks
            frontier = _best(frontier, [(masks[anc[n][lvl]] & free).bit_count() for n in frontier], most_free)
        for lvl in range(stop + 1, depth + 1):
            frontier = expand(frontier, lvl, free, grow, most_free)
        names = levels[depth].names
        return (min if grow else max)(frontier, key=names.__getitem__)

    def _grow_from(self, current: int, free: int, count: int) -> int:
        """Upstream's resizeCpus for a positive delta: the free CPUs of the best node to take ``count`` from."""
        levels = self.levels
        if count == 1:  # the deepest level (threads) qualifies wherever a CPU is free
            if not free & levels[0].masks[0]:
                raise TreeAllocationError("not enough free CPUs: need 1, 0 free")
            depth = len(levels) - 1
            return levels[depth].masks[self._pick(depth, None, current, free, True)] & free
        for depth in range(len(levels) - 1, -1, -1):
            if self.widest[depth] < count:
                continue
            found = {i for i, m in enumerate(levels[depth].masks) if (m & free).bit_count() >= count}
            if found:
                break
        else:
            raise TreeAllocationError(f"not enough free CPUs: need {count}, {free.bit_count()} free")
        ok = [found]
        for lvl in range(depth, 0, -1):
            parents = levels[lvl].parents
            ok.append({parents[i] for i in ok[-1]})
        ok.reverse()  # ok[l]: nodes at level l with a qualifying node below (or being one)
        return levels[depth].masks[self._pick(depth, ok, current, free, True)] & free

    def grow(self, current: Iterable[int], free: Iterable[int], count: int) -> frozenset[int]:
        """Free CPUs to take ``count`` CPUs from (at least ``count``; the CPU allocator picks among them)."""
        cur, fr = to_mask(current), to_mask(free)
        if count <= 0:
            return frozenset()
        add = self._grow_from(cur, fr, count)
        if not self.spread_cores or add.bit_count() == count:
            return to_set(add)
        # Equally good for the tree, not for spreading: choose one CPU at a time (as upstream).
        add = 0
        for _ in range(count):
            one = self._grow_from(cur, fr, 1)
            add |= one
            cur |= one
            fr &= ~one
        return to_set(add)

    def shrink(self, current: Iterable[int], free: Iterable[int], count: int) -> frozenset[int]:
        """The ``count`` CPUs of ``current`` to give back, one at a time as upstream."""
        cur, fr = to_mask(current), to_mask(free)
        if count > cur.bit_count():
            raise TreeAllocationError(f"cannot release {count} of {cur.bit_count()} CPUs")
        levels = self.levels
        deepest = len(levels) - 1
        removed = 0
        for _ in range(count):
            one = levels[deepest].masks[self._pick(deepest, None, cur, fr, False)]
            removed |= one
            cur &= ~one
            fr |= one
        return to_set(removed)
