"""Fake sysfs topologies for the policy tests, built once per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.sysfs_builder import EIGHT_NUMA_256, THIS_MACHINE, TIER_SHAPES, TWO_SOCKETS, build_sysfs

from resmgr.topology import Topology, discover_topology


@pytest.fixture(scope="session")
def sysfs_roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("sysfs")
    return {
        "this-machine": build_sysfs(base / "this-machine", THIS_MACHINE),
        "2s-2n-16c-2t": build_sysfs(base / "2s", TWO_SOCKETS, isolated=frozenset({5, 6, 69, 70})),
        "8numa-256": build_sysfs(base / "8numa", EIGHT_NUMA_256),
        # memory tiers (PMEM, HBM beside the DRAM nodes)
        **{name: build_sysfs(base / name, shape) for name, shape in TIER_SHAPES.items()},
    }


@pytest.fixture(scope="session")
def topologies(sysfs_roots: dict[str, Path]) -> dict[str, Topology]:
    return {name: discover_topology(root) for name, root in sysfs_roots.items()}
