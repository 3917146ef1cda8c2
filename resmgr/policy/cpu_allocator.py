"""Picking CPUs by topology, as cri-resource-manager's CPU allocator (``pkg/cpuallocator``) picks them.

A request for all the free CPUs takes them all. Otherwise it is served in three steps:

1. whole idle packages (every online CPU of the package free), lower package id first;
2. whole idle cores, in the order of their first CPU id;
3. single threads, ranked by: the package that already holds CPUs of this request, CPU priority
   of the package's free CPUs (see ``Prefer``), lower package id, priority of the CPU itself, the
   package and then the core with fewer free CPUs, lower CPU id.

A step takes a unit only while the request still needs at least that many CPUs, so whole NUMA
nodes are not preferred and a request of one CPU on a hyperthreaded node takes a thread.

CPU priorities: upstream sorts CPUs into high, normal and low priority by Intel SST, base
frequency and EPP; ``Topology.priority`` holds that classification (empty: every CPU is normal).
A request ``prefer``s one class: a set with more CPUs of that class (then of the lower classes) wins,
a set with CPUs of higher classes loses, and when ranking packages for threads, of two packages that
can each serve the rest of the request from the preferred class the tighter fit wins. ``Prefer.NONE``
ignores priorities. With every CPU normal, ``NORMAL`` and ``HIGH`` prefer larger packages and cores,
and for threads ``NORMAL`` prefers the package with the fewest free CPUs that still has enough while
``HIGH`` prefers the one with the most.

``near`` is ours, not upstream's allocator: it grows a balloon or a dynamic pool next to the CPUs
it already has (upstream's balloons choose the CPUs to grow from with their own CPU tree).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable
from enum import IntEnum

from resmgr.topology.model import PRIORITY_LOW, PRIORITY_NORMAL, Topology


class AllocationError(RuntimeError):
    """Not enough free CPUs for a request."""


class Prefer(IntEnum):
    """The CPU priority a request prefers (upstream's CPUPriority); NONE ignores priorities."""

    HIGH = 0
    NORMAL = 1
    LOW = 2
    NONE = 3


_CLASSES = PRIORITY_LOW + 1


def _classes(topology: Topology, cpus: frozenset[int] | set[int]) -> tuple[int, ...]:
    """How many of ``cpus`` are of each priority class, high first."""
    prio = topology.priority
    counts = [0] * _CLASSES
    if not prio:
        counts[PRIORITY_NORMAL] = len(cpus)
        return tuple(counts)
    for cpu in cpus:
        counts[prio.get(cpu, PRIORITY_NORMAL)] += 1
    return tuple(counts)


def _rank(counts: tuple[int, ...], prefer: Prefer, count: int) -> tuple[int, ...]:
    """Sort key of a CPU set by priority, smaller is better (upstream's cmpCPUSet as a key).

    More CPUs of the preferred class win, then more of each lower class, then fewer of each higher
    class. With ``count`` > 0, two sets that both hold ``count`` preferred CPUs rank by the tighter
    fit alone."""
    if prefer is Prefer.NONE:
        return ()
    head = counts[prefer]
    if count > 0 and head >= count:
        return (0, head)
    return (1, -head, *(-counts[p] for p in range(prefer + 1, _CLASSES)), *(counts[p] for p in range(prefer)))


def _take_idle(units: Iterable[tuple[int, frozenset[int]]], topology: Topology, free: set[int], need: int,
               out: set[int], prefer: Prefer) -> int:
    """Take whole units (packages or cores, with their ids) whose CPUs are all free, better ranked and
    lower id first, while ``need`` is at least their size."""
    idle = [(uid, u) for uid, u in units if u and len(u) <= need and u <= free]
    idle.sort(key=lambda item: (_rank(_classes(topology, item[1]), prefer, -1), item[0]))
    for _, unit in idle:
        if need >= len(unit) and unit <= free:
            out |= unit
            free -= unit
            need -= len(unit)
            if not need:
                break
    return need


def _take_threads(topology: Topology, free: set[int], need: int, out: set[int], prefer: Prefer) -> None:
    package_of, core_of = topology.package_of, topology.core_of
    package_free = Counter(map(package_of, free))
    core_free = Counter(map(core_of, free))
    taken = Counter(map(package_of, out))
    package_rank = {p: _rank(_classes(topology, topology.packages[p] & free), prefer, need) for p in package_free}
    if topology.priority and prefer is not Prefer.NONE:
        prio = topology.priority

        def cpu_rank(cpu: int) -> tuple[int, ...]:
            counts = [0] * _CLASSES
            counts[prio.get(cpu, PRIORITY_NORMAL)] = 1
            return _rank(tuple(counts), prefer, 0)
    else:
        def cpu_rank(cpu: int) -> tuple[int, ...]:
            return ()

    def key(cpu: int) -> tuple:
        p = package_of(cpu)
        return (-taken[p], package_rank[p], p, cpu_rank(cpu), package_free[p], core_free[core_of(cpu)], cpu)

    out.update(heapq.nsmallest(need, free, key=key))


def take_cpus(topology: Topology, free: Iterable[int], count: int, *,
              near: frozenset[int] = frozenset(), prefer: Prefer = Prefer.NORMAL) -> frozenset[int]:
    """Choose ``count`` CPUs out of ``free``; raises AllocationError if there are too few."""
    free_set = set(free)
    if count <= 0:
        return frozenset()
    if count > len(free_set):
        raise AllocationError(f"need {count} CPUs, only {len(free_set)} free")
    if count == len(free_set):
        return frozenset(free_set)
    if near:
        return _take_near(topology, free_set, count, near)
    out: set[int] = set()
    need = _take_idle(topology.packages.items(), topology, free_set, count, out, prefer)
    if need:
        cores = ((topology.core_first[key], cpus) for key, cpus in topology.cores.items())
        need = _take_idle(cores, topology, free_set, need, out, prefer)
    if need:
        _take_threads(topology, free_set, need, out, prefer)
    return frozenset(out)


def _take_near(topology: Topology, free_set: set[int], count: int, near: frozenset[int]) -> frozenset[int]:
    """Grow next to ``near``: whole free cores, then threads, on its cores and NUMA nodes first."""
    out: set[int] = set()
    need = count
    node_of, core_of = topology.node_of, topology.core_of
    core_free = Counter(map(core_of, free_set))
    node_free = Counter(map(node_of, free_set))
    near_nodes = topology.nodes_of(near)
    near_cores = {core_of(c) for c in near}
    threads, core_node, core_first = topology.core_size, topology.core_node, topology.core_first

    def core_rank(key) -> tuple:
        node = core_node[key]
        return (key not in near_cores, node not in near_nodes, node_free[node], core_first[key])

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
        close = {c for c in free_set if node_of(c) in near_nodes}
        if len(close) >= need:  # look next to it first
            candidates = close
        out.update(heapq.nsmallest(need, candidates, key=thread_rank))
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
