"""The ``balloons`` policy: containers run in disjoint CPU pools that grow and shrink.

A balloon has a type (``BalloonTypes``), a set of CPUs, and containers. A
container's balloon type comes from the balloon annotation, else from the first
type whose ``Namespaces`` match, else ``reserved`` for ``ReservedPoolNamespaces``
(kube-system by default), else ``default``. Balloons are sized to the sum of
their containers' CPU requests, within ``MinCPUs``..``MaxCPUs``; ``MinBalloons``
instances always exist, and more are created up to ``MaxBalloons``. CPUs of
different balloons never overlap and never include reserved CPUs (the reserved
balloon is the reserved CPUs). A balloon that owns no CPUs yet (``MinCPUs: 0``,
only BestEffort containers) runs its containers on the reserved CPUs.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from resmgr.config import ConfigError
from resmgr.manager.resources import ContainerInfo, preference_annotation
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

BALLOON_KEY = "balloon.balloons.cri-resource-manager.intel.com"
RESERVED = "reserved"
DEFAULT = "default"


@dataclass
class BalloonType:
    name: str
    min_cpus: int = 0
    max_cpus: int = 0  # 0: unlimited
    min_balloons: int = 0
    max_balloons: int = 0  # 0: unlimited
    namespaces: list[str] = field(default_factory=list)
    priority: int = 0
    prefer_new: bool = False
    prefer_spreading_pods: bool = False
    cpu_class: str = ""  # CPU class of the balloon's CPUs (resmgr.control.cpu_classes)

    @classmethod
    def from_config(cls, bt: dict[str, Any]) -> BalloonType:
        return cls(name=bt["Name"], min_cpus=bt.get("MinCPUs", 0), max_cpus=bt.get("MaxCPUs", 0),
                   min_balloons=bt.get("MinBalloons", 0), max_balloons=bt.get("MaxBalloons", 0),
                   namespaces=list(bt.get("Namespaces", [])), priority=bt.get("AllocatorPriority", 0),
                   prefer_new=bt.get("PreferNewBalloons", False),
                   prefer_spreading_pods=bt.get("PreferSpreadingPods", False), cpu_class=bt.get("CPUClass", ""))


@dataclass
class Balloon:
    name: str  # "<type>[<instance>]"
    type: str
    cpus: frozenset[int] = frozenset()
    members: dict[str, int] = field(default_factory=dict)  # container id -> requested milli
    pods: Counter = field(default_factory=Counter)  # pod id -> containers here (for pod affinity)
    requested: int = 0  # sum of the members' requests

    def add(self, cid: str, milli: int, pod_id: str) -> None:
        self.remove(cid, pod_id)
        self.members[cid] = milli
        self.pods[pod_id] += 1
        self.requested += milli

    def remove(self, cid: str, pod_id: str) -> None:
        milli = self.members.pop(cid, None)
        if milli is None:
            return
        self.requested -= milli
        self.pods[pod_id] -= 1
        if self.pods[pod_id] <= 0:
            del self.pods[pod_id]


class BalloonsPolicy(PooledPolicy):
    name = "balloons"
    description = "Disjoint CPU balloons per workload type, inflated and deflated with their containers."

    def setup(self) -> None:
        section = self.config.get("policy", {}).get("balloons", {})
        self.pin_cpu = section.get("PinCPU", True)
        self.pin_memory = section.get("PinMemory", True)
        self.reserved_namespaces = list(section.get("ReservedPoolNamespaces", ["kube-system"]))
        self.idle_cpu_class = section.get("IdleCPUClass", "")
        res = resolve_cpu_resources(self.config, self.topology, sysfs_root=self.sysfs_root)
        self.available, self.reserved = res.available, res.reserved
        self.types: dict[str, BalloonType] = {}
        for bt in section.get("BalloonTypes", []):
            self.types[bt["Name"]] = BalloonType.from_config(bt)
        if DEFAULT not in self.types:
            self.types[DEFAULT] = BalloonType(name=DEFAULT, min_balloons=1, max_balloons=1)
        self.balloons: dict[str, Balloon] = {}
        self._placement_memo = PlacementMemo(self.topology, self.pin_cpu, self.pin_memory)
        self._free = set(self.available - self.reserved)
        self._create_min_balloons()

    def _create_min_balloons(self) -> None:
        wanted = 0
        for index, bt in enumerate(self.config.get("policy", {}).get("balloons", {}).get("BalloonTypes", [])):
            wanted += bt.get("MinBalloons", 0) * bt.get("MinCPUs", 0)
            if bt["Name"] != RESERVED and wanted > len(self._free):
                raise ConfigError(f"policy.balloons.BalloonTypes[{index}].MinBalloons",
                                  f"MinBalloons x MinCPUs of the balloon types up to this one need {wanted} "
                                  f"CPUs, but only {len(self._free)} are available outside the reserved CPUs")
        for t in sorted(self.types.values(), key=lambda t: (t.priority, t.name)):
            if t.name == RESERVED:
                continue
            for _ in range(t.min_balloons):
                self._new_balloon(t)

    # -- balloon bookkeeping --------------------------------------------------------------
    def _instances(self, type_name: str) -> list[Balloon]:
        return [b for b in self.balloons.values() if b.type == type_name]

    def _new_balloon(self, t: BalloonType) -> Balloon | None:
        used = {int(b.name.rsplit("[", 1)[1][:-1]) for b in self._instances(t.name)}
        index = next(i for i in range(len(used) + 1) if i not in used)
        if t.min_cpus > len(self._free):
            return None
        balloon = Balloon(name=f"{t.name}[{index}]", type=t.name)
        self.balloons[balloon.name] = balloon
        self._resize(balloon, t.min_cpus)
        return balloon

    def _target_size(self, balloon: Balloon) -> int:
        t = self.types[balloon.type]
        size = max(t.min_cpus, math.ceil(balloon.requested / 1000))
        return min(size, t.max_cpus) if t.max_cpus else size

    def _resize(self, balloon: Balloon, size: int) -> None:
        current = len(balloon.cpus)
        if size > current:
            grow = min(size - current, len(self._free))
            if grow < size - current:
                log.warning("balloons: %s needs %d more CPUs, only %d free", balloon.name,
                            size - current, len(self._free))
            cpus = take_cpus(self.topology, self._free, grow, near=balloon.cpus)
            self._free -= cpus
            balloon.cpus = balloon.cpus | cpus
        elif size < current:
            cpus = release_cpus(self.topology, balloon.cpus, current - size)
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
        for t in self.types.values():
            if t.name not in (RESERVED, DEFAULT) and namespace_matches(c.namespace, t.namespaces):
                return t.name
        reserved = self.types.get(RESERVED)  # a "reserved" type may list more namespaces
        if is_reserved_namespace(c, self.reserved_namespaces + (reserved.namespaces if reserved else [])):
            return RESERVED
        return DEFAULT

    def _choose_balloon(self, t: BalloonType, c: ContainerInfo) -> Balloon:
        instances = self._instances(t.name)

        def capacity(b: Balloon) -> int:
            limit = t.max_cpus * 1000 if t.max_cpus else (len(b.cpus) + len(self._free)) * 1000
            return limit - b.requested

        fits = [b for b in instances if capacity(b) >= c.request_milli]
        can_create = not t.max_balloons or len(instances) < t.max_balloons
        if t.prefer_new and can_create and not any(c.pod_id in b.pods for b in fits):
            new = self._new_balloon(t)
            if new is not None:
                return new
        if fits:
            def rank(b: Balloon) -> tuple:
                same_pod = c.pod_id in b.pods
                spare = len(b.cpus) * 1000 - b.requested
                return (t.prefer_spreading_pods or not same_pod, spare < c.request_milli, -spare, b.name)
            return min(fits, key=rank)
        if can_create:
            new = self._new_balloon(t)
            if new is not None:
                return new
        if instances:
            log.warning("balloons: no room for %s/%s in balloons of type %s; overcommitting",
                        c.pod_name, c.name, t.name)
            return min(instances, key=lambda b: (b.requested - len(b.cpus) * 1000, b.name))
        raise RuntimeError(f"cannot create a balloon of type {t.name}: no free CPUs")

    # -- policy hooks ----------------------------------------------------------------------------
    def decide(self, c: ContainerInfo) -> Grant:
        type_name = self._balloon_type_for(c)
        if type_name == RESERVED:
            return Grant(pool=RESERVED, kind="reserved", shared_milli=c.request_milli)
        try:
            balloon = self._choose_balloon(self.types[type_name], c)
        except RuntimeError as exc:
            log.warning("balloons: %s; %s/%s runs on the reserved CPUs", exc, c.pod_name, c.name)
            return Grant(pool=RESERVED, kind="reserved", shared_milli=c.request_milli)
        return Grant(pool=balloon.name, kind="balloon", shared_milli=c.request_milli)

    def allocate(self, cid: str, container: ContainerInfo) -> None:
        super().allocate(cid, container)
        grant = self.grants[cid]
        balloon = self.balloons.get(grant.pool)
        if balloon is not None:
            balloon.add(cid, container.request_milli, container.pod_id)
            self._resize(balloon, self._target_size(balloon))

    def on_release(self, cid: str, grant: Grant) -> None:
        balloon = self.balloons.get(grant.pool)
        if balloon is None:
            return
        container = self.containers.get(cid)
        balloon.remove(cid, container.pod_id if container is not None else "")
        t = self.types[balloon.type]
        if not balloon.members and len(self._instances(t.name)) > t.min_balloons:
            self._resize(balloon, 0)
            del self.balloons[balloon.name]
        else:
            self._resize(balloon, self._target_size(balloon))

    def on_rename(self, old: str, new: str) -> None:
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
        return {"balloons": [{"name": b.name, "type": b.type, "cpus": format_cpuset(b.cpus),
                              "members": dict(b.members)} for b in self.balloons.values()]}

    def restore_extra(self, data: dict[str, Any]) -> None:
        balloons: dict[str, Balloon] = {}
        free = set(self.available - self.reserved)
        try:
            for item in data.get("balloons", []):
                b = Balloon(name=str(item["name"]), type=str(item["type"]), cpus=parse_cpuset(str(item["cpus"])))
                for cid, milli in item.get("members", {}).items():
                    if cid in self.grants and cid in self.containers:
                        b.add(cid, int(milli), self.containers[cid].pod_id)
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
        for t in self.types.values():  # a config change may have raised MinBalloons
            if t.name != RESERVED:
                while len(self._instances(t.name)) < t.min_balloons and self._new_balloon(t) is not None:
                    pass
