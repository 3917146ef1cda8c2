"""Memory types (DRAM, PMEM, HBM) per NUMA node from fake sysfs trees, told apart as upstream's pkg/sysfs does."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from fixtures.sysfs_builder import THIS_MACHINE_PMEM0, TWO_SOCKETS, TWO_SOCKETS_PMEM, TWO_SOCKETS_PMEM_HBM, build_sysfs

from resmgr.topology import TopologyError, discover_topology
from resmgr.topology.model import DRAM, HBM, PMEM


def test_cpu_less_nodes_are_pmem_when_at_least_the_average_dram(tmp_path: Path) -> None:
    topo = discover_topology(build_sysfs(tmp_path, TWO_SOCKETS_PMEM))
    assert topo.memory_types == {0: DRAM, 1: DRAM, 2: DRAM, 3: DRAM, 4: PMEM, 5: PMEM, 6: PMEM, 7: PMEM}
    assert set(topo.nodes) == {0, 1, 2, 3}  # CPU-less nodes hold no CPUs
    assert topo.node_memory[4] == 64 << 30
    assert topo.distance(4, 0) == 17 and topo.distance(4, 1) == 28 and topo.distance(4, 2) == 32
    assert topo.normal_memory == frozenset(range(8))
    assert "PMEM nodes [4, 5, 6, 7]" in topo.describe()


def test_smaller_cpu_less_nodes_are_hbm(tmp_path: Path) -> None:
    topo = discover_topology(build_sysfs(tmp_path, TWO_SOCKETS_PMEM_HBM))
    assert [n for n, t in topo.memory_types.items() if t == HBM] == [8, 9, 10, 11]
    assert [n for n, t in topo.memory_types.items() if t == PMEM] == [4, 5, 6, 7]


def test_memory_nodes_numbered_first(tmp_path: Path) -> None:
    topo = discover_topology(build_sysfs(tmp_path, THIS_MACHINE_PMEM0))
    assert topo.memory_types == {0: PMEM, 1: DRAM} and set(topo.nodes) == {1}


def test_movable_pmem_is_not_normal_memory(tmp_path: Path) -> None:
    topo = discover_topology(build_sysfs(tmp_path, replace(TWO_SOCKETS_PMEM, pmem_normal=False)))
    assert topo.normal_memory == frozenset({0, 1, 2, 3})


def test_without_has_memory_every_node_is_dram(tmp_path: Path) -> None:
    root = build_sysfs(tmp_path, TWO_SOCKETS)
    (root / "sys/devices/system/node/has_memory").unlink()
    topo = discover_topology(root)
    assert topo.memory_types == {} and all(topo.memory_type(n) == DRAM for n in topo.nodes)


def test_special_memory_without_dram_figures_is_a_clear_error(tmp_path: Path) -> None:
    root = build_sysfs(tmp_path, TWO_SOCKETS_PMEM)
    for node in range(4):
        (root / f"sys/devices/system/node/node{node}/meminfo").write_text("")
    with pytest.raises(TopologyError, match="cannot tell PMEM from HBM"):
        discover_topology(root)


def test_garbage_distance_is_a_clear_error(tmp_path: Path) -> None:
    root = build_sysfs(tmp_path, TWO_SOCKETS_PMEM)
    (root / "sys/devices/system/node/node4/distance").write_text("10 x\n")
    with pytest.raises(TopologyError, match="node4/distance: expected integers"):
        discover_topology(root)
