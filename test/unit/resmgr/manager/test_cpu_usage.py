"""Containers' CPU usage from fake cgroup trees (v1 cpuacct, v2 cpu.stat), and the rebalancer that hands
it to the resource manager: a busy pool takes the left-over CPUs, the updates reach the runtime."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.seed_configs import DYNAMIC_POOLS_APP
from unit.resmgr.rm_driver import Driver

from resmgr.control.cgroups import parent_dir
from resmgr.manager.cpu_usage import Rebalancer, UsageSampler, read_cpu_usec
from resmgr.topology import Topology

CONFIG = DYNAMIC_POOLS_APP


class CgroupTree:
    """A cgroup tree with one CPU time file per container, v1 (cpuacct hierarchy) or v2 (unified)."""

    def __init__(self, root: Path, unified: bool) -> None:
        self.root, self.unified = root, unified
        if unified:
            root.mkdir(parents=True, exist_ok=True)
            (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")

    def set_usec(self, parent: str, cid: str, usec: int) -> None:
        base = self.root if self.unified else self.root / "cpuacct"
        d = base / parent_dir(parent) / cid
        d.mkdir(parents=True, exist_ok=True)
        if self.unified:
            (d / "cpu.stat").write_text(f"usage_usec {usec}\nuser_usec {usec // 2}\nsystem_usec {usec // 2}\n")
        else:
            (d / "cpuacct.usage").write_text(f"{usec * 1000}\n")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("unified", [True, False], ids=["v2", "v1"])
def test_sampler_turns_cpu_time_into_millicpu(tmp_path: Path, unified: bool) -> None:
    tree, clock = CgroupTree(tmp_path, unified), Clock()
    parent = "/kubepods/burstable/pod1"
    tree.set_usec(parent, "c1", 1_000_000)
    assert read_cpu_usec(tmp_path, parent, "c1") == 1_000_000
    sampler = UsageSampler(tmp_path, clock=clock)
    assert sampler.sample([("c1", parent), ("gone", parent)]) == {}  # first reading: nothing to compare
    clock.now += 2
    tree.set_usec(parent, "c1", 4_000_000)  # 3 s of CPU in 2 s: 1.5 CPUs
    assert sampler.sample([("c1", parent), ("gone", parent)]) == {"c1": 1500}


def test_systemd_slices_are_found(tmp_path: Path) -> None:
    tree = CgroupTree(tmp_path, True)
    parent = "kubepods-burstable-pod1.slice"
    d = tmp_path / "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-c1.scope"
    d.mkdir(parents=True)
    (d / "cpu.stat").write_text("usage_usec 42\n")
    assert tree.unified and read_cpu_usec(tmp_path, parent, "c1") == 42


def test_rebalancer_moves_cpus_to_the_busy_pool(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path / "state", CONFIG)
    tree, clock = CgroupTree(tmp_path / "cgroup", True), Clock()
    app = d.create(d.run_pod("app", namespace="app", qos="burstable"), "c", 1000)
    web = d.create(d.run_pod("web", qos="burstable"), "c", 1000)
    parents = {cid: d.runtime.pods[d.runtime.container_pod[cid]].linux.cgroup_parent for cid in (app, web)}
    sent: list[tuple[list, str]] = []

    def apply(updates: list, why: str) -> None:
        sent.append((updates, why))
        d.runtime.apply(updates)
    rebalancer = Rebalancer(d.rm, apply, interval=0, sampler=UsageSampler(tmp_path / "cgroup", clock=clock))
    for cid in (app, web):
        tree.set_usec(parents[cid], cid, 0)
    assert rebalancer.run_once() == [] and not sent  # first readings: no usage yet, nothing moves
    assert len(d.rm.policy.pool_cpus()["app"]) == 1
    clock.now += 10
    tree.set_usec(parents[app], app, 30_000_000)  # 3 CPUs busy
    tree.set_usec(parents[web], web, 1_000_000)  # 0.1 CPU
    updates = rebalancer.run_once()
    assert updates and sent[-1][1] == "rebalance"
    pools = d.rm.policy.pool_cpus()
    # 125 CPUs beyond the requests, 30:1 by usage: app 1 + 120, shared 1 + 4 and the remainder to app.
    assert len(pools["app"]) == 1 + 120 + 1 and len(pools["shared"]) == 5
    assert d.runtime_view() == d.rm.placements(), "every member of a resized pool got its update"
    # Idle again: the left-over CPUs go back to shared.
    clock.now += 10
    tree.set_usec(parents[app], app, 30_000_000)
    tree.set_usec(parents[web], web, 1_000_000)
    rebalancer.run_once()
    assert len(d.rm.policy.pool_cpus()["app"]) == 1 and len(d.rm.policy.pool_cpus()["shared"]) == 126
    assert d.runtime_view() == d.rm.placements()
    # Nothing changed: nothing sent.
    count = len(sent)
    clock.now += 10
    assert rebalancer.run_once() == [] and len(sent) == count


def test_rebalancer_leaves_other_policies_alone(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, "policy:\n  Active: static\n")
    sampler = UsageSampler(tmp_path / "nothing")
    assert Rebalancer(d.rm, lambda u, w: None, interval=0, sampler=sampler).run_once() == []
