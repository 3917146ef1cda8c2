"""The resource manager's state and its one owner: pods, the one registry of containers (``NodeState``: each with
its lifecycle and what the policy placed it as), the policy placing into it, reservations waiting for the runtime,
and the cache they are saved in."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from resmgr.control.controllers import Controllers
from resmgr.manager.cache import Cache, CacheEncoder
from resmgr.manager.deadline_timers import DeadlineTimers
from resmgr.manager.outbox import UpdateOutbox
from resmgr.manager.placement_diff import PENDING_PREFIX, diff_groups, fmt_cpus
from resmgr.model.resources import (
    ContainerInfo,
    PodInfo,
)
from resmgr.model.state import ENDED, Lifecycle, NodeState
from resmgr.policy.base import Placement, Policy, RestoreError
from resmgr.relay.hooks import ContainerUpdate
from resmgr.topology.model import Topology

log = logging.getLogger("resmgr.resource-manager")


# CRI ContainerState values (runtime.v1.ContainerState).
CONTAINER_RUNNING = 1
CONTAINER_EXITED = 2
# policy_data key (beside the policy's own) listing the known containers that hold nothing (stopped, exited, or not
# placeable): a restore must not allocate them; they come back as stopped.
STOPPED_KEY = "stopped_containers"


def listed_lifecycle(state: int) -> Lifecycle:
    """The lifecycle of a container the runtime lists in CRI state ``state`` (CREATED and UNKNOWN: created)."""
    if state == CONTAINER_EXITED:
        return Lifecycle.EXITED
    return Lifecycle.RUNNING if state == CONTAINER_RUNNING else Lifecycle.CREATED


Resize = Callable[[ContainerInfo], ContainerInfo]


@dataclass
class RePlaced:
    """What ``ResourceManager.re_place`` did: updates to send, per-container errors, ids not running."""

    updates: list[ContainerUpdate] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)


@dataclass
class PendingCreate:
    """A CreateContainer's reservation: its pending key and the cpuset the request carries."""

    key: str
    placement: tuple[str | None, str | None]


@dataclass
class PendingResize:
    """A resize waiting for the runtime: the container and policy state before it, to undo a refusal."""

    cid: str
    container: ContainerInfo
    state: dict[str, Any]
    placement: Placement
    mutation: int = 0


def confirmed(cid: str) -> bool:
    """Whether ``cid`` is a runtime's container id, not a pending reservation's key."""
    return not cid.startswith(PENDING_PREFIX)


def same_resources(a: ContainerInfo, b: ContainerInfo) -> bool:
    return all(getattr(a, f) == getattr(b, f) for f in ("request_milli", "limit_milli", "memory_limit", "qos"))


class ManagerState:
    """What the resource manager owns; every job's mixin (decisions, reconfiguration, resync, controllers_timers)
    reads and changes it only under ``_lock``."""

    topology: Topology
    pods: dict[str, PodInfo]  # by pod sandbox id
    state: NodeState  # the one registry of containers, with their lifecycles; handed to the policy
    policy: Policy  # places into ``state`` (a new policy into a fork of it, adopted once it took it)
    cache: Cache
    controllers: Controllers
    class_overrides: dict[str, dict[str, str]]
    config: dict[str, Any]
    config_source: str
    forced: bool
    disable_policy_switch: bool
    sysfs_root: str
    _lock: threading.RLock
    _creates: dict[str, PendingCreate]  # CreateContainer reservations waiting for the runtime, by pending key
    _resizes: dict[int, PendingResize]  # resizes waiting for the runtime, by id() of their record
    _unsynced: set[str]  # containers whose cpusets the runtime may not have yet
    _mutations: int  # bumped whenever policy state changes: tells whether an undo can be exact
    _resync_wanted: bool
    _cached_config: tuple[dict[str, Any] | None, str]
    _encoder: CacheEncoder
    _seq: Iterator[int]
    _cold_timers: DeadlineTimers
    outbox: UpdateOutbox  # where updates no hook call returns go

    def _decided(self, updates: list[ContainerUpdate], *also: ContainerUpdate | None) -> list[ContainerUpdate]:
        """End a decision: number its updates (ResourceManager)."""
        raise NotImplementedError

    def check_cpuset_drift(self) -> frozenset[str]:
        """Compare the host cgroups' cpusets with the decisions (resmgr.manager.explanations)."""
        raise NotImplementedError

    def _apply_container_classes(self, cid: str) -> dict[str, str]:
        """Put a started container into its classes (ControllersTimers)."""
        raise NotImplementedError

    @property
    def containers(self) -> Mapping[str, ContainerInfo]:
        """Every container the runtime confirmed, in any lifecycle, with its own resources (read-only)."""
        return self.state.known

    def stopped(self) -> list[str]:
        """Known containers that stopped or exited (they hold nothing), not yet removed."""
        return self.state.in_lifecycle(*ENDED)

    def _live(self) -> dict[str, ContainerInfo]:
        """The confirmed containers that have not ended: those a restore or a re-allocation places."""
        return {cid: c for cid, c in self.containers.items() if self.state.lifecycle(cid) not in ENDED}

    def _restore(self, policy_data: dict[str, Any]) -> None:
        policy_data = dict(policy_data)
        policy_data.pop(STOPPED_KEY, None)  # read at load (ResourceManager): those containers are stopped
        placed = self._live()
        try:
            self.policy.restore_state(policy_data, placed)
        except RestoreError as exc:
            log.error("cached %s allocations are unusable (%s); re-allocating all containers",
                      self.policy.name, exc)
            self._reallocate_all()
            return
        for cid, c in placed.items():
            if cid not in self.policy.grants and self.policy.name != "none":
                self.policy.allocate(cid, c)
                self._unsynced.add(cid)

    def _reallocate_all(self) -> None:
        self.state.unplace_all()
        live = self._live()
        for cid, c in live.items():
            self.policy.allocate(cid, c)
        self._unsynced = set(live)

    def save(self) -> None:
        """Persist pods, containers, the policy's grants and the cached config (``CacheEncoder``)."""
        extra = self.policy.export_cached(confirmed)
        # Stopped containers stay known (a resync sees them exited) but hold nothing: a restore must not
        # allocate them again, or it moves the others (a balloon would grow for a stopped member).
        containers, stopped = self.state.snapshot()
        if stopped:
            extra[STOPPED_KEY] = stopped
        # Only configs pushed at runtime are cached; files given on the command line are
        # re-read at every start (as in cri-resource-manager).
        config, source = self._cached_config
        # A snapshot the cache's writer may encode later (in background mode): shallow copies of the maps,
        # whose entries never change once made (CacheEncoder), and the policy's own state, which
        # export_extra builds afresh for every save (its contract).
        snapshot = {"pods": dict(self.pods), "containers": containers, "policy": self.policy.name,
                    "grants": dict(self.policy.grants), "policy_extra": extra, "config": config,
                    "config_source": source}
        self.cache.save_encoded(lambda: self._encoder.encode(**snapshot))

    def placements(self) -> dict[str, tuple[str | None, str | None]]:
        """Container id -> (cpuset cpus, cpuset mems) as the policy wants them now."""
        with self._lock:
            return {cid: (fmt_cpus(c), fmt_cpus(m)) for cid, (c, m) in self.policy.placements().items()
                    if not cid.startswith(PENDING_PREFIX)}

    def pool_containers(self) -> list[tuple[tuple[str, str], float]]:
        """((policy, pool), containers placed there) for the metrics; pending reservations left out."""
        with self._lock:
            name = self.policy.name
            counts = Counter(g.pool for cid, g in self.policy.grants.items() if not cid.startswith(PENDING_PREFIX))
        return [((name, pool), float(n)) for pool, n in sorted(counts.items())]

    def pool_stats(self) -> tuple[str, list[tuple[str, frozenset[int], frozenset[int], int]]]:
        """(policy, [(pool, its CPUs, their memory nodes, its containers' CPU requests in milli-CPU)]) for the
        metrics; pending reservations left out."""
        with self._lock:
            policy = self.policy
            requested = Counter()
            for cid, g in policy.grants.items():
                container = policy.containers.get(cid)
                if container is not None and not cid.startswith(PENDING_PREFIX):
                    requested[g.pool] += container.request_milli
            pools = policy.pool_cpus()
        return policy.name, [(pool, cpus, self.topology.nodes_of(cpus), requested[pool])
                             for pool, cpus in sorted(pools.items())]

    def running(self) -> list[tuple[ContainerInfo, PodInfo | None]]:
        """The containers the policy placed that the runtime created, with their pods."""
        with self._lock:
            placed = self.state.placed
            return [(c, self.pods.get(c.pod_id)) for cid, c in self.containers.items() if cid and cid in placed]

    def _running_ids(self) -> list[str]:
        placed = self.state.placed
        return [cid for cid in self.containers if cid and cid in placed]

    def _place(self, cid: str, target: ContainerInfo, *, always: bool = False) -> bool:
        """Release and allocate ``cid`` as ``target`` unless the policy already sees those resources."""
        if not always and same_resources(self.policy.containers[cid], target):
            return False
        self.policy.release(cid)
        self.policy.allocate(cid, target)
        return True

    def _release(self, cids: list[str], *, forget: bool, reason: str,
                 ended: Lifecycle = Lifecycle.STOPPED) -> list[ContainerUpdate]:
        """Release ``cids``: forgotten (removed), or kept known as ``ended`` (stopped, exited), holding nothing."""
        if not cids:
            return []
        old = self.policy.group_state()
        changed = False
        for cid in cids:
            if cid in self.policy.containers:
                self.policy.release(cid)
                changed = True
            if forget:
                changed |= self.state.forget(cid)
            elif cid in self.containers and self.state.lifecycle(cid) not in ENDED:
                self.state.end(cid, ended)
        if changed:
            self._mutations += 1
            self.save()
        return diff_groups(self.policy, old, reason=reason)
