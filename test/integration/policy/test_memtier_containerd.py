"""Memory tiers (memtier) on real containerd: cpuset.mems by memory type, read from the host cgroups.

This machine has one NUMA node, so the decisions are made on a fake sysfs tree where that node, 0, is
a CPU-less PMEM node and the CPUs sit on a DRAM node 1 (fixtures.sysfs_builder.THIS_MACHINE_PMEM0).
The kernel accepts only node 0 in cpuset.mems: what reaches the real cgroup can only be a PMEM-only
placement (memory-type pmem, or a cold start's first phase). A cold start's end widens the memory to
DRAM+PMEM, "0-1", which this kernel must refuse: the test checks that the timer's update was sent
to containerd (through the relay as UpdateContainerResources, through NRI as UpdateContainers) and that
the cgroup kept node 0, nothing more can be shown here.
"""

from __future__ import annotations

import pytest
from fixtures.placement import FRONTENDS
from fixtures.sysfs_builder import THIS_MACHINE_PMEM0

from devland.waiting import eventually

pytestmark = pytest.mark.integration

MEMTIER = "policy:\n  Active: memtier\n  ReservedResources:\n    cpu: 750m\n"
MT = "memory-type.cri-resource-manager.intel.com"
CS = "cold-start.cri-resource-manager.intel.com"


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_memory_type_and_cold_start_reach_the_cgroups(node_factory) -> None:
    node = node_factory(MEMTIER, THIS_MACHINE_PMEM0)
    assert node.rm.topology.memory_types == {0: "PMEM", 1: "DRAM"}
    sent = node.sent  # the outbox's updates, as the node's front end sent them
    pm = node.run("pm", "guaranteed", annotations={f"{MT}/pod": "pmem"})
    cold = node.run("cold", "burstable", annotations={f"{CS}/pod": "duration: 2s"})
    assert node.rm.placements()[pm][1] == "0" and node.containerd.cgroup_mems(pm) == "0"
    # cold-started: PMEM only at first (default type DRAM+PMEM), on the real cgroup
    assert node.containerd.cgroup_mems(cold) == "0"
    assert node.in_sync([pm])
    assert eventually(lambda: any(u.container_id == cold for u in sent), timeout=60)
    assert [(u.container_id, u.cpuset_mems, u.reason) for u in sent] == [(cold, "0-1", "cold start done")]
    assert node.rm.placements()[cold][1] == "0-1"
    assert node.containerd.cgroup_mems(cold) == "0"  # node 1 is fake: the kernel refused it
    assert node.containerd.cgroup_mems(pm) == "0"
