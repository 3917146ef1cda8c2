"""What every policy shares: options resolved against the topology, grants and placements."""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from resmgr.config import ConfigError, parse_cpu_constraint
from resmgr.config.sections import PolicySection
from resmgr.model.explanation import NOT_PLACED, PINNED_KINDS, SHARED_POOL
from resmgr.model.resources import KUBE_SYSTEM, ContainerInfo
from resmgr.model.state import NodeState
from resmgr.policy.cpu_allocator import take_cpus
from resmgr.topology.cgroup_cpuset import CgroupCpusetError, read_cgroup_cpuset
from resmgr.topology.cpuset import CpusetError, format_cpuset, parse_cpuset
from resmgr.topology.model import Topology

log = logging.getLogger("resmgr.policy")

# A placement: (cpuset cpus, cpuset mems); None leaves that cgroup setting alone.
Placement = tuple[frozenset[int] | None, frozenset[int] | None]


class PolicyError(RuntimeError):
    """A policy could not make a decision (the relay then passes the request unchanged)."""


class RestoreError(PolicyError):
    """Cached policy state does not fit the current topology/config."""


@dataclass
class CpuResources:
    """``AvailableResources`` and ``ReservedResources`` resolved to concrete CPUs."""

    available: frozenset[int]
    reserved: frozenset[int]
    reserved_milli: int


def _constraint_cpus(value: str, field: str, topology: Topology, sysfs_root: Path) -> Any:
    try:
        c = parse_cpu_constraint(value)
    except ValueError as exc:  # pragma: no cover - the schema already checked it
        raise ConfigError(field, str(exc)) from None
    if c.kind == "cgroup":
        try:
            c = type(c)("cpuset", cpus=read_cgroup_cpuset(c.cgroup or "", sysfs_root))
        except CgroupCpusetError as exc:
            raise ConfigError(field, str(exc)) from None
    return c


def resolve_cpu_resources(policy: PolicySection, topology: Topology, *,
                          sysfs_root: Path | str = "/", default_reserved: int = 1) -> CpuResources:
    """Resolve the policy section's CPU constraints on this topology; raises ConfigError."""
    online = topology.online
    available = online
    avail_text = policy.available.get("cpu")
    field_a = "policy.AvailableResources.cpu"
    if avail_text is not None:
        a = _constraint_cpus(avail_text, field_a, topology, Path(sysfs_root))
        if a.kind == "cpuset":
            missing = a.cpus - online
            if missing:
                raise ConfigError(field_a, f"CPUs {format_cpuset(missing)} are not online on this node "
                                           f"(online: {format_cpuset(online)})")
            if not a.cpus:
                raise ConfigError(field_a, "the available cpuset is empty")
            available = a.cpus
        else:
            count = a.cpu_count() or 0
            if count > len(online):
                raise ConfigError(field_a, f"{count} CPUs requested but the node has {len(online)} online")
            if count < 1:
                raise ConfigError(field_a, "at least one CPU must be available")
            available = take_cpus(topology, online, count)
    resv_text = policy.reserved.get("cpu")
    field_r = "policy.ReservedResources.cpu"
    if resv_text is None:
        milli = min(default_reserved, len(available)) * 1000
        reserved = take_cpus(topology, available, milli // 1000)
        return CpuResources(available, reserved, milli)
    r = _constraint_cpus(resv_text, field_r, topology, Path(sysfs_root))
    if r.kind == "cpuset":
        outside = r.cpus - available
        if outside:
            raise ConfigError(field_r, f"reserved CPUs {format_cpuset(outside)} are outside the available "
                                       f"CPUs ({format_cpuset(available)})")
        return CpuResources(available, r.cpus, len(r.cpus) * 1000)
    milli = r.milli or 0
    count = -(-milli // 1000)
    if count > len(available):
        raise ConfigError(field_r, f"reserved {resv_text} is larger than the {len(available)} available CPUs")
    return CpuResources(available, take_cpus(topology, available, count), milli)


def namespace_matches(namespace: str, patterns: list[str]) -> bool:
    return any(fnmatch.fnmatchcase(namespace, p) for p in patterns)


def is_reserved_namespace(container: ContainerInfo, patterns: list[str]) -> bool:
    return container.namespace == KUBE_SYSTEM or namespace_matches(container.namespace, patterns)


@dataclass
class Grant:
    """One container's allocation; ``pool`` names a pool or a balloon."""

    pool: str
    kind: str  # "shared" | "exclusive" | "isolated" | "reserved" | "balloon"
    exclusive: frozenset[int] = frozenset()
    shared_milli: int = 0
    # Why the grant holds no CPUs of its own (resmgr.model.explanation's UNPINNED_REASONS); "" for an
    # exclusive, isolated or balloon grant, or when the policy gives no finer reason than "shared".
    unpinned: str = ""

    def to_json(self) -> dict[str, Any]:
        data = {"pool": self.pool, "kind": self.kind, "exclusive": format_cpuset(self.exclusive),
                "shared_milli": self.shared_milli}
        if self.unpinned:
            data["unpinned"] = self.unpinned
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Grant:
        return cls(pool=str(data["pool"]), kind=str(data["kind"]),
                   exclusive=parse_cpuset(str(data.get("exclusive", ""))),
                   shared_milli=int(data.get("shared_milli", 0)), unpinned=str(data.get("unpinned", "")))

    def explain(self) -> tuple[str, str]:
        """(why it is not pinned, "" when it is; what it is pinned to) for the placement explanation."""
        pinned_to = PINNED_KINDS.get(self.kind, "")
        if pinned_to and not self.unpinned:
            return "", pinned_to
        return self.unpinned or SHARED_POOL, ""


@dataclass
class ContainerEdits:
    """Changes a policy makes to a container's CreateContainer config beyond its cpuset."""

    env: dict[str, str] = field(default_factory=dict)  # set (added or replaced)
    command: list[str] | None = None  # replaces command and args when set

    def apply(self, config: Any) -> None:
        """Apply to a CRI ContainerConfig (in place)."""
        if self.env:
            kept = [kv for kv in config.envs if kv.key not in self.env]
            del config.envs[:]
            config.envs.extend(kept)
            for key, value in self.env.items():
                config.envs.add(key=key, value=value)
        if self.command is not None:
            del config.command[:]
            del config.args[:]
            config.command.extend(self.command)


@dataclass
class PlacementMemo:
    """One placement tuple per cpuset, shared by every container placed there (diffs compare by identity)."""

    topology: Topology
    pin_cpu: bool = True
    pin_memory: bool = True
    _memo: dict[frozenset[int], Placement] = field(default_factory=dict)

    def __call__(self, cpus: frozenset[int]) -> Placement:
        placement = self._memo.get(cpus)
        if placement is None:
            if len(self._memo) > 4096:
                self._memo.clear()
            placement = self._memo[cpus] = (cpus if self.pin_cpu else None,
                                            self.topology.nodes_of(cpus) if self.pin_memory else None)
        return placement


class PolicyHooks(Protocol):
    """What a policy implements; ``Policy`` keeps containers and grants and calls these (one contract each)."""

    def setup(self) -> None:
        """Resolve the policy's options against the topology; raise ConfigError naming the field."""

    def decide(self, container: ContainerInfo) -> Grant | None:
        """The grant for a container being allocated (None: the policy leaves it alone)."""

    def on_release(self, cid: str, grant: Grant) -> None:
        """Give back what ``grant`` held; ``containers[cid]`` is still there."""

    def on_rename(self, old: str, new: str) -> None:
        """Re-key whatever the policy indexes by container id (a pending allocation got the runtime's id)."""

    def placement(self, cid: str) -> Placement:
        """The container's cpuset cpus and mems now (None: leave that cgroup setting alone)."""

    def export_extra(self) -> dict[str, Any]:
        """Policy state beyond the grants, as JSON for the cache: built afresh on every call and never
        changed afterwards (the cache's writer thread encodes it later)."""

    def restore_extra(self, data: dict[str, Any]) -> None:
        """Rebuild that state from the cache; raise RestoreError if it does not fit."""

    def group_of(self, cid: str) -> str | None:
        """The group (shared pool, balloon) whose changes move ``cid``'s placement; None: only its own grant."""

    def group_state(self) -> dict[str, Any]:
        """Group key -> a state object that is replaced whenever the group's placement may change."""

    def group_placement(self, key: str) -> Placement | None:
        """The placement all members of group ``key`` share, if they share one."""


@dataclass
class Policy:
    """Base of all policies: the bookkeeping around ``PolicyHooks``. Subclasses set ``name``/``description``
    and override the hooks they need; the defaults below place nothing."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    wants_usage: ClassVar[bool] = False  # rebalance() takes measured CPU usage (the relay samples it)
    # Why a container ``decide`` returned None for runs unpinned (resmgr.model.explanation's UNPINNED_REASONS).
    unplaced_reason: ClassVar[str] = NOT_PLACED

    topology: Topology
    config: dict[str, Any]  # the schema-checked mapping (the manager keeps and caches it)
    sysfs_root: str = "/"
    state: NodeState = field(default_factory=NodeState)  # the resource manager's; placements live there
    members: dict[str, set[str]] = field(default_factory=dict)  # group -> container ids
    # The typed ``policy`` section of ``config``: what setup() reads its options from.
    policy_config: PolicySection = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.policy_config = PolicySection.of(self.config.get("policy", {}))
        self.setup()

    @property
    def containers(self) -> Mapping[str, ContainerInfo]:
        """The containers placed, by id, as placed (``state``'s, read-only: changed through ``state``)."""
        return self.state.placed

    @property
    def grants(self) -> Mapping[str, Grant]:
        """Their grants, by container id (``state``'s, read-only: changed through ``state``)."""
        return self.state.grants

    # -- PolicyHooks defaults ----------------------------------------------------
    def setup(self) -> None:
        """Resolve options against the topology; raise ConfigError naming the field."""

    def decide(self, container: ContainerInfo) -> Grant | None:
        """The grant for a new container (None: the policy leaves it alone)."""
        return None

    def on_release(self, cid: str, grant: Grant) -> None:
        """Give back what ``grant`` held."""

    def placement(self, cid: str) -> Placement:
        return (None, None)

    def export_extra(self) -> dict[str, Any]:
        return {}

    def explain(self, cid: str) -> tuple[str, str, str]:
        """(pool, why ``cid`` is not pinned or "", what it is pinned to) from its grant: the placement
        explanation's policy part."""
        grant = self.grants.get(cid)
        if grant is None:
            return "", self.unplaced_reason, ""
        return (grant.pool, *grant.explain())

    def export_cached(self, keep: Callable[[str], bool]) -> dict[str, Any]:
        """``export_extra`` for the cache: containers ``keep`` refuses (reservations the runtime never confirmed)
        left out of it where it names containers; by default unchanged."""
        return self.export_extra()

    def cold_starts(self) -> dict[str, float]:
        """Container id -> when its cold start ends (time.time()); the resource manager runs the timers."""
        return {}

    def finish_cold_start(self, cid: str) -> bool:
        """End ``cid``'s cold start now; True if it was in one (its placement changed)."""
        return False

    def create_edits(self, cid: str) -> ContainerEdits | None:
        """Env/command changes for the container being created (static-pools' CMK variables); None: none."""
        return None

    def node_resources(self) -> dict[str, Any]:
        """What cri-resmgr-agent should publish on the node for this policy: {"capacity": {extended resource:
        quantity}, "labels": {name: value}, "taints": [{key, value, effect}]}; empty: nothing."""
        return {}

    def cpu_classes(self) -> dict[str, frozenset[int]]:
        """CPU class name -> the CPUs in it now (resmgr.control.cpu_classes enforces them); empty: none."""
        return {}

    def restore_extra(self, data: dict[str, Any]) -> None:
        """Rebuild derived state from exported data; raise RestoreError if inconsistent."""

    # -- common operations -------------------------------------------------------
    def allocate(self, cid: str, container: ContainerInfo) -> None:
        if cid in self.containers:
            self.release(cid)
        grant = self.decide(container)
        self.state.place(cid, container)
        if grant is not None:
            self.state.set_grant(cid, grant)
        self._index(cid, add=True)

    def release(self, cid: str) -> None:
        self._index(cid, add=False)
        grant = self.state.take_grant(cid)
        if grant is not None:
            self.on_release(cid, grant)  # may still look at self.containers[cid]
        self.state.unplace(cid)

    def rename(self, old: str, new: str) -> None:
        """Re-key a container (a pending allocation gets the runtime's id)."""
        self._index(old, add=False)
        self.state.rename(old, new)
        self.on_rename(old, new)
        self._index(new, add=True)

    def _index(self, cid: str, *, add: bool) -> None:
        key = self.group_of(cid) if cid in self.containers else None
        if key is None:
            return
        if add:
            self.members.setdefault(key, set()).add(cid)
        else:
            group = self.members.get(key)
            if group is not None:
                group.discard(cid)
                if not group:
                    del self.members[key]

    def on_rename(self, old: str, new: str) -> None:
        """Subclasses that index containers elsewhere re-key them here."""

    def placements(self) -> dict[str, Placement]:
        return {cid: self.placement(cid) for cid in self.containers}

    # -- change tracking -------------------------------------------------------------------
    # Containers whose placement follows a shared pool or balloon belong to a group; a
    # group's state object is replaced whenever its placement may have changed. Diffing
    # a handful of group states is much cheaper than diffing every container's placement.
    def group_of(self, cid: str) -> str | None:
        """The group whose changes move ``cid``'s placement (None: only its own grant does)."""
        return None

    def group_state(self) -> dict[str, Any]:
        return {}

    def group_placement(self, key: str) -> Placement | None:
        """The placement every member of group ``key`` has, if they all share one."""
        return None

    def rebuild_members(self) -> None:
        self.members = {}
        for cid in self.containers:
            self._index(cid, add=True)

    def rebalance(self, usage: dict[str, int]) -> None:
        """Resize by measured CPU usage (container id -> milli-CPU over the last interval); default: unused."""

    def pool_cpus(self) -> dict[str, frozenset[int]]:
        """Pool (or balloon) name -> the CPUs it runs its containers on now, for the pool-size metrics.
        Names match ``Grant.pool``; the default (no pools) exports nothing."""
        return {}

    def exclusive_sets(self) -> dict[str, frozenset[int]]:
        """CPUs owned by exactly one container (or balloon) each: used for invariants."""
        return {cid: g.exclusive for cid, g in self.grants.items() if g.exclusive}

    def export_state(self) -> dict[str, Any]:
        return {"grants": {cid: g.to_json() for cid, g in self.grants.items()}, **self.export_extra()}

    def restore_state(self, state: dict[str, Any], containers: Mapping[str, ContainerInfo]) -> None:
        """Adopt cached grants for ``containers``; raises RestoreError if they do not fit."""
        try:
            grants = {cid: Grant.from_json(g) for cid, g in state.get("grants", {}).items()}
        except (KeyError, TypeError, ValueError, CpusetError) as exc:
            raise RestoreError(f"malformed cached grants: {exc}") from None
        unknown = set(grants) - set(containers)
        if unknown:
            grants = {cid: g for cid, g in grants.items() if cid in containers}
        self.state.restore_placements(containers, grants)
        owned: set[int] = set()
        for cid, g in grants.items():
            if g.exclusive & owned:
                raise RestoreError(f"cached exclusive CPUs of {cid} overlap another container")
            owned |= g.exclusive
        self.restore_extra(state)
        self.rebuild_members()


class PooledPolicy(Policy):
    """A policy whose containers share their pool's placement (balloons, dynamic pools, pod pools): the pool a
    grant names is its group, and ``group_placement`` of that pool is the container's placement."""

    def placement(self, cid: str) -> Placement:
        grant = self.grants.get(cid)
        if grant is None:
            return (None, None)
        return self.group_placement(grant.pool) or (None, None)

    def group_of(self, cid: str) -> str | None:
        grant = self.grants.get(cid)
        return None if grant is None else grant.pool
