"""Placement explanations per policy (pinned, and not pinned with the policy's reason), the unpinned and drift
gauges read from the metrics registry, and the cgroup cpuset drift check over a cgroup v1 tree."""

from __future__ import annotations

from pathlib import Path

import pytest
from unit.resmgr.rm_driver import Driver

from resmgr.control.cgroups import parent_dir
from resmgr.model.explanation import (
    FRACTIONAL_CPU,
    NO_BALLOON,
    NO_FREE_CPUS,
    NOT_GUARANTEED,
    POLICY_NONE,
    RESERVED_NAMESPACE,
    UNPINNED_REASONS,
    Explanation,
)
from resmgr.relay.metrics import RelayMetrics
from resmgr.topology import Topology, parse_cpuset

TOPO = "2s-2n-16c-2t"  # 128 CPUs
STATIC = "policy:\n  Active: static\n  ReservedResources:\n    cpu: cpuset:0,64\n"
TA = "policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: cpuset:0\n"
NONE = "policy:\n  Active: none\n"
BALLOONS = """policy:
  Active: balloons
  ReservedResources:
    cpu: cpuset:0
  balloons:
    BalloonTypes:
    - Name: one
      MaxCPUs: 2
      MaxBalloons: 1
      Namespaces: [one]
"""


def by_container(d: Driver) -> dict[str, Explanation]:
    return {e.container_id: e for e in d.rm.explanations()}


@pytest.mark.parametrize("config", [STATIC, TA], ids=["static", "topology-aware"])
def test_guaranteed_integer_is_pinned_others_say_why(topologies: dict[str, Topology], tmp_path: Path,
                                                      config: str) -> None:
    d = Driver(topologies[TOPO], tmp_path, config)
    g = d.create(d.run_pod("g", qos="guaranteed"), "c", 2000)
    be = d.create(d.run_pod("be"), "c")
    bu = d.create(d.run_pod("bu", qos="burstable"), "c", 500)
    frac = d.create(d.run_pod("f", qos="guaranteed"), "c", 500)
    got = by_container(d)
    pinned = got[g]
    assert pinned.pinned and pinned.event_reason == "CPUsPinned"
    assert parse_cpuset(pinned.cpus) == parse_cpuset(d.runtime.cpusets[g][0]) and len(parse_cpuset(pinned.cpus)) == 2
    assert pinned.pool == d.rm.policy.grants[g].pool and pinned.namespace == "default" and pinned.pod == "g"
    assert pinned.container == "c" and pinned.pod_uid
    assert got[be].unpinned == NOT_GUARANTEED and got[bu].unpinned == NOT_GUARANTEED
    assert got[frac].unpinned == FRACTIONAL_CPU
    assert got[be].event_reason == "NotPinned" and "not pinned: not-guaranteed" in got[be].message()
    assert got[be].cpus == d.runtime.cpusets[be][0]


@pytest.mark.parametrize("config", [STATIC, TA], ids=["static", "topology-aware"])
def test_not_enough_free_cpus(topologies: dict[str, Topology], tmp_path: Path, config: str) -> None:
    d = Driver(topologies[TOPO], tmp_path, config)
    big = d.create(d.run_pod("big", qos="guaranteed"), "c", 128_000)
    assert by_container(d)[big].unpinned == NO_FREE_CPUS


def test_topology_aware_reserved_namespace(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies[TOPO], tmp_path, TA)
    s = d.create(d.run_pod("s", namespace="kube-system", qos="burstable"), "c", 100)
    e = by_container(d)[s]
    assert e.unpinned == RESERVED_NAMESPACE and e.cpus == "0"


def test_none_policy_explains_every_container(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies[TOPO], tmp_path, NONE)
    g = d.create(d.run_pod("g", qos="guaranteed"), "c", 2000)
    e = by_container(d)[g]
    assert e.unpinned == POLICY_NONE and e.cpus == "" and e.pool == ""
    assert "not pinned: policy-none" in e.message()


def test_balloons_pinned_and_no_balloon(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies[TOPO], tmp_path, BALLOONS)
    first = d.create(d.run_pod("a", namespace="one", qos="guaranteed"), "c", 2000)
    second = d.create(d.run_pod("b", namespace="one", qos="guaranteed"), "c", 2000)
    sys_ctr = d.create(d.run_pod("s", namespace="kube-system", qos="burstable"), "c", 100)
    got = by_container(d)
    assert got[first].pinned and got[first].pool == d.rm.policy.grants[first].pool
    assert got[first].detail == "its balloon's CPUs"
    assert got[second].unpinned == NO_BALLOON and got[second].cpus == ""
    assert got[sys_ctr].unpinned == RESERVED_NAMESPACE


def test_explanation_survives_a_restart_from_the_cache(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies[TOPO], tmp_path, STATIC)
    frac = d.create(d.run_pod("f", qos="guaranteed"), "c", 500)
    d.restart()
    assert by_container(d)[frac].unpinned == FRACTIONAL_CPU


def gauge(metrics: RelayMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = metrics.registry.exposition().decode()
    from prometheus_client.parser import text_string_to_metric_families
    return {tuple(sorted(s.labels.items())): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == name}


def test_unpinned_gauge_counts_containers_per_reason(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies[TOPO], tmp_path, STATIC)
    metrics = RelayMetrics()
    metrics.watch_placements(d.rm.unpinned_counts, d.rm.drifted_containers)
    d.create(d.run_pod("g", qos="guaranteed"), "c", 2000)
    d.create(d.run_pod("be1"), "c")
    d.create(d.run_pod("be2"), "c")
    d.create(d.run_pod("f", qos="guaranteed"), "c", 1500)
    got = gauge(metrics, "cri_resmgr_unpinned_containers")
    assert got[(("reason", NOT_GUARANTEED),)] == 2
    assert got[(("reason", FRACTIONAL_CPU),)] == 1
    assert set(got) == {(("reason", r),) for r in UNPINNED_REASONS}
    assert sum(got.values()) == 3
    assert gauge(metrics, "cri_resmgr_placement_drift_containers") == {(): 0.0}


def test_cpuset_drift_is_seen_in_the_cgroup(topologies: dict[str, Topology], tmp_path: Path) -> None:
    cgroups = tmp_path / "cgroup"
    d = Driver(topologies[TOPO], tmp_path / "relay", STATIC)
    d.rm = d.new_rm(cgroup_root=cgroups)
    metrics = RelayMetrics()
    metrics.watch_placements(d.rm.unpinned_counts, d.rm.drifted_containers)
    pod = d.run_pod("g", qos="guaranteed")
    g = d.create(pod, "c", 2000)
    be = d.create(d.run_pod("be"), "c")
    for cid in (g, be):  # the cgroup v1 cpuset files, as runc writes them
        parent = d.rm.pods[d.rm.containers[cid].pod_id].cgroup_parent
        directory = cgroups / "cpuset" / parent_dir(parent) / cid
        directory.mkdir(parents=True)
        (directory / "cpuset.cpus").write_text(d.runtime.cpusets[cid][0] + "\n")
    assert d.rm.check_cpuset_drift() == frozenset()
    # Something writes g's cgroup behind the relay's back.
    parent = d.rm.pods[pod].cgroup_parent
    (cgroups / "cpuset" / parent_dir(parent) / g / "cpuset.cpus").write_text("5-6\n")
    d.rm.runtime_drift(d.runtime.listing()[1])  # the periodic resync look
    # One look may catch an update on its way: only a difference seen twice in a row counts.
    assert gauge(metrics, "cri_resmgr_placement_drift_containers") == {(): 0.0}
    d.rm.runtime_drift(d.runtime.listing()[1])
    assert gauge(metrics, "cri_resmgr_placement_drift_containers") == {(): 1.0}
    assert d.rm.check_cpuset_drift() == {g}
    (cgroups / "cpuset" / parent_dir(parent) / g / "cpuset.cpus").write_text(d.runtime.cpusets[g][0] + "\n")
    assert d.rm.check_cpuset_drift() == frozenset()
