"""Topology discovery from fake sysfs trees."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.sysfs_builder import TWO_SOCKETS, Shape, build_sysfs
from hypothesis import given
from hypothesis import strategies as st

from resmgr.policy.cpu_allocator import Prefer, take_cpus
from resmgr.topology import Topology, TopologyError, discover_topology, format_cpuset, parse_cpuset
from resmgr.topology.cpuset import CpusetError
from resmgr.topology.model import PRIORITY_HIGH, PRIORITY_LOW


def test_shapes(topologies: dict[str, Topology]) -> None:
    small = topologies["this-machine"]
    assert (len(small.cpus), len(small.packages), len(small.nodes), len(small.cores)) == (2, 1, 1, 2)
    two = topologies["2s-2n-16c-2t"]
    assert (len(two.cpus), len(two.packages), len(two.nodes), len(two.cores)) == (128, 2, 4, 64)
    assert all(len(c) == 2 for c in two.cores.values())
    assert two.isolated == frozenset({5, 6, 69, 70})
    assert two.nodes[0] == parse_cpuset("0-15,64-79")
    assert two.cores[(0, 0, 0)] == frozenset({0, 64})
    assert two.node_memory[3] == 16 * 1024 * 1024 * 1024
    big = topologies["8numa-256"]
    assert (len(big.cpus), len(big.packages), len(big.dies), len(big.nodes)) == (256, 2, 4, 8)
    assert all(len(cpus) == 32 for cpus in big.nodes.values())
    # Every NUMA node lies inside one die, every die inside one package.
    for cpus in big.nodes.values():
        assert len({big.cpus[c].die_key for c in cpus}) == 1


def test_this_machine_matches_real_sysfs() -> None:
    real = discover_topology("/")
    assert len(real.cpus) >= 1 and real.nodes


def test_offline_cpus_are_left_out(tmp_path: Path) -> None:
    topo = discover_topology(build_sysfs(tmp_path, TWO_SOCKETS, offline=frozenset({7, 100})))
    assert 7 not in topo.cpus and 100 not in topo.cpus and len(topo.cpus) == 126
    assert 7 not in topo.nodes[0]


def test_missing_sysfs_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="cannot read .*online"):
        discover_topology(tmp_path)


def test_garbage_in_sysfs_is_a_clear_error(tmp_path: Path) -> None:
    root = build_sysfs(tmp_path, Shape(1, 1, 2, 1))
    (root / "sys/devices/system/cpu/cpu1/topology/core_id").write_text("one\n")
    with pytest.raises(TopologyError, match="core_id: expected an integer"):
        discover_topology(root)
    (root / "sys/devices/system/cpu/online").write_text("0-x\n")
    with pytest.raises(TopologyError, match="online"):
        discover_topology(root)


@given(st.sets(st.integers(0, 300), max_size=60))
def test_cpuset_round_trip(cpus: set[int]) -> None:
    assert parse_cpuset(format_cpuset(cpus)) == cpus


@pytest.mark.parametrize("bad", ["1-", "a", "3-1", "1,,2", "-1", "99999"])
def test_bad_cpusets(bad: str) -> None:
    with pytest.raises(CpusetError):
        parse_cpuset(bad)


def test_cpu_priorities_from_cpufreq(tmp_path: Path) -> None:
    """As upstream's cpuallocator (discoverCpufreqPriority), per package: different base frequencies make
    the faster CPUs high and the others low priority; different EPPs make all but the least performant
    EPP high (EPP wins over frequency). A package whose CPUs do not differ is all normal."""
    root = build_sysfs(tmp_path, Shape(packages=3, nodes_per_package=1, cores_per_node=2, threads_per_core=1))
    assert discover_topology(root).priority == {}  # no cpufreq: every CPU is normal
    cpu = root / "sys" / "devices" / "system" / "cpu"
    settings = {0: ("2000000", "balance_performance"), 1: ("3000000", "balance_performance"),  # package 0
                2: ("2000000", "performance"), 3: ("2000000", "power"),  # package 1
                4: ("2000000", "power"), 5: ("2000000", "power")}  # package 2
    for c, (freq, epp) in settings.items():
        (cpu / f"cpu{c}" / "cpufreq").mkdir()
        (cpu / f"cpu{c}" / "cpufreq" / "base_frequency").write_text(freq + "\n")
        (cpu / f"cpu{c}" / "cpufreq" / "energy_performance_preference").write_text(epp + "\n")
    topo = discover_topology(root)
    assert topo.priority == {0: PRIORITY_LOW, 1: PRIORITY_HIGH, 2: PRIORITY_HIGH, 3: PRIORITY_LOW}
    assert take_cpus(topo, {0, 1}, 1, prefer=Prefer.HIGH) == {1}
    assert take_cpus(topo, {0, 1}, 1, prefer=Prefer.NORMAL) == {0}  # normal requests leave high CPUs be
