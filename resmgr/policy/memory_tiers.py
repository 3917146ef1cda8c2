"""Memory tiers for topology-aware (upstream's ``memtier``): DRAM, PMEM and HBM per pool, by annotation.

As in cri-resource-manager's topology-aware policy:

* every CPU-less memory node (PMEM or HBM, ``resmgr.topology``) is attached to the closest NUMA node
  with CPUs (ties: the one with fewer attached nodes, then the lower id); a pool reaches the memory of
  its own nodes plus what is attached to them;
* ``memory-type.cri-resource-manager.intel.com`` (``/container.<name>``, ``/pod``; the deprecated
  ``cri-resource-manager.intel.com/memory-type`` pod annotation, a YAML map per container or one value)
  picks the types, a comma-separated list of ``dram``, ``pmem``, ``hbm`` or ``mixed`` (all three);
  pools that have every requested type rank first, and the container's cpuset.mems holds those types;
* without an annotation a container gets its pool's DRAM and PMEM (upstream's default "all types"; its
  pool builder leaves HBM nodes out, so HBM is used only when asked for here too);
* ``cold-start.cri-resource-manager.intel.com`` (``duration: 60s``, at most 1h) on a DRAM+PMEM request
  starts the container on the pool's PMEM only; ``finish_cold_start`` widens it afterwards (the resource
  manager runs the timer). Cold start is off when a PMEM node has no normal memory zone (movable PMEM);
  a PMEM-only request then also gets DRAM.

A requested type the pool lacks falls back to its DRAM, then to all its memory. Upstream's memory
capacity accounting (request-size pool filtering, widening memsets to avoid OOM) and page demotion
are not done here.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from enum import IntFlag
from typing import Any, Protocol

import yaml

from resmgr.durations import parse_go_duration
from resmgr.model.resources import RESMGR_KEY_NAMESPACE, ContainerInfo, preference_annotation
from resmgr.topology.model import HBM, PMEM, Topology

log = logging.getLogger("resmgr.policy.memtier")

MEMORY_TYPE_KEY = f"memory-type.{RESMGR_KEY_NAMESPACE}"
COLD_START_KEY = f"cold-start.{RESMGR_KEY_NAMESPACE}"
DEPRECATED_MEMORY_TYPE_KEY = f"{RESMGR_KEY_NAMESPACE}/memory-type"
DEPRECATED_COLD_START_KEY = f"{RESMGR_KEY_NAMESPACE}/cold-start"
MAX_COLD_START = 3600.0  # upstream refuses longer cold starts


class MemoryType(IntFlag):
    DRAM = 1
    PMEM = 2
    HBM = 4


ALL = MemoryType.DRAM | MemoryType.PMEM | MemoryType.HBM
DEFAULT = MemoryType.DRAM | MemoryType.PMEM
_NAMES = {"dram": MemoryType.DRAM, "pmem": MemoryType.PMEM, "hbm": MemoryType.HBM, "mixed": ALL}
_OF_TOPOLOGY = {PMEM: MemoryType.PMEM, HBM: MemoryType.HBM}


def parse_memory_type(text: str) -> MemoryType | None:
    """``dram,pmem`` -> DRAM|PMEM; "" -> None (unspecified); raises ValueError naming an unknown type."""
    if text == "":
        return None
    kind = MemoryType(0)
    for name in text.split(","):
        if name.lower() not in _NAMES:
            raise ValueError(f"unknown memory type {name!r} (known: dram, pmem, hbm, mixed)")
        kind |= _NAMES[name.lower()]
    return kind


def format_memory_type(kind: MemoryType) -> str:
    return ",".join(t.name for t in MemoryType if t & kind)  # type: ignore[misc]


@functools.lru_cache(maxsize=512)
def _load_yaml(text: str) -> Any:
    """Annotation values repeat across a pod's containers and decisions: parse each text once (read-only)."""
    return yaml.safe_load(text)


def _deprecated_entry(container: ContainerInfo, key: str, current: str) -> tuple[bool, Any]:
    """(found, value) of upstream's deprecated per-pod annotation: a YAML map of container name -> value."""
    text = container.pod_annotations.get(key)
    if text is None:
        return False, None
    log.warning("using deprecated annotation %s; use %s/container.%s or %s/pod instead", key, current,
                container.name, current)
    try:
        data = _load_yaml(text)
    except yaml.YAMLError:
        data = None
    return True, data if isinstance(data, dict) else text


def memory_type_preference(container: ContainerInfo) -> MemoryType | None:
    """The annotated memory types of a container; None if it has none (or an invalid one, logged)."""
    value = preference_annotation(container, MEMORY_TYPE_KEY)
    if value is None:
        found, data = _deprecated_entry(container, DEPRECATED_MEMORY_TYPE_KEY, MEMORY_TYPE_KEY)
        if not found:
            return None
        value = data.get(container.name) if isinstance(data, dict) else data
        if value is None:
            return None
    try:
        return parse_memory_type(str(value))
    except ValueError as exc:
        log.error("%s/%s: invalid memory type annotation %r: %s; ignored", container.pod_name, container.name,
                  value, exc)
        return None


def cold_start_preference(container: ContainerInfo) -> float:
    """The annotated cold start duration in seconds (0: none; an invalid annotation is logged, and 0)."""
    value = preference_annotation(container, COLD_START_KEY)
    data: Any
    if value is not None:
        try:
            data = _load_yaml(value)
        except yaml.YAMLError as exc:
            log.error("invalid cold start annotation %r: %s; ignored", value, exc)
            return 0.0
    else:
        found, entries = _deprecated_entry(container, DEPRECATED_COLD_START_KEY, COLD_START_KEY)
        if not found or not isinstance(entries, dict) or container.name not in entries:
            return 0.0
        data = entries[container.name]
    # upstream decodes {Duration} from YAML via JSON: field names match case-insensitively
    raw = next((v for k, v in data.items() if str(k).lower() == "duration"), None) if isinstance(data, dict) else None
    if raw is None:
        return 0.0
    try:
        seconds = parse_go_duration(raw)
    except ValueError as exc:
        log.error("%s/%s: invalid cold start duration: %s; ignored", container.pod_name, container.name, exc)
        return 0.0
    if seconds < 0 or seconds > MAX_COLD_START:
        log.error("%s/%s: cold start duration %r out of range (0 to 1h); ignored", container.pod_name,
                  container.name, raw)
        return 0.0
    return seconds


@dataclass(frozen=True)
class MemoryRequest:
    kind: MemoryType
    cold_start: float  # seconds; 0: none
    annotated: bool  # memory types were asked for: pools having them rank first


DEFAULT_REQUEST = MemoryRequest(DEFAULT, 0.0, False)


def memory_request(container: ContainerInfo, cold_start_off: bool) -> MemoryRequest:
    """What memory a container asks for (upstream's newRequest)."""
    kind = memory_type_preference(container)
    cold = 0.0
    if kind is None or kind & DEFAULT == DEFAULT:
        cold = cold_start_preference(container)
        if cold and cold_start_off:
            log.error("%s/%s: cold start is off on this node (a PMEM node has no normal memory zone)",
                      container.pod_name, container.name)
            cold = 0.0
    elif kind == MemoryType.PMEM and cold_start_off:
        log.error("%s/%s: PMEM-only asked for, DRAM added (a PMEM node has no normal memory zone)",
                  container.pod_name, container.name)
        kind |= MemoryType.DRAM
    if kind is None:
        return DEFAULT_REQUEST if not cold else MemoryRequest(DEFAULT, cold, False)
    return MemoryRequest(kind, cold, True)


def attach_memory_nodes(topology: Topology, cpu_nodes: Iterable[int]) -> dict[int, frozenset[int]]:
    """Node with CPUs -> the CPU-less memory nodes attached to it (upstream's assignNUMANodes)."""
    targets = sorted(set(cpu_nodes))
    attached: dict[int, set[int]] = {n: set() for n in targets}
    if not targets:
        return {}
    for node in sorted(topology.memory_types):
        if node in topology.nodes or topology.memory_types[node] not in _OF_TOPOLOGY:
            continue
        best = min(topology.distance(node, n) for n in targets)
        closest = [n for n in targets if topology.distance(node, n) == best]
        taker = min(closest, key=lambda n: (len(attached[n]), n))
        attached[taker].add(node)
    return {n: frozenset(s) for n, s in attached.items()}


class Pooled(Protocol):
    mems: frozenset[int]


class PoolMemory:
    """Memory of each pool by type, and which containers are cold-starting.

    Built over the pool tree: each pool's ``mems`` (its nodes with CPUs) becomes its default memory,
    DRAM plus attached PMEM. ``placement`` then only swaps the mems of containers that asked for other
    types or are cold-starting; everyone else keeps the pool's shared placement object.
    """

    def __init__(self, topology: Topology, pools: Mapping[str, Pooled], *,
                 clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        dram = set().union(*(p.mems for p in pools.values())) if pools else set()
        attached = attach_memory_nodes(topology, dram)
        self.memsets: dict[str, dict[MemoryType, frozenset[int]]] = {}
        for name, pool in pools.items():
            extra = [n for d in pool.mems for n in attached.get(d, ())]
            self.memsets[name] = {
                MemoryType.DRAM: frozenset(pool.mems),
                MemoryType.PMEM: frozenset(n for n in extra if topology.memory_types[n] == PMEM),
                MemoryType.HBM: frozenset(n for n in extra if topology.memory_types[n] == HBM),
            }
            pool.mems = self.select(name, DEFAULT)
        self.cold_start_off = any(t == PMEM and topology.normal_memory is not None and n not in topology.normal_memory
                                  for n, t in topology.memory_types.items())
        self.tiered = any(t in _OF_TOPOLOGY for t in topology.memory_types.values())
        self._requests: dict[str, tuple[ContainerInfo, MemoryRequest]] = {}
        self._last: tuple[ContainerInfo | None, MemoryRequest] = (None, DEFAULT_REQUEST)  # decide -> allocate
        self.cold: dict[str, float] = {}  # container id -> when its cold start ends (time.time())
        self.warm: set[str] = set()  # containers whose cold start is over (a re-placement must not restart it)

    def kinds(self, pool: str) -> MemoryType:
        return MemoryType(sum(t for t, nodes in self.memsets[pool].items() if nodes))

    def select(self, pool: str, kind: MemoryType) -> frozenset[int]:
        """The pool's nodes of ``kind``; its DRAM if it has none of them, all its memory if no DRAM."""
        sets = self.memsets[pool]
        for want in (kind, MemoryType.DRAM, ALL):
            mems = frozenset().union(*(nodes for t, nodes in sets.items() if t & want))
            if mems:
                return mems
        return frozenset()

    def request(self, cid: str, container: ContainerInfo) -> MemoryRequest:
        """The container's memory request, parsed once per container object."""
        if not self.tiered:
            return DEFAULT_REQUEST
        hit = self._requests.get(cid)
        if hit is not None and hit[0] is container:
            return hit[1]
        last, req = self._last
        if last is not container:
            req = memory_request(container, self.cold_start_off)
        self._requests[cid] = (container, req)
        if req.cold_start and cid not in self.cold and cid not in self.warm:
            self.cold[cid] = self.clock() + req.cold_start
            log.info("cold start of %s/%s: PMEM only for %.1fs", container.pod_name, container.name, req.cold_start)
        return req

    def lacking(self, container: ContainerInfo, pools: Iterable[str]) -> frozenset[str]:
        """Pools that do not have every memory type the container asked for (they rank after the rest)."""
        if not self.tiered:
            return frozenset()
        req = memory_request(container, self.cold_start_off)
        self._last = (container, req)
        if not req.annotated:
            return frozenset()
        return frozenset(p for p in pools if self.kinds(p) & req.kind != req.kind)

    def mems(self, cid: str, container: ContainerInfo | None, pool: str, default: frozenset[int] | None
             ) -> frozenset[int] | None:
        """cpuset.mems for a container of ``pool``; ``default`` (the pool's, or None: memory not pinned)
        is returned as is for containers that asked for nothing else."""
        if default is None or container is None or not self.tiered:
            return default
        req = self.request(cid, container)
        if cid in self.cold:
            return self.select(pool, MemoryType.PMEM)
        if req.kind == DEFAULT:
            return default
        return self.select(pool, req.kind)

    def finish_cold_start(self, cid: str) -> bool:
        """End ``cid``'s cold start; True if it was cold-starting."""
        if self.cold.pop(cid, None) is None:
            return False
        self.warm.add(cid)
        return True

    def prune(self, live: Container[str]) -> dict[str, float]:
        """Drop the cold start state of containers no longer placed; the cold starts left."""
        self.cold = {cid: t for cid, t in self.cold.items() if cid in live}
        self.warm = {cid for cid in self.warm if cid in live}
        return self.cold

    def forget(self, cid: str) -> None:
        self._requests.pop(cid, None)

    def rename(self, old: str, new: str) -> None:
        if old in self._requests:
            self._requests[new] = self._requests.pop(old)
        if old in self.cold:
            self.cold[new] = self.cold.pop(old)
        if old in self.warm:
            self.warm.discard(old)
            self.warm.add(new)

    def export(self, live: Iterable[str]) -> dict[str, Any]:
        live = set(live)
        return {"cold_start_until": {cid: t for cid, t in self.cold.items() if cid in live}}

    def restore(self, data: Mapping[str, Any], live: Iterable[str]) -> None:
        until = data.get("cold_start_until", {}) if isinstance(data, Mapping) else {}
        if not isinstance(until, Mapping):
            until = {}
        live = set(live)
        self.cold = {str(cid): float(t) for cid, t in until.items()
                     if cid in live and isinstance(t, (int, float)) and not isinstance(t, bool)}
        # Containers restored without a cold start of their own ran already: never start one for them.
        self.warm = live - set(self.cold)
        self._requests.clear()
