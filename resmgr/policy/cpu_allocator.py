"""Picking CPUs by topology, in the spirit of kubelet's takeByTopology.

Whole free packages are taken first, then whole free NUMA nodes, then whole free
cores, then single threads. Within each step the unit with the fewest free CPUs
is preferred, which packs allocations and keeps large units whole for later.
``near`` biases the choice toward CPUs sharing a core or NUMA node with an
existing set (used to grow balloons compactly).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable

from resmgr.topology.model import Topology


class AllocationError(RuntimeError):
    """Not enough free CPUs for a request."""


def _take_whole_units(units: Iterable[frozenset[int]], free: set[int], need: int, out: set[int]) -> int:
    for unit in sorted(units, key=lambda u: (len(u), min(u))):
        if need < len(unit) or not unit:
            continue
        if unit <= free:
            out |= unit
            free -= unit
            need -= len(unit)
    return need


def take_cpus(topology: Topology, free: Iterable[int], count: int, *,
              near: frozenset[int] = frozenset()) -> frozenset[int]:
    """Choose ``count`` CPUs out of ``free``; raises AllocationError if there are too few."""
    free_set = set(free)
    if count <= 0:
        return frozenset()
    if count > len(free_set):
        raise AllocationError(f"need {count} CPUs, only {len(free_set)} free")
    out: set[int] = set()
    need = count
    if not near:
        need = _take_whole_units(topology.packages.values(), free_set, need, out)
        if need:
            need = _take_whole_units(topology.nodes.values(), free_set, need, out)
    if need:
        node_of, core_of = topology.node_of, topology.core_of
        core_free = Counter(map(core_of, free_set))
        node_free = Counter(map(node_of, free_set))
        near_nodes = topology.nodes_of(near) if near else frozenset()
        near_cores = {core_of(c) for c in near}
        threads, core_node, core_first = topology.core_size, topology.core_node, topology.core_first

        def core_rank(key) -> tuple:
            node = core_node[key]
            return (key not in near_cores, node not in near_nodes, node_free[node], core_first[key])

        # Whole free cores.
        for key in sorted((k for k, n in core_free.items() if n == threads[k]), key=core_rank):
            if need < threads[key]:
                continue
            cpus = topology.cores[key]
            out |= cpus
            free_set -= cpus
            need -= len(cpus)
            if not need:
                break
        if need:
            # Single threads: partially used cores first so that whole cores stay whole.
            core_free = Counter(map(core_of, free_set))
            node_free = Counter(map(node_of, free_set))

            def thread_rank(cpu: int) -> tuple:
                return (core_of(cpu) not in near_cores, node_of(cpu) not in near_nodes,
                        core_free[core_of(cpu)], node_free[node_of(cpu)], cpu)

            candidates = free_set
            if near_nodes:  # growing a balloon: look next to it first
                close = {c for c in free_set if node_of(c) in near_nodes}
                if len(close) >= need:
                    candidates = close
            picked = heapq.nsmallest(need, candidates, key=thread_rank)
            out.update(picked)
            need -= len(picked)
    if need:  # pragma: no cover - guarded by the length check above
        raise AllocationError(f"could not place {need} more CPUs")
    return frozenset(out)


def release_cpus(topology: Topology, owned: Iterable[int], count: int) -> frozenset[int]:
    """Choose ``count`` CPUs of ``owned`` to give back, keeping the rest compact."""
    owned_set = set(owned)
    if count <= 0:
        return frozenset()
    core_of, node_of = topology.core_of, topology.node_of
    core_owned = Counter(core_of(c) for c in owned_set)
    node_owned = Counter(node_of(c) for c in owned_set)
    # Give back from the least populated node and core first, highest ids first.
    ranked = sorted(owned_set, key=lambda c: (node_owned[node_of(c)], core_owned[core_of(c)], -c))
    return frozenset(ranked[:count])
