"""Tiny topologies for the policy tests: few CPUs, so pools fill up and reserved or isolated CPUs
are a large share of the node (where a policy that runs out of room shows how it degrades)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.sysfs_builder import Shape, build_sysfs

from resmgr.topology import Topology, discover_topology

TINY = {
    # Two single-CPU sockets: with one CPU reserved, one socket pool has no shared CPU at all.
    "tiny-2s-1c": (Shape(packages=2, nodes_per_package=1, cores_per_node=1, threads_per_core=1), frozenset()),
    # Two NUMA nodes of two hyperthreaded cores (CPUs 0,1,4,5 | 2,3,6,7), one isolated core.
    "tiny-2n-2c-2t": (Shape(packages=1, nodes_per_package=2, cores_per_node=2, threads_per_core=2),
                      frozenset({3, 7})),
}


@pytest.fixture(scope="session")
def tiny_topologies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Topology]:
    base: Path = tmp_path_factory.mktemp("tiny-sysfs")
    return {name: discover_topology(build_sysfs(base / name, shape, isolated=isolated))
            for name, (shape, isolated) in TINY.items()}


@pytest.fixture(scope="session")
def all_topologies(topologies: dict[str, Topology], tiny_topologies: dict[str, Topology]) -> dict[str, Topology]:
    return {**topologies, **tiny_topologies}


# Upstream's e2e VMs for the balloons tests (test/e2e/policies.test-suite/balloons/n4c16 and n4c32, 2 threads per
# core): n4c16 is 2 packages x 2 NUMA nodes x 2 cores; n4c32 is 2 packages x 2 dies x 2 NUMA nodes x 2 cores,
# i.e. 8 NUMA nodes of 4 CPUs (despite its name). CPUs are numbered as Linux does, not as Qemu does.
UPSTREAM_VMS = {
    "n4c16": Shape(packages=2, nodes_per_package=2, cores_per_node=2, threads_per_core=2),
    "n4c32": Shape(packages=2, nodes_per_package=4, dies_per_package=2, cores_per_node=2, threads_per_core=2),
}


@pytest.fixture(scope="session")
def upstream_vms(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Topology]:
    base: Path = tmp_path_factory.mktemp("upstream-vm-sysfs")
    return {name: discover_topology(build_sysfs(base / name, shape)) for name, shape in UPSTREAM_VMS.items()}
