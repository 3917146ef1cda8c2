"""The resource manager: the relay's hook that applies the active policy to CRI requests.

It implements ``resmgr.relay.hooks.ResourceManagerHook``:

* ``RunPodSandbox``: records the pod (after the runtime assigned its id).
* ``CreateContainer``: estimates the container's resources, lets the policy decide,
  and writes ``cpuset_cpus``/``cpuset_mems`` into the request's Linux resources.
  The decision reserves the CPUs under a pending key; ``after`` binds the runtime's
  container id to it, ``failed`` releases it.
* ``UpdateContainerResources``: keeps the policy's cpuset in kubelet's updates; a
  resize is undone by ``failed`` (exactly, when no other decision came in between).
* ``StopContainer``/``StopPodSandbox``: release CPUs; ``RemoveContainer``/
  ``RemovePodSandbox``: also forget the container/pod.
* ``containers_exited``: kubelet sends no call when a container exits; the relay reads the exits in
  the runtime's ListContainers answers (kubelet's ~1 s relist, resmgr.relay.exits), and an exited
  container's CPUs are released as a stop's are. A CreateContainer of a container the pod already
  has by name (kubelet restarting it) releases the older instance first, as cri-resource-manager does.

Whenever a decision changes other containers' cpusets (a shared pool shrinks or
grows, a balloon is resized), ``ContainerUpdate``s for them are returned, and
the relay sends them to the runtime, numbered in decision order (``ContainerUpdate.seq``)
so that the relay never lets an older one land last. Only decisions hold the lock;
calls to the runtime run concurrently. State is persisted in the cache after every
change that the runtime confirmed (and after a reservation that moved other containers).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path
from typing import Any

from google.protobuf.message import Message

from resmgr.config import ConfigError, validate_config
from resmgr.config.files import CACHE, DEFAULTS, FALLBACK, FORCE, choose_config
from resmgr.control.controllers import Controllers
from resmgr.manager.cache import Cache, CacheData, CacheEncoder
from resmgr.manager.deadline_timers import DeadlineTimers
from resmgr.manager.placement_diff import PENDING_PREFIX, diff_groups, diff_placements, fmt_cpus
from resmgr.model.resources import (
    ContainerInfo,
    PodInfo,
    container_from_create_request,
    container_from_listed,
    estimate_linux_resources,
    pod_from_listed_sandbox,
    pod_from_sandbox_config,
)
from resmgr.options import DEFAULT_RELAY_DIR
from resmgr.policy.base import Placement, Policy, RestoreError
from resmgr.policy.registry import active_policy_name, create_policy
from resmgr.relay.hooks import ContainerUpdate, HookResult
from resmgr.topology.cpuset import format_cpuset
from resmgr.topology.model import Topology

log = logging.getLogger("resmgr.resource-manager")

# CRI ContainerState values (runtime.v1.ContainerState).
CONTAINER_RUNNING = 1
CONTAINER_EXITED = 2
# policy_data key (beside the policy's own) listing the known containers that were stopped: released.
STOPPED_KEY = "stopped_containers"


Resize = Callable[[ContainerInfo], ContainerInfo]
UpdateSender = Callable[[list[ContainerUpdate], str], None]


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


def _confirmed(cid: str) -> bool:
    """Whether ``cid`` is a runtime's container id, not a pending reservation's key."""
    return not cid.startswith(PENDING_PREFIX)


def _same_resources(a: ContainerInfo, b: ContainerInfo) -> bool:
    return all(getattr(a, f) == getattr(b, f) for f in ("request_milli", "limit_milli", "memory_limit", "qos"))


class ResourceManager:
    """Holds pods, containers and the active policy; implements the relay hook."""

    def __init__(self, topology: Topology, *, relay_dir: str | Path = DEFAULT_RELAY_DIR,
                 fallback_config: dict[str, Any] | None = None, force_config: dict[str, Any] | None = None,
                 disable_policy_switch: bool = False, sysfs_root: str = "/", cache_fsync: bool = True,
                 background_save: bool = False, cgroup_root: str | Path = "/sys/fs/cgroup",
                 resctrl_root: str | Path = "/sys/fs/resctrl") -> None:
        self.topology = topology
        self.sysfs_root = sysfs_root
        # CPU classes, RDT and block I/O beside the policy (resmgr.control); classes from Adjustments by id.
        self.controllers = Controllers(topology, sysfs_root=sysfs_root, cgroup_root=cgroup_root,
                                       resctrl_root=resctrl_root)
        self.class_overrides: dict[str, dict[str, str]] = {}
        self.cache = Cache(relay_dir, fsync=cache_fsync, background=background_save)
        self.forced = force_config is not None
        self.disable_policy_switch = disable_policy_switch
        self._lock = threading.RLock()
        # Reservations waiting for the runtime's answer: pending creates by key, resizes by id().
        self._creates: dict[str, PendingCreate] = {}
        self._resizes: dict[int, PendingResize] = {}
        self._seq = count()
        self._decisions = count(1)  # numbers every decision's updates (ContainerUpdate.seq)
        self._mutations = 0  # bumped whenever policy state changes: tells whether an undo can be exact
        self._resync_wanted = False
        # Cold starts end on timers; their updates go out through the relay's sender (set_update_sender).
        self._send_updates: UpdateSender | None = None
        self._cold_timers = DeadlineTimers(self._cold_start_due)
        data = self.cache.load()
        if data.config is not None:
            try:  # the cache is a file on disk: trust nothing in it
                data.config = validate_config(data.config, source="cached config")
            except ConfigError as exc:
                log.error("dropping the cached config: %s", exc)
                data.config, data.config_source = None, ""
        self._cached_config: tuple[dict[str, Any] | None, str] = (data.config, data.config_source)
        self._encoder = CacheEncoder(skip_prefix=PENDING_PREFIX)
        self.pods: dict[str, PodInfo] = {}
        self.containers: dict[str, ContainerInfo] = {}
        for pid, p in data.pods.items():
            try:
                self.pods[pid] = PodInfo.from_json(p)
            except TypeError as exc:
                log.error("dropping malformed cached pod %s: %s", pid, exc)
        for cid, c in data.containers.items():
            try:
                self.containers[cid] = ContainerInfo.from_json(c)
            except TypeError as exc:
                log.error("dropping malformed cached container %s: %s", cid, exc)
        config, source = self._startup_config(data, fallback_config, force_config, disable_policy_switch)
        self.policy = self._startup_policy(config, source, fallback_config)
        self.config, self.config_source = self._startup_choice
        # Containers whose cpusets the runtime may not have yet; sync_with_runtime updates them.
        self._unsynced: set[str] = set()
        if data.policy == self.policy.name and data.policy_data:
            self._restore(data.policy_data)
        else:
            if data.policy and data.policy != self.policy.name:
                log.info("switching policy from %s to %s at startup", data.policy, self.policy.name)
            self._reallocate_all()
        self.save()
        self.controllers.configure(self.config, strict=False)
        self._sync_cpu_classes()
        log.info("resource manager ready: policy %s (config from %s) on %s", self.policy.name, source,
                 topology.describe())

    # -- construction -------------------------------------------------------------------
    def _startup_config(self, data: CacheData, fallback: dict[str, Any] | None, force: dict[str, Any] | None,
                        disable_switch: bool) -> tuple[dict[str, Any], str]:
        config, source = choose_config(force=force, cached=data.config, cached_source=data.config_source,
                                       fallback=fallback)
        wanted = active_policy_name(config)
        if disable_switch and data.policy and data.policy != wanted:
            log.error("policy switch from %s to %s refused (--disable-policy-switch); keeping %s",
                      data.policy, wanted, data.policy)
            if data.config is not None and active_policy_name(data.config) == data.policy:
                return data.config, data.config_source or "cache"
            return {"policy": {"Active": data.policy}}, CACHE
        return config, source

    def _startup_policy(self, config: dict[str, Any], source: str,
                        fallback: dict[str, Any] | None) -> Policy:
        """The policy for the startup config; a cached config that no longer fits falls back."""
        candidates = [(config, source)]
        if source not in (FORCE, FALLBACK, DEFAULTS):
            # Only a cached (agent-pushed) config falls back: the agent will push again,
            # while a bad file given on the command line must stop the start loudly.
            if fallback is not None:
                candidates.append((fallback, FALLBACK))
            candidates.append(({}, DEFAULTS))
        for i, (cfg, src) in enumerate(candidates):
            try:
                policy = create_policy(cfg, self.topology, sysfs_root=self.sysfs_root)
            except ConfigError as exc:
                if i == len(candidates) - 1:
                    raise exc.with_source(src) from None
                log.error("config from %s does not fit this node: %s; trying the next source", src, exc)
                continue
            self._startup_choice = (cfg, src)
            return policy
        raise AssertionError("unreachable")  # pragma: no cover

    # -- state ------------------------------------------------------------------------------
    def _restore(self, policy_data: dict[str, Any]) -> None:
        policy_data = dict(policy_data)
        stopped = set(policy_data.pop(STOPPED_KEY, None) or ())
        placed = {cid: c for cid, c in self.containers.items() if cid not in stopped}
        try:
            self.policy.restore_state(policy_data, placed)
        except RestoreError as exc:
            log.error("cached %s allocations are unusable (%s); re-allocating all containers",
                      self.policy.name, exc)
            self._reallocate_all(stopped)
            return
        for cid, c in placed.items():
            if cid not in self.policy.grants and self.policy.name != "none":
                self.policy.allocate(cid, c)
                self._unsynced.add(cid)

    def _reallocate_all(self, stopped: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.policy.state.clear()  # the manager's own state object, handed to the policy
        for cid, c in self.containers.items():
            if cid not in stopped:
                self.policy.allocate(cid, c)
        self._unsynced = set(self.containers) - stopped

    def save(self) -> None:
        """Persist pods, containers, the policy's grants and the cached config (``CacheEncoder``)."""
        extra = self.policy.export_cached(_confirmed)
        # Stopped containers stay known (a resync sees them exited) but hold nothing: a restore must not
        # allocate them again, or it moves the others (a balloon would grow for a stopped member).
        stopped = [cid for cid in self.containers if cid not in self.policy.containers]
        if stopped:
            extra[STOPPED_KEY] = stopped
        # Only configs pushed at runtime are cached; files given on the command line are
        # re-read at every start (as in cri-resource-manager).
        config, source = self._cached_config
        # A snapshot the cache's writer may encode later (in background mode): shallow copies of the maps,
        # whose entries never change once made (CacheEncoder), and the policy's own state, which
        # export_extra builds afresh for every save (its contract).
        snapshot = {"pods": dict(self.pods), "containers": dict(self.containers), "policy": self.policy.name,
                    "grants": dict(self.policy.grants), "policy_extra": extra, "config": config,
                    "config_source": source}
        self.cache.save_encoded(lambda: self._encoder.encode(**snapshot))

    def close(self) -> None:
        """Write the last state to the cache (it may still be pending with ``background_save``)."""
        self._cold_timers.cancel_all()
        self.cache.close()

    # -- timers: cold starts (memory tiers) --------------------------------------------------------------
    def set_update_sender(self, send: UpdateSender) -> None:
        """Where updates that no CRI call carries go (the relay's ``apply_updates``); arms pending timers."""
        with self._lock:
            self._send_updates = send
            self._sync_timers()

    def _sync_timers(self) -> None:
        if self._send_updates is None:
            return
        self._cold_timers.sync({cid: due for cid, due in self.policy.cold_starts().items() if _confirmed(cid)})

    def finish_cold_start(self, cid: str) -> list[ContainerUpdate]:
        """End a container's cold start: the update that widens its memory to its types (none if not cold)."""
        with self._lock:
            if not _confirmed(cid) or not self.policy.finish_cold_start(cid):
                return []
            self._mutations += 1
            self.save()
            cpus, mems = self.policy.placement(cid)
            log.info("cold start of %s done: memory nodes %s", cid, fmt_cpus(mems))
            return self._number([ContainerUpdate(cid, fmt_cpus(cpus), fmt_cpus(mems), reason="cold start done")])

    def _cold_start_due(self, cid: str) -> None:
        updates = self.finish_cold_start(cid)
        send = self._send_updates
        if updates and send is not None:
            send(updates, "ColdStartDone")

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

    def rebalance(self, usage: Mapping[str, int]) -> list[ContainerUpdate]:
        """Hand measured CPU usage (container id -> milli-CPU) to the policy; updates for whom it moved."""
        with self._lock:
            old = self.policy.group_state()
            self.policy.rebalance(dict(usage))
            new = self.policy.group_state()
            if all(old.get(key) == state for key, state in new.items()):
                return []
            self._mutations += 1
            self.save()
            return self._number(diff_groups(self.policy, old, reason="pools resized by CPU usage"))

    # -- the front ends' contract (resmgr.relay.hooks.ResourceManagerHook) --------------------------
    def reconfigure(self, config: dict[str, Any], source: str = FORCE) -> list[ContainerUpdate]:
        """SIGHUP: apply the re-read ``--force-config`` (same rules as set_config, never refused as forced)."""
        with self._lock:
            return self._number(self._apply(config, source))

    # Calls run concurrently: only decisions and their bookkeeping hold ``_lock``, never the runtime
    # call. A decision reserves (a pending allocation, a resize with its undo record) and hands the
    # record back as the HookResult's ``call``; ``after`` confirms it, ``failed`` gives it back.
    def before(self, method: str, request: Message) -> HookResult:
        with self._lock:
            self._notice_bypass(method, request)
            if method == "CreateContainer":
                result = self._before_create(request)
            elif method == "UpdateContainerResources":
                call, updates = self._resize(request)
                new_request, placed = self._enforce_update(request)
                result = HookResult(request=new_request, updates=updates, call=call, placed=placed)
            else:
                return HookResult()
            self._number(result.updates, result.placed)
            return result

    def after(self, method: str, request: Message, response: Message, call: object = None) -> list[ContainerUpdate]:
        with self._lock:
            return self._number(self._after(method, request, response, call))

    def failed(self, method: str, request: Message, call: object = None) -> list[ContainerUpdate]:
        """The runtime failed the call: give back what ``before`` reserved for it."""
        with self._lock:
            if method == "CreateContainer":
                record = self._create_record(call)
                return self._number(self._drop_failed_create(record) if record is not None else [])
            if method == "UpdateContainerResources":
                resize = self._resize_record(call, request)
                return self._number(self._undo_refused_resize(resize) if resize is not None else [])
            return []

    # -- resync after a bypass ------------------------------------------------------------------------
    # While the installer bypasses the relay, kubelet creates and removes containers on the runtime
    # directly. A call about a container or pod the resource manager never saw shows that happened
    # (StartContainer is left out: with the splice transport it may overtake its own create's ``after``).
    _UNKNOWN_CONTAINER_CALLS = frozenset({"StopContainer", "RemoveContainer", "UpdateContainerResources"})
    _UNKNOWN_POD_CALLS = frozenset({"StopPodSandbox", "RemovePodSandbox"})

    def _notice_bypass(self, method: str, request: Message) -> None:
        if method in self._UNKNOWN_CONTAINER_CALLS:
            unknown = request.container_id not in self.containers
        elif method in self._UNKNOWN_POD_CALLS:
            unknown = request.pod_sandbox_id not in self.pods
        else:
            return
        if unknown:
            self.request_resync(f"{method} for a {'container' if method in self._UNKNOWN_CONTAINER_CALLS else 'pod'} "
                                "the resource manager never saw")

    def resync_wanted(self) -> bool:
        return self._resync_wanted

    def keeps_containers(self) -> bool:
        """Yes: the relay reports exits (containers_exited) and compares its listings (runtime_drift)."""
        return True

    def runtime_drift(self, containers: list[Any]) -> frozenset[str]:
        """Container ids where the runtime's listing and what is known disagree: running containers never seen,
        known ones the runtime no longer lists (in-flight creates and removes show here briefly too), and
        exited ones that still hold resources (their exit was not seen in a relist that came through).
        A created, not yet started container does not count: its StartContainer may still come through."""
        with self._lock:
            listed = {c.id: c.state for c in containers}
            placed = self.policy.containers
            unknown = {cid for cid, state in listed.items()
                       if state == CONTAINER_RUNNING and cid not in self.containers}
            exited = {cid for cid, state in listed.items() if state == CONTAINER_EXITED and cid in placed}
            gone = {cid for cid in self.containers if cid not in listed and not cid.startswith(PENDING_PREFIX)}
        return frozenset(unknown | exited | gone)

    def containers_exited(self, container_ids: Collection[str]) -> list[ContainerUpdate]:
        """The runtime listed these containers as exited: release those still holding resources.

        They stay known (as stopped ones do) until kubelet removes them. Called at every relist with
        every exited container the runtime still has, so ids already released cost a set lookup each.
        """
        with self._lock:
            placed = self.policy.containers
            released = [cid for cid in container_ids if cid in placed and cid in self.containers]
            if not released:
                return []
            for cid in released:
                c = self.containers[cid]
                log.info("container %s (%s/%s/%s) exited: releasing its resources", cid, c.namespace, c.pod_name,
                         c.name)
            return self._number(self._release(released, forget=False, reason="container exited"))

    def request_resync(self, reason: str) -> None:
        """Resync with the runtime at the next chance (the relay then lists it and calls ``sync_with_runtime``)."""
        with self._lock:
            if not self._resync_wanted:
                log.info("resyncing with the runtime: %s", reason)
                self._resync_wanted = True

    def begin_resync(self) -> tuple[frozenset[str], frozenset[str]]:
        """Before listing the runtime: what is known now (a resync forgets only that; later creates stay)."""
        with self._lock:
            self._resync_wanted = False
            return frozenset(self.pods), frozenset(self.containers)

    def _number(self, updates: list[ContainerUpdate], *also: ContainerUpdate | None) -> list[ContainerUpdate]:
        """Give this decision's updates the next decision number, so that newer ones win (resmgr.relay.update_order)."""
        self._sync_timers()
        self._sync_cpu_classes()  # every decision ends here: the CPU classes follow the policy's CPUs
        seq = next(self._decisions)
        for u in (*updates, *also):
            if u is not None:
                u.seq = seq
        return updates

    def _after(self, method: str, request: Message, response: Message, call: object) -> list[ContainerUpdate]:
        if method == "RunPodSandbox":
            pod = pod_from_sandbox_config(response.pod_sandbox_id, request.config)
            self.pods[pod.id] = pod
            self.save()
            return []
        if method == "CreateContainer":
            return self._after_create(request, response, self._create_record(call))
        if method == "StartContainer":
            self._apply_container_classes(request.container_id)
            return []
        if method == "UpdateContainerResources":
            if self._resize_record(call, request) is not None:
                self.save()  # the runtime applied the resize: now it is the state to restore
            return []
        if method == "StopContainer":
            return self._release([request.container_id], forget=False, reason="container stopped")
        if method == "RemoveContainer":
            return self._release([request.container_id], forget=True, reason="container removed")
        if method in ("StopPodSandbox", "RemovePodSandbox"):
            pod_id = request.pod_sandbox_id
            cids = [cid for cid, c in self.containers.items() if c.pod_id == pod_id]
            forget = method == "RemovePodSandbox"
            updates = self._release(cids, forget=forget, reason=f"pod {method[:-7].lower()}ped")
            if forget and self.pods.pop(pod_id, None) is not None:
                self.save()
            return updates
        return []

    def _create_record(self, call: object) -> PendingCreate | None:
        """The reservation ``call`` stands for, taken out of the pending ones (callers without handles: the oldest)."""
        if isinstance(call, PendingCreate):
            return self._creates.pop(call.key, None)
        if call is None and self._creates:
            return self._creates.pop(next(iter(self._creates)))
        return None

    def _resize_record(self, call: object, request: Message) -> PendingResize | None:
        if isinstance(call, PendingResize):
            return self._resizes.pop(id(call), None)
        if call is None:  # a caller without handles: the newest resize of that container
            for key, r in reversed(self._resizes.items()):
                if r.cid == request.container_id:
                    return self._resizes.pop(key)
        return None

    def _before_create(self, request: Message) -> HookResult:
        pod = self.pods.get(request.pod_sandbox_id)
        container = container_from_create_request(request, pod)
        key = f"{PENDING_PREFIX}{next(self._seq)}"
        old = self.policy.group_state()
        older = self._older_instances(container)
        for cid in older:
            # kubelet restarts a container by creating it again in its pod; the old instance has exited
            # (its exit may not have been seen yet), and it must not keep what the new one needs.
            log.info("re-creation of container %s/%s/%s: releasing the older instance %s", container.namespace,
                     container.pod_name, container.name, cid)
            self.policy.release(cid)
        self.policy.allocate(key, container)
        self._mutations += 1
        cpus, mems = self.policy.placement(key)
        record = self._creates[key] = PendingCreate(key, (fmt_cpus(cpus), fmt_cpus(mems)))
        reason = f"{container.namespace}/{container.pod_name}/{container.name} created"
        updates = diff_groups(self.policy, old, skip=key, reason=reason)
        if updates or older:  # the reservation moved running containers: the cache must know where they are
            self.save()
        edits = self.policy.create_edits(key)
        if cpus is None and mems is None and edits is None:
            return HookResult(updates=updates, call=record)
        new_request = type(request)()
        new_request.CopyFrom(request)
        if edits is not None:
            edits.apply(new_request.config)
        resources = new_request.config.linux.resources
        if cpus is not None:
            resources.cpuset_cpus = format_cpuset(cpus)
        if mems is not None:
            resources.cpuset_mems = format_cpuset(mems)
        return HookResult(request=new_request, updates=updates, call=record)

    def _older_instances(self, container: ContainerInfo) -> list[str]:
        """Created containers of the same pod and name that still hold resources (earlier restarts' instances)."""
        placed, pod_id, name = self.policy.containers, container.pod_id, container.name
        if not name:
            return []
        # Every create scans every container: locals, and the pod first (it rules out most at once), keep
        # this at ~7 us for 200 containers.
        return [cid for cid, c in self.containers.items() if c.pod_id == pod_id and c.name == name and cid in placed]

    def _after_create(self, request: Message, response: Message, record: PendingCreate | None
                      ) -> list[ContainerUpdate]:
        cid = response.container_id
        self._mutations += 1
        if record is None or record.key not in self.policy.containers:
            # Not decided by us (e.g. the hook failed before); adopt it now.
            pod = self.pods.get(request.pod_sandbox_id)
            container = container_from_create_request(request, pod)
            container.id = cid
            old = self.policy.group_state()
            self.containers[cid] = container
            self.policy.allocate(cid, container)
            self.save()
            return diff_groups(self.policy, old, skip=cid, reason="container adopted")
        if cid in self.policy.containers:  # a resync adopted it meanwhile; the reservation knows its real resources
            self.policy.release(cid)
        self.policy.rename(record.key, cid)
        container = self.policy.containers[cid]
        container.id = cid
        self.containers[cid] = container
        self.save()
        # Decisions made while the runtime created it moved its group, but a pending container
        # gets no updates: the cpuset it was created with may be stale now.
        cpus, mems = self.policy.placement(cid)
        now = (fmt_cpus(cpus), fmt_cpus(mems))
        if now != record.placement and (cpus is not None or mems is not None):
            return [ContainerUpdate(cid, now[0], now[1], reason="placement changed while it was created")]
        return []

    def _undo_refused_resize(self, undo: PendingResize) -> list[ContainerUpdate]:
        cid = undo.cid
        log.warning("UpdateContainerResources of %s did not succeed; undoing its resize", cid)
        if cid not in self.policy.containers:
            return []  # removed meanwhile: nothing left to undo
        before = self.policy.placements()
        self.containers[cid] = undo.container
        if undo.mutation == self._mutations:
            # Nothing was decided since: restoring the exported state (not release + allocate) gives
            # back exactly the CPUs every container had, so the runtime, which kept them, agrees with
            # the policy again.
            live = dict(self.policy.containers)
            live[cid] = undo.container
            self.policy.restore_state(undo.state, live)
        else:
            # Other decisions came in between and must survive: place it again with its own resources.
            self._place(cid, undo.container, always=True)
        # The reservation was saved: the cache must not keep the refused size (found by the concurrent-calls
        # state machine: a restart restored a balloon member with the size kubelet's failed resize asked for).
        self.save()
        self._mutations += 1
        after = self.policy.placements()
        updates = diff_placements(before, after, reason=f"resize of {cid} refused")
        cpus, mems = after[cid]
        # The runtime kept what the container had before the resize; it must end up where the policy says.
        if (cpus, mems) != undo.placement and (cpus is not None or mems is not None) and \
                all(u.container_id != cid for u in updates):
            updates.append(ContainerUpdate(cid, fmt_cpus(cpus), fmt_cpus(mems), reason=f"resize of {cid} refused"))
        return updates

    def _drop_failed_create(self, record: PendingCreate) -> list[ContainerUpdate]:
        if record.key not in self.policy.containers:
            return []
        log.warning("CreateContainer did not succeed; releasing its allocation")
        old = self.policy.group_state()
        self.policy.release(record.key)
        self._mutations += 1
        # Releasing need not undo the decision exactly (a balloon shrinks by other CPUs than it
        # grew by), so the cache must learn the new state, or a restart restores the old one.
        self.save()
        return diff_groups(self.policy, old, reason="failed create released")

    def _resize(self, request: Message) -> tuple[PendingResize | None, list[ContainerUpdate]]:
        """Kubelet changed a container's CPU/memory (in-place resize): re-place it if it asks for more or less."""
        cid = request.container_id
        container = self.containers.get(cid)
        if container is None or cid not in self.policy.containers or not request.HasField("linux"):
            return None, []
        if not request.linux.cpu_shares:  # not kubelet's resource update (e.g. only a cpuset change)
            return None, []
        resources = estimate_linux_resources(request.linux)
        if resources == (container.request_milli, container.limit_milli, container.memory_limit):
            return None, []
        resized = dataclasses.replace(container, request_milli=resources[0], limit_milli=resources[1],
                                      memory_limit=resources[2])
        undo = PendingResize(cid, container, self.policy.export_state(), self.policy.placement(cid))
        old = self.policy.group_state()
        # Saved once the runtime applied it (after); only the groups it moved are diffed (hot path).
        self._place(cid, resized, always=True)
        self.containers[cid] = resized
        self._mutations += 1
        undo.mutation = self._mutations
        self._resizes[id(undo)] = undo
        log.info("container %s resized to request=%dm limit=%dm memory=%d", cid, *resources)
        return undo, diff_groups(self.policy, old, skip=cid, reason=f"container {cid} resized")

    def _enforce_update(self, request: Message) -> tuple[Message | None, ContainerUpdate | None]:
        """Kubelet's update with the policy's cpuset, and that cpuset as an update (ordered with the others)."""
        cid = request.container_id
        if cid not in self.policy.containers:
            return None, None
        cpus, mems = self.policy.placement(cid)
        if cpus is None and mems is None:
            return None, None
        new_request = type(request)()
        new_request.CopyFrom(request)
        if cpus is not None:
            new_request.linux.cpuset_cpus = format_cpuset(cpus)
        if mems is not None:
            new_request.linux.cpuset_mems = format_cpuset(mems)
        return new_request, ContainerUpdate(cid, fmt_cpus(cpus), fmt_cpus(mems), reason="kubelet update")

    def _release(self, cids: list[str], *, forget: bool, reason: str) -> list[ContainerUpdate]:
        if not cids:
            return []
        old = self.policy.group_state()
        changed = False
        for cid in cids:
            if cid in self.policy.containers:
                self.policy.release(cid)
                changed = True
            if forget and self.containers.pop(cid, None) is not None:
                changed = True
        if changed:
            self._mutations += 1
            self.save()
        return diff_groups(self.policy, old, reason=reason)

    # -- re-placing running containers ----------------------------------------------------------------
    def running(self) -> list[tuple[ContainerInfo, PodInfo | None]]:
        """The containers the policy placed that the runtime created, with their pods."""
        with self._lock:
            return [(c, self.pods.get(c.pod_id)) for cid, c in self.containers.items()
                    if cid and not cid.startswith(PENDING_PREFIX) and cid in self.policy.containers]

    def re_place(self, resize: Mapping[str, Resize | None], *, reason: str) -> RePlaced:
        """Let the policy place containers again with other resources: release, allocate, save, diff, under the lock.

        For each container id, ``resize`` maps the container's own resources to what the policy should
        see (None: its own). A container the policy cannot place that way goes back to its own resources
        and its error is returned; ids that are not running are listed as missing. The returned updates
        move every container whose placement changed.
        """
        result = RePlaced()
        with self._lock:
            old = self.policy.placements()
            changed = False
            for cid in sorted(resize):
                own = self.containers.get(cid)
                if own is None or cid not in self.policy.containers:
                    result.missing.append(cid)
                    continue
                change = resize[cid]
                try:
                    changed |= self._place(cid, own if change is None else change(own))
                except Exception as exc:  # the policy could not place it: put the container back as it was
                    log.error("re-placing %s failed: %s", cid, exc)
                    result.errors[cid] = f"the {self.policy.name} policy could not apply it: {exc}"
                    self._place(cid, own, always=True)
                    changed = True
            if changed:
                self._mutations += 1
                self.save()
            result.updates = self._number(diff_placements(old, self.policy.placements(), reason=reason))
        return result

    def _place(self, cid: str, target: ContainerInfo, *, always: bool = False) -> bool:
        """Release and allocate ``cid`` as ``target`` unless the policy already sees those resources."""
        if not always and _same_resources(self.policy.containers[cid], target):
            return False
        self.policy.release(cid)
        self.policy.allocate(cid, target)
        return True

    # -- controllers (resmgr.control) -----------------------------------------------------------------
    def _running_ids(self) -> list[str]:
        return [cid for cid in self.containers if cid and not cid.startswith(PENDING_PREFIX)
                and cid in self.policy.containers]

    def _apply_container_classes(self, cid: str) -> dict[str, str]:
        """Put a started container into its RDT and block I/O classes (never raises: logged and counted)."""
        container = self.containers.get(cid)
        if container is None:
            return {}
        return self.controllers.container_started(container, self.pods.get(container.pod_id),
                                                  self.class_overrides.get(cid))

    def _sync_cpu_classes(self) -> None:
        if self.controllers.running["cpu"] and self.controllers.cpu.active:  # no classes: nothing to follow
            self.controllers.sync_cpu_classes(self.policy.cpu_classes())

    def set_class_overrides(self, overrides: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
        """Adjustments' ``classes`` (container id -> {rdt, blockio}); containers whose classes changed are
        re-assigned now. Returns what was applied per container."""
        with self._lock:
            wanted = {cid: dict(c) for cid, c in overrides.items() if c}
            changed = {cid for cid in set(wanted) | set(self.class_overrides)
                       if wanted.get(cid) != self.class_overrides.get(cid)}
            self.class_overrides = wanted
            return {cid: self._apply_container_classes(cid) for cid in sorted(changed) if cid in self.containers}

    # -- configuration --------------------------------------------------------------------------------
    def set_config(self, config: dict[str, Any], *, source: str = "agent") -> list[ContainerUpdate]:
        """Apply a new (already schema-validated) config at runtime.

        Raises ConfigError naming the field if it is rejected; the previous config
        stays active. Another policy is switched to live (every container re-placed, the
        result persisted), unless ``--disable-policy-switch`` was given: then it is refused.
        """
        with self._lock:
            if self.forced:
                raise ConfigError("<document>", "a forced config (--force-config) is in effect; "
                                                "configuration updates are ignored", source=source)
            return self._number(self._apply(config, source))

    def _apply(self, config: dict[str, Any], source: str) -> list[ContainerUpdate]:
        wanted = active_policy_name(config)
        switching = wanted != self.policy.name
        if switching and self.disable_policy_switch:
            raise ConfigError("policy.Active",
                              f"switching the active policy from {self.policy.name!r} to {wanted!r} is disabled "
                              f"(--disable-policy-switch); {self.policy.name!r} stays active", source=source)
        try:
            policy = create_policy(config, self.topology, sysfs_root=self.sysfs_root)
            self.controllers.configure(config)  # a Required controller that cannot apply it refuses the config
        except ConfigError as exc:
            raise exc.with_source(source) from None
        old = self.policy.placements()
        live = dict(self.policy.containers)
        if switching:
            # A live switch: every container (pending reservations too) is placed again by the new
            # policy; the diff below moves their cgroups through the ordered update path.
            log.info("switching policy from %s to %s at runtime: re-placing %d containers", self.policy.name,
                     wanted, len(live))
            for cid, c in live.items():
                policy.allocate(cid, c)
        else:
            self._carry_over(policy, live)
        self.policy = policy
        self._mutations += 1
        self.config, self.config_source = config, source
        if not self.forced:
            self._cached_config = (config, source)
        self.save()
        for cid in self._running_ids():  # new class definitions apply to running containers too (upstream)
            self._apply_container_classes(cid)
        log.info("applied config from %s (policy %s)", source, policy.name)
        return diff_placements(old, policy.placements(), reason="config changed")

    def _carry_over(self, policy: Policy, live: dict[str, ContainerInfo]) -> None:
        """Same policy, new config: keep the allocations that still fit, re-allocate if they do not."""
        try:
            policy.restore_state(self.policy.export_state(), live)
            for cid, c in live.items():
                if cid not in policy.grants and policy.name != "none":
                    policy.allocate(cid, c)
        except RestoreError as exc:
            log.info("allocations do not fit the new config (%s); re-allocating", exc)
            policy.state.clear()
            for cid, c in live.items():
                policy.allocate(cid, c)

    # -- restart reconciliation -----------------------------------------------------------------------
    def sync_with_runtime(self, pods: list[Any], containers: list[Any], resources: dict[str, Any] | None = None,
                          since: tuple[frozenset[str], frozenset[str]] | None = None) -> list[ContainerUpdate]:
        """Reconcile with what the runtime lists after a (re)start.

        ``pods``/``containers`` are CRI ``PodSandbox``/``Container`` messages;
        ``resources`` optionally maps container id -> ``ContainerResources`` from
        ContainerStatus (its ``linux`` resources are used to estimate adopted
        containers and to find cgroups that disagree with the policy). Gone pods
        and containers are dropped, unknown ones adopted. Returns the updates that
        bring the runtime in line with the policy: without ``resources`` the
        runtime's cpusets are unknown (a crash may have cut an operation short), so
        every placed container gets one; updates are idempotent.

        ``since`` (from ``begin_resync``, for a resync while calls go on) limits what is dropped to
        the pods and containers known before the listing was taken.
        """
        known = resources is not None
        resources = resources or {}
        with self._lock:
            old = self.policy.placements()
            listed_pods = {p.id: p for p in pods}
            for pid in [pid for pid in self.pods if pid not in listed_pods and (since is None or pid in since[0])]:
                del self.pods[pid]
            for pid, p in listed_pods.items():
                if pid not in self.pods:
                    self.pods[pid] = pod_from_listed_sandbox(p)
            listed = {c.id: c for c in containers}
            gone = [cid for cid in self.containers if cid not in listed and (since is None or cid in since[1])]
            exited = [cid for cid, c in listed.items() if c.state == CONTAINER_EXITED]
            for cid in gone:
                self.policy.release(cid)
                del self.containers[cid]
            for cid in exited:
                self.policy.release(cid)
            adopted = []
            for cid, c in listed.items():
                if cid in self.containers or c.state == CONTAINER_EXITED:
                    if cid not in self.containers:
                        self.containers[cid] = container_from_listed(c, self.pods.get(c.pod_sandbox_id))
                    continue
                res = resources.get(cid)
                linux = res.linux if res is not None and res.HasField("linux") else None
                info = container_from_listed(c, self.pods.get(c.pod_sandbox_id), linux)
                self.containers[cid] = info
                self.policy.allocate(cid, info)
                adopted.append(cid)
            if gone or adopted or exited:
                log.info("synced with runtime: dropped %d gone, released %d exited, adopted %d unknown containers",
                         len(gone), len(exited), len(adopted))
            new = self.policy.placements()
            updates = diff_placements(old, new, reason="synced with runtime")
            pending = {u.container_id for u in updates}
            unknown = sorted(self._unsynced) if known else [
                cid for cid in new if not cid.startswith(PENDING_PREFIX) and (
                    cid not in listed or listed[cid].state != CONTAINER_EXITED)]
            for cid in [*adopted, *unknown]:
                cpus, mems = new.get(cid, (None, None))
                if (cpus is not None or mems is not None) and cid not in pending:
                    updates.append(ContainerUpdate(cid, fmt_cpus(cpus), fmt_cpus(mems), reason="re-placed at startup"))
                    pending.add(cid)
            self._unsynced.clear()
            for cid in [cid for cid, c in listed.items() if c.state == CONTAINER_RUNNING]:
                self._apply_container_classes(cid)  # after a restart: re-assert RDT and block I/O classes
            for cid, res in resources.items():
                if cid in pending or cid not in new or not res.HasField("linux"):
                    continue
                cpus, mems = new[cid]
                want_c, want_m = fmt_cpus(cpus), fmt_cpus(mems)
                if (want_c is not None and want_c != res.linux.cpuset_cpus) or (
                        want_m is not None and want_m != res.linux.cpuset_mems):
                    updates.append(ContainerUpdate(cid, want_c, want_m, reason="cgroup disagrees with policy"))
            self._mutations += 1
            self.save()
            return self._number(updates)
