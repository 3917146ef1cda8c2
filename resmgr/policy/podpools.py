"""The ``podpools`` policy: every container of a pod runs on its pod's pool instance.

Pool types (``policy.podpools.Pools``) are turned into pool instances once, when the policy is
set up: each instance (``<name>[<i>]``) owns ``CPU`` CPUs that no other pool uses, picked by the
CPU allocator in definition order as upstream lays them out, and takes at most ``MaxPods`` pods
(0: any number; -1: none). A pod picks its type with the pod annotation
``pool.podpools.cri-resource-manager.intel.com`` (also ``.../pod``); unannotated kube-system
pods go to the built-in ``reserved`` pool (the ReservedResources CPUs), every other pod to the
built-in ``default`` pool (the CPUs no pool took, or the reserved CPUs if none are left). The
first container of a pod chooses the instance by the type's ``FillOrder`` (Balanced: fewest
pods, Packed: most pods, FirstFree: the first with room); the pod's other containers follow it.
A pod whose type has no instance with room runs in the default pool. Pool CPUs never change at
runtime, so containers never move; CPU requests are only checked and logged, as upstream does:
a pool whose pods request more than its CPUs is overbooked, and a pod of a pool with MaxPods
should request CPU/MaxPods in total. As upstream, Available- and ReservedResources are fixed when
the policy is created (at start): a config update lays its pools out again on the same CPUs.
"""

from __future__ import annotations

import secrets
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from resmgr.config import ConfigError
from resmgr.config.pool_sizes import parse_instances, parse_pool_cpus
from resmgr.config.sections import PodpoolsSection
from resmgr.model.resources import KUBE_SYSTEM, ContainerInfo
from resmgr.policy.base import (
    Grant,
    Placement,
    PlacementMemo,
    PooledPolicy,
    RestoreError,
    log,
    resolve_cpu_resources,
)
from resmgr.policy.cpu_allocator import Prefer, take_cpus
from resmgr.topology.cpuset import CpusetError, format_cpuset, parse_cpuset
from resmgr.topology.model import Topology

POOL_KEY = "pool.podpools.cri-resource-manager.intel.com"
RESERVED = "reserved"
DEFAULT = "default"
BALANCED, PACKED, FIRST_FREE = "Balanced", "Packed", "FirstFree"
# Upstream's allowance (milli-CPU per pod) for rounding when container requests should add up
# to the pool's CPUs per pod: +-0.5m for each of up to 20 containers.
POD_MILLI_MARGIN = 10
RECENT_LIMIT = 4096
# Identifies this process in exported state: a state exported by it is a live reconfiguration, where the
# policy keeps its CPU resources (see PodpoolsPolicy._keep_resources); a cached one is a restart.
PROCESS_TOKEN = secrets.token_hex(8)


@dataclass
class PoolType:
    name: str
    max_pods: int = 0  # 0: unlimited, -1: no pods
    fill_order: str = BALANCED


@dataclass
class Pool:
    type: PoolType
    instance: int
    cpus: frozenset[int]
    kind: str  # the grants' kind: "reserved", "shared" (default pool) or "pool"
    placement: Placement = (None, None)
    members: dict[str, tuple[str, int]] = field(default_factory=dict)  # container id -> (pod id, milli)
    pods: Counter = field(default_factory=Counter)  # pod id -> its containers here
    requested: int = 0  # milli-CPU requested by the members

    @property
    def name(self) -> str:
        return f"{self.type.name}[{self.instance}]"

    def has_room(self) -> bool:
        return self.type.max_pods == 0 or len(self.pods) < self.type.max_pods


def _pool_size(pool: dict[str, Any], field_path: str, free: int) -> tuple[int, int]:
    """(instances, CPUs per instance) of a ``Pools`` entry; ConfigError names the field."""
    try:
        cpus = parse_pool_cpus(pool.get("CPU"))
    except ValueError as exc:
        raise ConfigError(f"{field_path}.CPU", str(exc)) from None
    try:
        return parse_instances(pool.get("Instances")).count(cpus, free), cpus
    except ValueError as exc:
        raise ConfigError(f"{field_path}.Instances", str(exc)) from None


def _sized(pool: dict[str, Any]) -> bool:
    return pool.get("CPU") not in (None, "") or pool.get("Instances") not in (None, "")


def build_pools(section: PodpoolsSection, topology: Topology, available: frozenset[int],
                reserved: frozenset[int]) -> list[Pool]:
    """The reserved pool, the default pool and every instance of the user's pool types, in that order."""
    reserved_type, default_type = PoolType(RESERVED), PoolType(DEFAULT)
    default_cpus = reserved
    free = set(available - reserved)
    defs = list(enumerate(section.pools))
    path = "policy.podpools.Pools"
    # The built-in pools first: a customised default pool takes its CPUs before the user's pools.
    for i, d in defs:
        where = f"{path}[{i}]"
        if d["Name"] == RESERVED:
            if _sized(d):
                count, cpus = _pool_size(d, where, len(free))
                if count != 1:
                    raise ConfigError(f"{where}.Instances", "the reserved pool has exactly one instance")
                if cpus != len(reserved):
                    raise ConfigError(f"{where}.CPU", f"the reserved pool's CPUs are the ReservedResources "
                                                      f"({len(reserved)}), not {cpus}")
            reserved_type.max_pods = d.get("MaxPods", 0)
        elif d["Name"] == DEFAULT:
            if _sized(d):
                count, cpus = _pool_size(d, where, len(free))
                if count != 1:
                    raise ConfigError(f"{where}.Instances", "the default pool has exactly one instance")
                if cpus > len(free):
                    raise ConfigError(f"{where}.CPU", f"{cpus} CPUs wanted for the default pool, only {len(free)} "
                                                      f"are neither reserved nor unavailable")
                default_cpus = take_cpus(topology, free, cpus, prefer=Prefer.NORMAL)
                free -= default_cpus
            default_type.max_pods = d.get("MaxPods", 0)
    pools = [Pool(reserved_type, 0, reserved, "reserved"), Pool(default_type, 0, default_cpus, "shared")]
    budget = len(free)  # what "Instances: N %" refers to
    for i, d in defs:
        if d["Name"] in (RESERVED, DEFAULT):
            continue
        where = f"{path}[{i}]"
        count, cpus = _pool_size(d, where, budget)
        if count == 0:
            raise ConfigError(f"{where}.Instances", f"no instance to create: {d.get('Instances')!r} gives 0 instances "
                                                    f"of {cpus} CPUs ({budget} CPUs are left for pools)")
        fill = d.get("FillOrder", BALANCED)
        if count > 1 and fill == PACKED and d.get("MaxPods", 0) == 0:
            raise ConfigError(f"{where}.MaxPods", f"{count - 1} instance(s) unreachable: FillOrder Packed fills "
                                                  f"the first instance forever when MaxPods is 0 (unlimited)")
        t = PoolType(d["Name"], d.get("MaxPods", 0), fill)
        for instance in range(count):
            if cpus > len(free):
                raise ConfigError(f"{where}.Instances", f"insufficient CPUs for {t.name}[{instance}]: it needs "
                                                        f"{cpus}, {len(free)} are left")
            taken = take_cpus(topology, free, cpus, prefer=Prefer.NORMAL)
            free -= taken
            pools.append(Pool(t, instance, taken, "pool"))
    if free:  # left over: the default pool's (its own CPUs if customised, else instead of the reserved ones)
        default = pools[1]
        default.cpus = default.cpus | free if not default.cpus & reserved else frozenset(free)
    return pools


class PodpoolsPolicy(PooledPolicy):
    name = "podpools"
    description = "Pod-granularity placement: all containers of a pod share the CPUs of its pool instance."

    def setup(self) -> None:
        section = self.policy_config.podpools
        self.pin_cpu, self.pin_memory = section.pin_cpu, section.pin_memory
        res = resolve_cpu_resources(self.policy_config, self.topology, sysfs_root=self.sysfs_root)
        if not res.reserved:
            raise ConfigError("policy.ReservedResources.cpu", "the podpools policy needs at least one reserved CPU "
                                                              "(the reserved pool, and the default pool's fallback)")
        self._build(section, res.available, res.reserved)
        # Pod -> the pool it left last (release + allocate of a resize, a failed create): it goes back there.
        self._recent: dict[str, str] = {}

    def _build(self, section: PodpoolsSection, available: frozenset[int], reserved: frozenset[int]) -> None:
        """Lay out the pools of ``section`` on these available and reserved CPUs."""
        self.available, self.reserved = available, reserved
        self.pools: dict[str, Pool] = {}
        self._instances: dict[str, list[Pool]] = {}  # pool type -> its instances, in order
        placement = PlacementMemo(self.topology, self.pin_cpu, self.pin_memory)
        for pool in build_pools(section, self.topology, available, reserved):
            pool.placement = placement(pool.cpus)
            self.pools[pool.name] = pool
            self._instances.setdefault(pool.type.name, []).append(pool)
        for type_name, instances in self._instances.items():
            t = instances[0].type
            log.info("podpools: %s: %d instance(s), CPUs %s, MaxPods %d, FillOrder %s", type_name, len(instances),
                     " ".join(format_cpuset(p.cpus) for p in instances), t.max_pods, t.fill_order)
        self.reserved_pool = self._instances[RESERVED][0]
        self.default_pool = self._instances[DEFAULT][0]
        if len(self._instances) > 3:
            log.warning("podpools: %d pool types on this node; kube-scheduler cannot tell which has room and may "
                        "overbook them", len(self._instances) - 2)
        self._group_state = {name: pool.cpus for name, pool in self.pools.items()}  # pools never change
        self._reset_members()

    def _reset_members(self) -> None:
        for pool in self.pools.values():
            pool.members, pool.pods, pool.requested = {}, Counter(), 0
        self._pod_pool: dict[str, Pool] = {}
        self._pod_milli: Counter = Counter()  # pod -> milli-CPU its containers request now
        self._pod_max: dict[str, int] = {}  # pod -> the most its containers requested at once
        self._pod_names: dict[str, str] = {}  # pod -> namespace/name, for the logs

    # -- choosing a pool ---------------------------------------------------------------------------
    def _type_for(self, c: ContainerInfo) -> str:
        wanted = next((c.pod_annotations[k] for k in (f"{POOL_KEY}/pod", POOL_KEY) if k in c.pod_annotations), None)
        if wanted is None:
            return RESERVED if c.namespace == KUBE_SYSTEM else DEFAULT
        if wanted not in self._instances:
            log.error("podpools: pod %s/%s asks for pool %r, which no pool definition names; using %s",
                      c.namespace, c.pod_name, wanted, DEFAULT)
            return DEFAULT
        return wanted

    def _choose(self, c: ContainerInfo) -> Pool:
        type_name = self._type_for(c)
        candidates = [p for p in self._instances[type_name] if p.has_room()]
        if not candidates:
            log.error("podpools: no %s pool has room for pod %s/%s; it runs in the %s pool", type_name,
                      c.namespace, c.pod_name, DEFAULT)
            return self.default_pool
        recent = self._recent.pop(c.pod_id, None)
        for pool in candidates:
            if pool.name == recent:
                return pool
        order = candidates[0].type.fill_order
        if order == BALANCED:
            return min(candidates, key=lambda p: len(p.pods))
        if order == PACKED:
            return max(candidates, key=lambda p: (len(p.pods), -p.instance))
        return candidates[0]

    # -- membership --------------------------------------------------------------------------------
    def _join(self, pool: Pool, cid: str, c: ContainerInfo) -> None:
        pod, milli = c.pod_id, c.request_milli
        pool.members[cid] = (pod, milli)
        pool.requested += milli
        if pod:
            pool.pods[pod] += 1
            self._pod_pool[pod] = pool
            self._pod_milli[pod] += milli
            self._pod_max[pod] = max(self._pod_max.get(pod, 0), self._pod_milli[pod])
            self._pod_names[pod] = f"{c.namespace}/{c.pod_name}"
        if pool.requested > len(pool.cpus) * 1000:
            log.error("podpools: overbooked pool %s (cpus %s): %dm requested of %dm", pool.name,
                      format_cpuset(pool.cpus), pool.requested, len(pool.cpus) * 1000)

    def _leave(self, pool: Pool, cid: str) -> None:
        pod, milli = pool.members.pop(cid)
        pool.requested -= milli
        if not pod:
            return
        self._pod_milli[pod] -= milli
        pool.pods[pod] -= 1
        if pool.pods[pod] > 0:
            return
        del pool.pods[pod]
        del self._pod_milli[pod]
        self._pod_pool.pop(pod, None)
        self._check_pod_request(self._pod_names.pop(pod, pod), pool, self._pod_max.pop(pod, 0))
        if len(self._recent) >= RECENT_LIMIT:
            self._recent.pop(next(iter(self._recent)))
        self._recent[pod] = pool.name

    def _check_pod_request(self, pod: str, pool: Pool, milli: int) -> None:
        """Upstream's check when a pod leaves: its containers should have asked for the pool's CPUs per pod."""
        if pool.type.max_pods <= 0:
            return
        per_pod = len(pool.cpus) * 1000 // pool.type.max_pods
        if abs(milli - per_pod) > POD_MILLI_MARGIN:
            log.error("podpools: bad CPU requests: pod %s requested %d mCPUs, but pods in pool %s must request "
                      "%d mCPUs", pod, milli, pool.type.name, per_pod)

    # -- policy hooks ------------------------------------------------------------------------------
    def decide(self, c: ContainerInfo) -> Grant:
        pool = self._pod_pool.get(c.pod_id) if c.pod_id else None
        if pool is None:
            pool = self._choose(c)
        return Grant(pool=pool.name, kind=pool.kind, shared_milli=c.request_milli)

    def allocate(self, cid: str, container: ContainerInfo) -> None:
        super().allocate(cid, container)
        self._join(self.pools[self.grants[cid].pool], cid, container)

    def on_release(self, cid: str, grant: Grant) -> None:
        pool = self.pools.get(grant.pool)
        if pool is not None and cid in pool.members:
            self._leave(pool, cid)

    def on_rename(self, old: str, new: str) -> None:
        grant = self.grants.get(new)
        pool = self.pools.get(grant.pool) if grant is not None else None
        if pool is not None and old in pool.members:
            pool.members[new] = pool.members.pop(old)

    def placement(self, cid: str) -> Placement:
        grant = self.grants.get(cid)
        return (None, None) if grant is None else self.pools[grant.pool].placement

    def group_state(self) -> dict[str, Any]:
        return self._group_state

    def group_placement(self, key: str) -> Placement | None:
        pool = self.pools.get(key)
        return None if pool is None else pool.placement

    def pool_cpus(self) -> dict[str, frozenset[int]]:
        return {name: p.cpus for name, p in self.pools.items()}

    def exclusive_sets(self) -> dict[str, frozenset[int]]:
        """Every pool's CPUs but the reserved ones (the default pool's too when it has CPUs of its own)."""
        return {name: p.cpus for name, p in self.pools.items() if not p.cpus & self.reserved}

    def export_extra(self) -> dict[str, Any]:
        return {"pools": {name: format_cpuset(p.cpus) for name, p in self.pools.items()},
                "resources": {"process": PROCESS_TOKEN, "available": format_cpuset(self.available),
                              "reserved": format_cpuset(self.reserved)}}

    def _keep_resources(self, data: dict[str, Any]) -> None:
        """A config update in this process: keep the CPU resources the policy was created with.

        Upstream resolves Available/ReservedResources once, when the policy is created, and a config
        update only re-applies the pool definitions on them. A policy exported by this process (a live
        reconfiguration) hands its resources on; a cache of an earlier process (a restart) does not."""
        fixed = data.get("resources")
        if not isinstance(fixed, dict) or fixed.get("process") != PROCESS_TOKEN:
            return
        try:
            available, reserved = parse_cpuset(str(fixed["available"])), parse_cpuset(str(fixed["reserved"]))
        except (KeyError, CpusetError) as exc:
            raise RestoreError(f"malformed podpools resources in the state: {exc}") from None
        if (available, reserved) == (self.available, self.reserved):
            return
        log.info("podpools: config update: keeping available CPUs %s and reserved CPUs %s from when the policy "
                 "was created (not %s and %s); they change with a restart", format_cpuset(available),
                 format_cpuset(reserved), format_cpuset(self.available), format_cpuset(self.reserved))
        self._build(self.policy_config.podpools, available, reserved)

    def restore_extra(self, data: dict[str, Any]) -> None:
        self._keep_resources(data)
        cached = data.get("pools")
        if not isinstance(cached, dict):
            raise RestoreError("the cache holds no podpools pools")
        self._reset_members()
        for cid, grant in self.grants.items():
            pool = self.pools.get(grant.pool)
            try:
                same = pool is not None and parse_cpuset(str(cached.get(grant.pool, ""))) == pool.cpus
            except CpusetError:
                same = False
            if pool is None or not same:
                raise RestoreError(f"cached pool {grant.pool} of {cid} is not a pool of this config")
            c = self.containers[cid]
            if c.pod_id in self._pod_pool and self._pod_pool[c.pod_id] is not pool:
                raise RestoreError(f"cached containers of pod {c.pod_id} are in different pools")
            if pool.type.name not in (DEFAULT, self._type_for(c)):
                raise RestoreError(f"cached pool {grant.pool} of {cid} is not its pod's pool type")
            self._join(pool, cid, c)
        for pool in self.pools.values():
            limit = pool.type.max_pods  # the default pool takes whoever finds no room elsewhere
            if pool is not self.default_pool and limit != 0 and len(pool.pods) > max(limit, 0):
                raise RestoreError(f"pool {pool.name} holds {len(pool.pods)} pods, MaxPods is {pool.type.max_pods}")
