"""The CPU allocator picks CPUs as upstream's pkg/cpuallocator does, on upstream's n4c16 e2e machine
(2 packages x 2 NUMA nodes x 2 cores x 2 threads; CPUs 0,1 are one core, node = cpu // 4)."""

from __future__ import annotations

import pytest
from unit.resmgr.policy.upstream_topologies import n4c16
from unit.resmgr.policy_helpers import policy_from_yaml

from resmgr.config import check_config_text
from resmgr.policy.base import resolve_cpu_resources
from resmgr.policy.cpu_allocator import AllocationError, Prefer, take_cpus
from resmgr.topology import Topology, format_cpuset, parse_cpuset
from resmgr.topology.model import PRIORITY_HIGH, PRIORITY_LOW


@pytest.fixture(scope="module")
def topo() -> Topology:
    return n4c16()


def take(topology: Topology, free: str, count: int, **kw) -> str:
    return format_cpuset(take_cpus(topology, parse_cpuset(free), count, **kw))


def test_reserved_quantity_as_upstream_topology_aware_e2e(topo: Topology) -> None:
    """upstream e2e topology-aware test05: AvailableResources cpuset:4-7,8-13 and ReservedResources 2250m
    reserve {4,5,6}: idle core 4-5, then a thread of the package already used (not {4,12,13})."""
    config = check_config_text("policy:\n  Active: topology-aware\n  AvailableResources:\n    cpu: cpuset:4-7,8-13\n"
                               "  ReservedResources:\n    cpu: 2250m\n")
    res = resolve_cpu_resources(config.sections.policy, topo)
    assert res.reserved == {4, 5, 6} and res.reserved_milli == 2250
    # topology-aware's reserved pool is that set
    assert policy_from_yaml(
        "policy:\n  Active: topology-aware\n  AvailableResources:\n    cpu: cpuset:4-7,8-13\n"
        "  ReservedResources:\n    cpu: 2250m\n", topo).reserved == {4, 5, 6}


def test_idle_packages_then_idle_cores_in_id_order(topo: Topology) -> None:
    assert take(topo, "0-15", 10) == "0-9"  # package 0, then core 8-9
    assert take(topo, "1-15", 8) == "8-15"  # package 1 is the only idle one
    # idle cores by id, not the NUMA node with the fewest free CPUs (that would be 6-7)
    assert take(topo, "0-3,6-7", 2) == "0-1"
    # whole NUMA nodes are not preferred: cores 2-3 and 4-5, not node 1 (4-7)
    assert take(topo, "2-15", 4) == "2-5"


def test_threads_prefer_the_package_already_used(topo: Topology) -> None:
    # core 4-5 is taken whole; the third CPU comes from the same package
    assert take(topo, "4-7,8-13", 3) == "4-6"
    assert take(topo, "5-15", 3) == "5-7"  # idle core 6-7, then lone thread 5 of the same package


def test_threads_rank_packages_by_fit(topo: Topology) -> None:
    """Lone threads: 0,2,4,6 in package 0 and 9,11 in package 1. NORMAL takes the tightest package that
    can hold the request, HIGH the one with the most free CPUs, NONE the lowest package id."""
    free = "0,2,4,6,9,11"
    assert take(topo, free, 2) == "9,11"
    assert take(topo, free, 2, prefer=Prefer.HIGH) == "0,2"
    assert take(topo, free, 2, prefer=Prefer.NONE) == "0,2"
    # a package that cannot hold the request loses to one that can
    assert take(topo, free, 3) == "0,2,4"
    # within a package: the core with fewer free CPUs first, then the lower id
    assert take(topo, "0-2", 1) == "2"


def test_cpu_priorities() -> None:
    """Package 1 is high priority, package 0 low. HIGH wants high CPUs; NORMAL and LOW avoid them."""
    topology = n4c16()
    topology.priority = {c: PRIORITY_HIGH if c >= 8 else PRIORITY_LOW for c in range(16)}
    assert take(topology, "0-15", 2, prefer=Prefer.HIGH) == "8-9"
    assert take(topology, "0-15", 2, prefer=Prefer.NORMAL) == "0-1"
    assert take(topology, "0-15", 2, prefer=Prefer.LOW) == "0-1"
    assert take(topology, "2-15", 1, prefer=Prefer.HIGH) == "8"
    assert take(topology, "2-15", 1, prefer=Prefer.NONE) == "2"


def test_counts(topo: Topology) -> None:
    assert take(topo, "3,9", 2) == "3,9"  # everything that is free
    assert take(topo, "0-15", 0) == ""
    with pytest.raises(AllocationError):
        take_cpus(topo, {1, 2}, 3)


def test_near_grows_next_to_the_set(topo: Topology) -> None:
    """``near`` (balloons, dynamic pools) keeps growing beside the CPUs a set already has."""
    assert take(topo, "1-15", 1, near=frozenset({0})) == "1"
    assert take(topo, "2-3,8-11,14-15", 2, near=frozenset({12, 13})) == "14-15"
