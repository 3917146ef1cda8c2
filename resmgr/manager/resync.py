"""Resync with the runtime: calls that show a bypass, drift between listings and knowledge, exits, and the
reconciliation itself (``sync_with_runtime``)."""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from google.protobuf.message import Message

from resmgr.manager.placement_diff import PENDING_PREFIX, diff_placements, fmt_cpus
from resmgr.manager.state import (
    CONTAINER_EXITED,
    CONTAINER_RUNNING,
    ManagerState,
    listed_lifecycle,
)
from resmgr.model.resources import (
    container_from_listed,
    pod_from_listed_sandbox,
)
from resmgr.model.state import Lifecycle
from resmgr.relay.hooks import ContainerUpdate

log = logging.getLogger("resmgr.resource-manager")


class Resync(ManagerState):
    """Bypass notices, drift, exits and ``sync_with_runtime``."""

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
        self.check_cpuset_drift()
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
            return self._decided(self._release(released, forget=False, reason="container exited",
                                               ended=Lifecycle.EXITED))

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
                self.state.forget(cid)
            for cid in exited:
                self.policy.release(cid)
            adopted = []
            for cid, c in listed.items():
                lifecycle = listed_lifecycle(c.state)
                if cid in self.containers or c.state == CONTAINER_EXITED:
                    if cid not in self.containers:
                        self.state.register(cid, container_from_listed(c, self.pods.get(c.pod_sandbox_id)), lifecycle)
                    elif lifecycle is not Lifecycle.CREATED:  # what the runtime says now (a known one is not placed)
                        self.state.set_lifecycle(cid, lifecycle)
                    continue
                res = resources.get(cid)
                linux = res.linux if res is not None and res.HasField("linux") else None
                info = container_from_listed(c, self.pods.get(c.pod_sandbox_id), linux)
                self.state.register(cid, info, lifecycle)
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
            updates = self._decided(updates)
        self.check_cpuset_drift()  # before this resync's updates land: what it found
        return updates
