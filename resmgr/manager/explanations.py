"""Placement explanations and cpuset drift: what the policy decided for each container and why (for the agent's
Events and the unpinned-containers metric), and which containers' cgroups no longer hold the decided cpuset."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from resmgr.control.cgroups import CgroupError, controller_root, find_container_dir
from resmgr.manager.placement_diff import PENDING_PREFIX, fmt_cpus
from resmgr.manager.state import ManagerState
from resmgr.model.explanation import UNPINNED_REASONS, Explanation
from resmgr.model.resources import ContainerInfo, PodInfo
from resmgr.policy.base import Policy
from resmgr.topology.cpuset import CpusetError, parse_cpuset

log = logging.getLogger("resmgr.resource-manager")


def explain(policy: Policy, known: Mapping[str, ContainerInfo], pods: Mapping[str, PodInfo]) -> list[Explanation]:
    """Where ``policy`` placed each container it holds that is in ``known`` (pending reservations left out), and why:
    the active policy's for GetPlacements, a candidate's for a dry run."""
    out = []
    for cid, c in policy.containers.items():
        if cid.startswith(PENDING_PREFIX) or cid not in known:
            continue
        pod = pods.get(c.pod_id)
        cpus, mems = policy.placement(cid)
        pool, unpinned, detail = policy.explain(cid)
        out.append(Explanation(namespace=c.namespace, pod=c.pod_name, pod_uid=pod.uid if pod else "",
                               container=c.name, container_id=cid, cpus=fmt_cpus(cpus) or "",
                               mems=fmt_cpus(mems) or "", pool=pool, unpinned=unpinned, detail=detail))
    return out


class Explanations(ManagerState):
    """``explanations``, ``unpinned_counts`` and the cpuset drift check run at every resync look."""

    _drifted: frozenset[str]  # containers whose cgroup differed at the last two checks
    _differed: frozenset[str]  # those whose cgroup differed at the last check
    _cgroup_dirs: dict[str, Path]  # container id -> its cgroup directory, once found
    _drift_lock: threading.Lock  # one check at a time (the drift-check thread and a resync may meet)

    def explanations(self) -> list[Explanation]:
        """One record per container the runtime created and the policy holds (pending reservations left out)."""
        with self._lock:
            return explain(self.policy, self.containers, self.pods)

    def unpinned_counts(self) -> list[tuple[tuple[str], float]]:
        """((reason,), containers not pinned for it) for the metrics; every reason listed, zeros included."""
        counts = Counter(e.unpinned for e in self.explanations() if e.unpinned)
        return [((reason,), float(counts.get(reason, 0))) for reason in UNPINNED_REASONS]

    def drifted_containers(self) -> float:
        """How many containers' cgroup cpuset differed from the decision at the last two checks (for the metrics)."""
        return float(len(self._drifted))

    def check_cpuset_drift(self) -> frozenset[str]:
        """Read each placed container's cpuset.cpus from the host cgroup and compare it with the decision.

        The runtime's ContainerStatus says what it was last told, not what the cgroup holds: something writing
        the cgroup behind the relay's back shows only here. Files are read outside the lock; a container whose
        cgroup cannot be found or read (not started yet, gone meanwhile) does not count. Only a difference seen at
        two checks in a row counts: an update on its way to the runtime differs for one look at most."""
        with self._lock:
            wanted: dict[str, tuple[frozenset[int], str]] = {}
            for cid, (cpus, _) in self.policy.placements().items():
                c = self.containers.get(cid)
                if cpus is None or c is None or cid.startswith(PENDING_PREFIX):
                    continue
                pod = self.pods.get(c.pod_id)
                wanted[cid] = (cpus, pod.cgroup_parent if pod else "")
        with self._drift_lock:
            return self._compare_cgroups(wanted)

    def _compare_cgroups(self, wanted: dict[str, tuple[frozenset[int], str]]) -> frozenset[str]:
        hierarchy = controller_root(Path(self.controllers.cgroup_root), "cpuset")
        dirs = self._cgroup_dirs
        for cid in [cid for cid in dirs if cid not in wanted]:
            del dirs[cid]
        drifted = set()
        for cid, (cpus, parent) in wanted.items():
            try:
                cgroup = dirs.get(cid) or find_container_dir(hierarchy, parent, cid)
                text = (cgroup / "cpuset.cpus").read_text().strip()
            except (CgroupError, OSError):
                dirs.pop(cid, None)
                continue
            dirs[cid] = cgroup
            try:
                if text and parse_cpuset(text) != cpus:  # empty (cgroup v2): inherited, nothing set to compare
                    drifted.add(cid)
            except CpusetError:
                continue
        lasting = frozenset(drifted) & self._differed
        self._differed = frozenset(drifted)
        if lasting and lasting != self._drifted:
            log.warning("%d container(s) run on other CPUs than the policy decided, e.g. %s", len(lasting),
                        sorted(lasting)[0][:13])
        self._drifted = lasting
        return lasting
