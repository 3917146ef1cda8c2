"""Containers' measured CPU usage, for policies that size pools by it (dynamic-pools).

Upstream's dynamic-pools reads /proc/stat per CPU and sums the CPUs of each pool; here each
container's own cgroup CPU time is read (cgroup v2 ``cpu.stat`` usage_usec, v1 ``cpuacct.usage``),
so what runs on a pool's CPUs outside its containers does not count for the pool. ``UsageSampler``
turns two readings into milli-CPU; ``Rebalancer`` does that every ``--rebalance-interval`` while
the active policy wants usage, and sends the container updates of the resize through the relay.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from resmgr.control.cgroups import CGROUP_ROOT, CgroupError, controller_root, find_container_dir, is_unified
from resmgr.relay.hooks import ContainerUpdate

log = logging.getLogger("resmgr.cpu-usage")

DEFAULT_REBALANCE_INTERVAL = 10.0  # seconds


def read_cpu_usec(cgroup_root: Path, cgroup_parent: str, container_id: str) -> int:
    """The container's cumulative CPU time in microseconds; CgroupError if it cannot be read."""
    try:
        if is_unified(cgroup_root):
            stat = find_container_dir(cgroup_root, cgroup_parent, container_id) / "cpu.stat"
            for line in stat.read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value)
            raise CgroupError(f"{stat} has no usage_usec")
        hierarchy = controller_root(cgroup_root, "cpuacct")
        return int((find_container_dir(hierarchy, cgroup_parent, container_id) / "cpuacct.usage").read_text()) // 1000
    except (OSError, ValueError) as exc:
        raise CgroupError(f"cannot read the CPU time of container {container_id}: {exc}") from None


class UsageSampler:
    """Milli-CPU each container used between two ``sample`` calls."""

    def __init__(self, cgroup_root: Path | str = CGROUP_ROOT, clock: Callable[[], float] = time.monotonic) -> None:
        self.cgroup_root = Path(cgroup_root)
        self.clock = clock
        self._last: dict[str, tuple[int, float]] = {}

    def sample(self, containers: Iterable[tuple[str, str]]) -> dict[str, int]:
        """(container id, pod cgroup parent) -> milli-CPU since the previous reading. A container seen for
        the first time, or whose cgroup cannot be read, is left out (the policy counts it as idle)."""
        now = self.clock()
        usage: dict[str, int] = {}
        readings: dict[str, tuple[int, float]] = {}
        for cid, parent in containers:
            try:
                usec = read_cpu_usec(self.cgroup_root, parent, cid)
            except CgroupError as exc:
                log.debug("%s", exc)
                continue
            readings[cid] = (usec, now)
            previous = self._last.get(cid)
            if previous is not None and now > previous[1] and usec >= previous[0]:
                usage[cid] = round((usec - previous[0]) / (now - previous[1]) / 1000)
        self._last = readings
        return usage


class Rebalancer:
    """Every ``interval`` seconds: sample the running containers' CPU usage, let the resource manager
    resize the pools by it, and hand the resulting container updates to ``apply`` (the relay)."""

    def __init__(self, rm: Any, apply: Callable[[list[ContainerUpdate], str], Any], interval: float,
                 sampler: UsageSampler | None = None) -> None:
        self.rm = rm
        self.apply = apply
        self.interval = interval
        self.sampler = sampler or UsageSampler()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self) -> list[ContainerUpdate]:
        if not self.rm.policy.wants_usage:
            return []
        running = [(c.id, pod.cgroup_parent if pod is not None else "") for c, pod in self.rm.running()]
        usage = self.sampler.sample(running)
        updates = self.rm.rebalance(usage)
        if updates:
            log.info("pools resized by CPU usage: %d container updates", len(updates),
                     extra={"usage_millicpu": sum(usage.values()), "containers": len(usage)})
            self.apply(updates, "rebalance")
        return updates

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.run_once()
            except Exception:  # a bad reading must not end the loop; the next interval tries again
                log.exception("rebalancing by CPU usage failed")

    def start(self) -> Rebalancer:
        if self.interval > 0:
            self._thread = threading.Thread(target=self._run, name="rebalancer", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
