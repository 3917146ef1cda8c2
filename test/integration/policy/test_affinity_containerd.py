"""Container affinity and prefer-reserved-cpus on real containerd: the decisions show in the host cgroups.

This machine has 2 CPUs on one NUMA node, so topology-aware has a single pool and affinity
could change nothing. The affinity test therefore decides on a fake tree of the same 2 CPUs
split into two NUMA nodes of one CPU each (pools: root, node #0 = CPU 0, node #1 = CPU 1):
the cpusets are still this machine's CPUs, so the real cgroups take them. PinMemory is off
because the fake node 1 has no memory here; only the cpusets are compared.
"""

from __future__ import annotations

import pytest
from fixtures.sysfs_builder import Shape

pytestmark = pytest.mark.integration

TWO_NODES_OF_ONE_CPU = Shape(packages=1, nodes_per_package=2, cores_per_node=1, threads_per_core=1)
AFFINITY = "cri-resource-manager.intel.com/affinity"
ANTI_AFFINITY = "cri-resource-manager.intel.com/anti-affinity"
RESERVED = "prefer-reserved-cpus.cri-resource-manager.intel.com"


def to(name: str, container: str) -> str:
    """An annotation value: ``container`` has (anti-)affinity to every container named ``name``."""
    return (f"{container}:\n- scope: {{operator: AlwaysTrue}}\n"
            f"  match: {{key: name, operator: Equals, values: [{name}]}}\n")


def test_affinity_and_anti_affinity_move_containers_between_numa_pools(node_factory) -> None:
    node = node_factory("policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: 0\n"
                        "  topology-aware:\n    PinMemory: false\n", TWO_NODES_OF_ONE_CPU)
    a = node.run("a", "burstable")
    b = node.run("b", "burstable")
    cpu = {cid: node.containerd.cgroup_cpuset(cid) for cid in (a, b)}
    assert sorted(cpu.values()) == ["0", "1"]  # spread over the two NUMA pools
    on_0, on_1 = ("a", "b") if cpu[a] == "0" else ("b", "a")
    # With equal load, a plain container goes to node #0 (the tie-break) ...
    plain = node.run("plain", "besteffort")
    assert node.containerd.cgroup_cpuset(plain) == "0"
    # ... one with affinity to the container on CPU 1 follows it there,
    pulled = node.run("pulled", "besteffort", annotations={AFFINITY: to(on_1, "pulled")})
    assert node.containerd.cgroup_cpuset(pulled) == "1"
    # and one with anti-affinity to the container on CPU 0 is pushed away from it.
    pushed = node.run("pushed", "besteffort", annotations={ANTI_AFFINITY: to(on_0, "pushed")})
    assert node.containerd.cgroup_cpuset(pushed) == "1"
    plain2 = node.run("plain2", "besteffort")
    assert node.containerd.cgroup_cpuset(plain2) == "0"
    grants = node.rm.policy.grants
    assert grants[pulled].pool == grants[b if on_1 == "b" else a].pool == "NUMA node #1"


def test_prefer_reserved_cpus_on_this_machine(node_factory) -> None:
    node = node_factory("policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: cpuset:0\n")
    wants = node.run("wants", "burstable", annotations={f"{RESERVED}/pod": "true"})
    plain = node.run("plain", "burstable")
    # kube-system opted out of the reserved CPUs runs on the root pool's shared CPU, as upstream.
    sys_out = node.run("sys-out", "burstable", namespace="kube-system",
                       annotations={f"{RESERVED}/container.sys-out": "false"})
    sys_in = node.run("sys-in", "burstable", namespace="kube-system")
    assert node.cgroups([wants, plain, sys_out, sys_in]) == {
        wants: ("0", "0"), plain: ("1", "0"), sys_out: ("1", "0"), sys_in: ("0", "0")}
