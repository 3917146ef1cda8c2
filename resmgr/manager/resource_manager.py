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

import logging
import threading
from itertools import count
from pathlib import Path
from typing import Any

from resmgr.config import ConfigError, validate_config
from resmgr.config.sections import ConfigSections
from resmgr.control.controllers import Controllers
from resmgr.manager.cache import Cache, CacheEncoder
from resmgr.manager.controllers_timers import ControllersTimers
from resmgr.manager.deadline_timers import DeadlineTimers
from resmgr.manager.decisions import CriDecisions
from resmgr.manager.explanations import Explanations
from resmgr.manager.outbox import UpdateOutbox
from resmgr.manager.placement_diff import PENDING_PREFIX
from resmgr.manager.reconfiguration import Reconfiguration
from resmgr.manager.resync import Resync
from resmgr.manager.state import STOPPED_KEY, PendingCreate, PendingResize, RePlaced, Resize
from resmgr.model.resources import (
    ContainerInfo,
    PodInfo,
)
from resmgr.model.state import Lifecycle, NodeState
from resmgr.options import DEFAULT_RELAY_DIR
from resmgr.relay.hooks import ContainerUpdate
from resmgr.topology.model import Topology

__all__ = ["RePlaced", "Resize", "ResourceManager"]

log = logging.getLogger("resmgr.resource-manager")


class ResourceManager(CriDecisions, Reconfiguration, Resync, ControllersTimers, Explanations):
    """Holds pods, the registry of containers (``state``) and the active policy; implements the relay hook (its jobs
    in the mixins)."""

    def __init__(self, topology: Topology, *, relay_dir: str | Path = DEFAULT_RELAY_DIR,
                 fallback_config: dict[str, Any] | None = None, force_config: dict[str, Any] | None = None,
                 disable_policy_switch: bool = False, sysfs_root: str = "/", cache_fsync: bool = True,
                 background_save: bool = False, cgroup_root: str | Path = "/sys/fs/cgroup",
                 resctrl_root: str | Path = "/sys/fs/resctrl", outbox: UpdateOutbox | None = None) -> None:
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
        self._drifted: frozenset[str] = frozenset()  # cpuset drift found at the last checks (Explanations)
        self._differed: frozenset[str] = frozenset()
        self._cgroup_dirs: dict[str, Path] = {}
        self._drift_lock = threading.Lock()
        # Updates no hook call returns (cold starts on timers, rebalancing, configs, Adjustments) go out here;
        # cold-start timers arm once it is bound to the relay.
        self.outbox = outbox if outbox is not None else UpdateOutbox()
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
        self.state = NodeState()
        for pid, p in data.pods.items():
            try:
                self.pods[pid] = PodInfo.from_json(p)
            except TypeError as exc:
                log.error("dropping malformed cached pod %s: %s", pid, exc)
        # The cache keeps no lifecycles: the containers it lists as holding nothing come back stopped, the others
        # running; the first resync corrects both from the runtime's listing.
        listed = (data.policy_data or {}).get(STOPPED_KEY)
        stopped = {cid for cid in listed if isinstance(cid, str)} if isinstance(listed, list) else set()
        for cid, c in data.containers.items():
            try:
                info = ContainerInfo.from_json(c)
            except TypeError as exc:
                log.error("dropping malformed cached container %s: %s", cid, exc)
                continue
            self.state.register(cid, info, Lifecycle.STOPPED if cid in stopped else Lifecycle.RUNNING)
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
        self.controllers.configure(ConfigSections.of(self.config), strict=False)
        self._sync_cpu_classes()
        self.outbox.when_bound(self._arm_timers)
        log.info("resource manager ready: policy %s (config from %s) on %s", self.policy.name, source,
                 topology.describe())

    def close(self) -> None:
        """Write the last state to the cache (it may still be pending with ``background_save``)."""
        self._cold_timers.cancel_all()
        self.cache.close()

    def _decided(self, updates: list[ContainerUpdate], *also: ContainerUpdate | None) -> list[ContainerUpdate]:
        """End a decision: what follows the policy catches up (``_follow_policy``), and its updates get the next
        decision number, so that newer ones win (resmgr.relay.update_order)."""
        self._follow_policy()
        seq = next(self._decisions)
        for u in (*updates, *also):
            if u is not None:
                u.seq = seq
        return updates
