"""The ``balloons`` policy: containers run in disjoint CPU pools that grow and shrink.

A balloon has a type (``BalloonTypes``), a set of CPUs, and containers. A
container's balloon type comes from the balloon annotation, else ``reserved`` for
``kube-system`` and ``ReservedPoolNamespaces``, else from the first type whose
``Namespaces`` match (``reserved``, ``default``, then the others in config order),
else ``default``. Within its type a container goes where upstream's fill methods
put it (``_fill``): its pod's balloon, its namespace's (``PreferPerNamespaceBalloon``),
a new or still empty instance, the instance with the most free CPU, then the one
that can inflate the most; if none can take it, the policy leaves it alone (it
runs unpinned, logged). Balloons are sized to the sum of their containers' CPU
requests (at least one CPU while they have containers), within
``MinCPUs``..``MaxCPUs``; ``MinBalloons`` instances always exist, more are created
up to ``MaxBalloons``. Where a balloon grows or shrinks is upstream's CPU tree
(``resmgr.policy.cpu_tree``: packing, or spreading with
``AllocatorTopologyBalancing``/``PreferSpreadOnPhysicalCores``). CPUs of different
balloons never overlap and never include reserved CPUs (the reserved balloon is the
reserved CPUs). A balloon that owns no CPUs (none were free) runs its containers on
the reserved CPUs. A config change that changes the balloons (anything but CPU
classes) rebuilds them and assigns every container again, as upstream.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from resmgr.config import ConfigError
from resmgr.config.sections import BalloonsSection
from resmgr.model.explanation import NO_BALLOON, PREFERS_RESERVED, RESERVED_NAMESPACE
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
from resmgr.policy.cpu_allocator import Prefer, take_cpus
from resmgr.policy.cpu_tree import CpuTree
from resmgr.topology.cpuset import format_cpuset, parse_cpuset

BALLOON_KEY = "balloon.balloons.cri-resource-manager.intel.com"
RESERVED = "reserved"
DEFAULT = "default"
OPTIONS_KEY = "options"  # export_extra: the balloons options the balloons were built from
LEFT_ALONE_KEY = "left_alone"  # export_extra: containers no balloon could take (they run unpinned)


@dataclass
class BalloonType:
    name: str
    min_cpus: int = 0
    max_cpus: int = 0  # 0: unlimited
    min_balloons: int = 0
    max_balloons: int = 0  # 0: unlimited
    namespaces: list[str] = field(default_factory=list)
    priority: int = 0  # AllocatorPriority (0 high .. 3 none): the CPU allocator prefers CPUs of this priority
    prefer_new: bool = False
    prefer_spreading_pods: bool = False
    prefer_per_namespace: bool = False
    cpu_class: str = ""  # CPU class of the balloon's CPUs (resmgr.control.cpu_classes)
    topology_balancing: bool = False  # the CPU tree spreads this type's balloons (else packs them)
    spread_on_cores: bool = False  # the CPU tree puts this type's CPUs on separate physical cores first

    @classmethod
    def from_config(cls, bt: Mapping[str, Any], section: BalloonsSection) -> BalloonType:
        """A type from its config entry; the allocator options default to the section's (upstream)."""
        return cls(name=bt["Name"], min_cpus=bt.get("MinCPUs", 0), max_cpus=bt.get("MaxCPUs", 0),
                   min_balloons=bt.get("MinBalloons", 0), max_balloons=bt.get("MaxBalloons", 0),
                   namespaces=list(bt.get("Namespaces", [])), priority=bt.get("AllocatorPriority", 0),
                   prefer_new=bt.get("PreferNewBalloons", False),
                   prefer_spreading_pods=bt.get("PreferSpreadingPods", False),
                   prefer_per_namespace=bt.get("PreferPerNamespaceBalloon", False), cpu_class=bt.get("CPUClass", ""),
                   topology_balancing=bt.get("AllocatorTopologyBalancing", section.allocator_topology_balancing),
                   spread_on_cores=bt.get("PreferSpreadOnPhysicalCores", section.prefer_spread_on_physical_cores))


@dataclass
class Balloon:
    name: str  # "<type>[<instance>]"
    type: str
    cpus: frozenset[int] = frozenset()
    members: dict[str, int] = field(default_factory=dict)  # container id -> requested milli
    pods: Counter = field(default_factory=Counter)  # pod id -> containers here (fill method "same pod")
    namespaces: Counter = field(default_factory=Counter)  # namespace -> containers here ("same namespace")
    requested: int = 0  # sum of the members' requests

    def add(self, cid: str, milli: int, pod_id: str, namespace: str) -> None:
        self.remove(cid, pod_id, namespace)
        self.members[cid] = milli
        self.pods[pod_id] += 1
        self.namespaces[namespace] += 1
        self.requested += milli

    def remove(self, cid: str, pod_id: str, namespace: str) -> None:
        milli = self.members.pop(cid, None)
        if milli is None:
            return
        self.requested -= milli
        for counter, key in ((self.pods, pod_id), (self.namespaces, namespace)):
            counter[key] -= 1
            if counter[key] <= 0:
                del counter[key]


# Defaults of the section's options: written out or left out, the balloons are the same.
SECTION_DEFAULTS: dict[str, Any] = {"PinCPU": True, "PinMemory": True, "ReservedPoolNamespaces": ["kube-system"],
                                    "AllocatorTopologyBalancing": False, "PreferSpreadOnPhysicalCores": False}
TYPE_INHERITED = ("AllocatorTopologyBalancing", "PreferSpreadOnPhysicalCores")  # unset: the section's value


def options_key(section: dict[str, Any]) -> str:
    """What decides the balloons and who is in them: the section without CPU class names and defaults
    (upstream's changesBalloons). Equal keys: a config change keeps the balloons; different: every container
    is assigned again."""
    kept = {k: v for k, v in section.items() if k != "IdleCPUClass" and SECTION_DEFAULTS.get(k, ...) != v}
    kept["BalloonTypes"] = [{k: v for k, v in bt.items() if k != "CPUClass" and (v or k in TYPE_INHERITED)}
                            for bt in section.get("BalloonTypes", [])]
    return json.dumps(kept, sort_keys=True, default=str)


class BalloonsPolicy(PooledPolicy):
    name = "balloons"
    description = "Disjoint CPU balloons per workload type, inflated and deflated with their containers."
    unplaced_reason = NO_BALLOON

    def setup(self) -> None:
        section = self.policy_config.balloons
        self.pin_cpu, self.pin_memory = section.pin_cpu, section.pin_memory
        self.reserved_namespaces = list(section.reserved_pool_namespaces)
        self.idle_cpu_class = section.idle_cpu_class
        self._options_key = options_key(section.raw)
        res = resolve_cpu_resources(self.policy_config, self.topology, sysfs_root=self.sysfs_root)
        self.available, self.reserved = res.available, res.reserved
        self.types: dict[str, BalloonType] = {}  # config order (namespace matching, MinBalloons)
        for bt in section.balloon_types:
            self.types[bt["Name"]] = BalloonType.from_config(bt, section)
        if DEFAULT not in self.types:
            self.types[DEFAULT] = BalloonType(name=DEFAULT, min_balloons=1, max_balloons=1)
        self._trees: dict[tuple[bool, bool], CpuTree] = {}
        self.balloons: dict[str, Balloon] = {}
        self._placement_memo = PlacementMemo(self.topology, self.pin_cpu, self.pin_memory)
        self._free = set(self.available - self.reserved)
        self._left_alone: set[str] = set()  # containers no balloon could take: no grant, unpinned
        self._keep_left_alone: set[str] = set()  # restored from the cache: a restore must not place them now
        self._create_min_balloons()

    def _create_min_balloons(self) -> None:
        wanted = 0
        for index, bt in enumerate(self.policy_config.balloons.balloon_types):
            wanted += bt.get("MinBalloons", 0) * bt.get("MinCPUs", 0)
            if bt["Name"] != RESERVED and wanted > len(self._free):
                raise ConfigError(f"policy.balloons.BalloonTypes[{index}].MinBalloons",
                                  f"MinBalloons x MinCPUs of the balloon types up to this one need {wanted} "
                                  f"CPUs, but only {len(self._free)} are available outside the reserved CPUs")
        for t in self._types_in_creation_order():
            for _ in range(t.min_balloons):
                self._new_balloon(t)

    def _types_in_creation_order(self) -> list[BalloonType]:
        """Upstream's order: the default balloon first, then the types in config order."""
        return sorted((t for t in self.types.values() if t.name != RESERVED), key=lambda t: t.name != DEFAULT)

    # -- balloon bookkeeping --------------------------------------------------------------
    def _instances(self, type_name: str) -> list[Balloon]:
        return [b for b in self.balloons.values() if b.type == type_name]

    def _tree(self, t: BalloonType) -> CpuTree:
        key = (t.topology_balancing, t.spread_on_cores)
        tree = self._trees.get(key)
        if tree is None:
            tree = self._trees[key] = CpuTree(self.topology, balancing=key[0], spread_cores=key[1])
        return tree

    def _new_balloon(self, t: BalloonType) -> Balloon | None:
        """A new instance with its MinCPUs; None if MaxBalloons is reached or the CPUs are not free."""
        instances = self._instances(t.name)
        if t.max_balloons and len(instances) >= t.max_balloons:
            return None
        used = {int(b.name.rsplit("[", 1)[1][:-1]) for b in instances}
        index = next(i for i in range(len(used) + 1) if i not in used)
        if t.min_cpus > len(self._free):
            return None
        balloon = Balloon(name=f"{t.name}[{index}]", type=t.name)
        self.balloons[balloon.name] = balloon
        self._resize(balloon, t.min_cpus)
        return balloon

    def _delete(self, balloon: Balloon) -> None:
        self._resize(balloon, 0)
        del self.balloons[balloon.name]

    def _target_size(self, balloon: Balloon) -> int:
        """Upstream's size: the members' requests, at least one CPU while there are members, within Min/MaxCPUs."""
        t = self.types[balloon.type]
        size = math.ceil(max(1 if balloon.members else 0, balloon.requested) / 1000)
        size = max(t.min_cpus, size)
        return min(size, t.max_cpus) if t.max_cpus else size

    def _resize(self, balloon: Balloon, size: int) -> None:
        current = len(balloon.cpus)
        tree = self._tree(self.types[balloon.type])
        if size > current:
            grow = min(size - current, len(self._free))
            if grow < size - current:
                log.warning("balloons: %s needs %d more CPUs, only %d free", balloon.name,
                            size - current, len(self._free))
            if not grow:
                return
            candidates = tree.grow(balloon.cpus, self._free, grow)
            cpus = candidates if len(candidates) == grow else take_cpus(
                self.topology, candidates, grow, prefer=Prefer(self.types[balloon.type].priority))
            self._free -= cpus
            balloon.cpus = balloon.cpus | cpus
        elif size < current:
            cpus = tree.shrink(balloon.cpus, self._free, current - size)
            balloon.cpus = balloon.cpus - cpus
            self._free |= cpus

    def _balloon_type_for(self, c: ContainerInfo) -> str:
        wanted = preference_annotation(c, BALLOON_KEY)
        if wanted:
            if wanted == RESERVED or wanted in self.types:
                return wanted
            log.warning("balloons: %s/%s asks for unknown balloon type %r; using %s",
                        c.pod_name, c.name, wanted, DEFAULT)
            return DEFAULT
        if is_reserved_namespace(c, self.reserved_namespaces):
            return RESERVED
        # Upstream's order: the reserved and the default type's namespaces first, then the others'.
        for t in sorted(self.types.values(), key=lambda t: {RESERVED: 0, DEFAULT: 1}.get(t.name, 2)):
            if namespace_matches(c.namespace, t.namespaces):
                return t.name
        return DEFAULT

    # -- upstream's fill methods (chooseBalloonInstance) -----------------------------------
    def _max_free(self, b: Balloon) -> int:
        """Milli-CPUs ``b`` could still take, inflated as far as its MaxCPUs or the free CPUs allow."""
        t = self.types[b.type]
        limit = t.max_cpus * 1000 if t.max_cpus else (len(b.cpus) + len(self._free)) * 1000
        return limit - b.requested

    def _same_pod(self, t: BalloonType, c: ContainerInfo) -> Balloon | None:
        # As upstream: any balloon of the pod, whatever its type.
        return next((b for b in self.balloons.values()
                     if c.pod_id in b.pods and self._max_free(b) >= c.request_milli), None)

    def _same_namespace(self, t: BalloonType, c: ContainerInfo) -> Balloon | None:
        return next((b for b in self._instances(t.name)
                     if c.namespace in b.namespaces and self._max_free(b) >= c.request_milli), None)

    def _new_or_empty(self, t: BalloonType, c: ContainerInfo) -> Balloon | None:
        empty = next((b for b in self._instances(t.name) if not b.pods), None)
        if empty is not None:  # a MinBalloons instance (or one kept) without pods comes first
            return empty
        new = self._new_balloon(t)
        if new is not None and self._max_free(new) < c.request_milli:
            self._delete(new)  # it could never hold the container
            return None
        return new

    def _balanced(self, t: BalloonType, c: ContainerInfo) -> Balloon | None:
        """The instance with the most free CPU without inflating (the first of equals)."""
        instances = self._instances(t.name)
        best = max(instances, key=lambda b: len(b.cpus) * 1000 - b.requested, default=None)
        return best if best is not None and len(best.cpus) * 1000 - best.requested >= c.request_milli else None

    def _balanced_inflate(self, t: BalloonType, c: ContainerInfo) -> Balloon | None:
        """The instance with the most free CPU once inflated."""
        best = max(self._instances(t.name), key=self._max_free, default=None)
        return best if best is not None and self._max_free(best) >= c.request_milli else None

    def _fill(self, t: BalloonType, c: ContainerInfo) -> Balloon | None:
        """Upstream's fill chain (allocateBalloonOfDef): the first method that finds an instance decides."""
        FillMethod = Callable[[BalloonType, ContainerInfo], Balloon | None]
        chain: list[FillMethod] = [] if t.prefer_spreading_pods else [self._same_pod]
        if t.prefer_per_namespace:
            chain += [self._same_namespace, self._new_or_empty]
        if t.prefer_new:
            chain += [self._new_or_empty, self._balanced, self._balanced_inflate]
        else:
            chain += [self._balanced, self._balanced_inflate, self._new_or_empty]
        for method in chain:
            balloon = method(t, c)
            if balloon is not None:
                return balloon
        return None

    # -- policy hooks ----------------------------------------------------------------------------
    def decide(self, c: ContainerInfo) -> Grant | None:
        type_name = self._balloon_type_for(c)
        if type_name == RESERVED:
            why = RESERVED_NAMESPACE if is_reserved_namespace(c, self.reserved_namespaces) else PREFERS_RESERVED
            return Grant(pool=RESERVED, kind="reserved", shared_milli=c.request_milli, unpinned=why)
        t = self.types[type_name]
        if type_name == DEFAULT:  # upstream: the one default balloon, whatever fits
            balloon = next(iter(self._instances(DEFAULT)), None) or self._new_balloon(t)
        else:
            balloon = self._fill(t, c)
        if balloon is None:
            # Upstream fails the container; here the policy leaves it alone and it runs unpinned.
            log.warning("balloons: no suitable balloon instance available for %s/%s (%dm, balloon type %s); "
                        "it runs unpinned", c.pod_name, c.name, c.request_milli, type_name)
            return None
        return Grant(pool=balloon.name, kind="balloon", shared_milli=c.request_milli)

    def allocate(self, cid: str, container: ContainerInfo) -> None:
        if cid in self._keep_left_alone:
            # Left alone before a restart: placing it now (a balloon may have room since) would move it
            # at the restart; it is placed again only when something is decided about it.
            self._keep_left_alone.discard(cid)
            self.state.place(cid, container)
            return
        super().allocate(cid, container)
        grant = self.grants.get(cid)
        if grant is None:
            self._left_alone.add(cid)
            return
        self._left_alone.discard(cid)
        balloon = self.balloons.get(grant.pool)
        if balloon is not None:
            balloon.add(cid, container.request_milli, container.pod_id, container.namespace)
            self._resize(balloon, self._target_size(balloon))

    def release(self, cid: str) -> None:
        super().release(cid)
        self._left_alone.discard(cid)
        self._keep_left_alone.discard(cid)

    def on_release(self, cid: str, grant: Grant) -> None:
        balloon = self.balloons.get(grant.pool)
        if balloon is None:
            return
        container = self.containers.get(cid)
        balloon.remove(cid, container.pod_id if container is not None else "",
                       container.namespace if container is not None else "")
        t = self.types[balloon.type]
        if not balloon.members and len(self._instances(t.name)) > t.min_balloons:
            self._delete(balloon)
        else:
            self._resize(balloon, self._target_size(balloon))

    def on_rename(self, old: str, new: str) -> None:
        if old in self._left_alone:
            self._left_alone.discard(old)
            self._left_alone.add(new)
        for balloon in self.balloons.values():
            if old in balloon.members:
                balloon.members[new] = balloon.members.pop(old)

    def group_placement(self, key: str) -> Placement:
        balloon = self.balloons.get(key)
        cpus = balloon.cpus if balloon is not None and balloon.cpus else self.reserved
        return self._placement_memo(cpus)  # one placement tuple per cpuset: cheap diffs

    def group_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {name: b.cpus for name, b in self.balloons.items()}
        state[RESERVED] = self.reserved
        return state

    def cpu_classes(self) -> dict[str, frozenset[int]]:
        """Upstream's rule: a balloon's CPUs are in its type's CPUClass, the free CPUs in IdleCPUClass."""
        classes: dict[str, set[int]] = {}
        reserved = self.types.get(RESERVED)
        for name, cpus in ((self.idle_cpu_class, self._free), (reserved.cpu_class if reserved else "", self.reserved),
                           *((self.types[b.type].cpu_class, b.cpus) for b in self.balloons.values())):
            if name and cpus:
                classes.setdefault(name, set()).update(cpus)
        return {name: frozenset(cpus) for name, cpus in classes.items()}

    def exclusive_sets(self) -> dict[str, frozenset[int]]:
        return {name: b.cpus for name, b in self.balloons.items() if b.cpus}

    def pool_cpus(self) -> dict[str, frozenset[int]]:
        return {RESERVED: self.reserved, **{name: b.cpus for name, b in self.balloons.items()}}

    def export_extra(self) -> dict[str, Any]:
        extra: dict[str, Any] = {OPTIONS_KEY: self._options_key,
                                 "balloons": [{"name": b.name, "type": b.type, "cpus": format_cpuset(b.cpus),
                                               "members": dict(b.members)} for b in self.balloons.values()]}
        if self._left_alone:
            extra[LEFT_ALONE_KEY] = sorted(self._left_alone)
        return extra

    def export_cached(self, keep: Callable[[str], bool]) -> dict[str, Any]:
        extra = self.export_extra()
        for b in extra["balloons"]:
            b["members"] = {cid: v for cid, v in b["members"].items() if keep(cid)}
        return extra

    def restore_extra(self, data: dict[str, Any]) -> None:
        cached = data.get(OPTIONS_KEY)
        if cached is not None and cached != self._options_key:
            # Upstream rebuilds the balloons and assigns every container again when they change; only
            # CPU class names keep the balloons. (A cache from before this key keeps its balloons.)
            raise RestoreError("the balloons options changed: every container is assigned again, as upstream")
        balloons: dict[str, Balloon] = {}
        free = set(self.available - self.reserved)
        try:
            for item in data.get("balloons", []):
                b = Balloon(name=str(item["name"]), type=str(item["type"]), cpus=parse_cpuset(str(item["cpus"])))
                for cid, milli in item.get("members", {}).items():
                    if cid in self.grants and cid in self.containers:
                        c = self.containers[cid]
                        b.add(cid, int(milli), c.pod_id, c.namespace)
                if b.type not in self.types:
                    raise RestoreError(f"cached balloon {b.name} has unknown type {b.type}")
                if b.cpus - free:
                    raise RestoreError(f"cached balloon {b.name} CPUs {format_cpuset(b.cpus)} overlap "
                                       f"reserved, unavailable or other balloons' CPUs")
                free -= b.cpus
                balloons[b.name] = b
        except (KeyError, TypeError, ValueError) as exc:
            raise RestoreError(f"malformed cached balloons: {exc}") from None
        for cid, g in self.grants.items():
            if g.pool != RESERVED and cid not in balloons.get(g.pool, Balloon("", "")).members:
                raise RestoreError(f"cached grant of {cid} names balloon {g.pool} which does not hold it")
        self.balloons = balloons
        self._free = free
        left_alone = data.get(LEFT_ALONE_KEY) or []
        self._left_alone = {cid for cid in left_alone if cid in self.containers and cid not in self.grants}
        self._keep_left_alone = set(self._left_alone)
        for t in self._types_in_creation_order():  # a cache from before may have fewer than MinBalloons
            while len(self._instances(t.name)) < t.min_balloons and self._new_balloon(t) is not None:
                pass
