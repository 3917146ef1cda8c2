"""Container affinity and prefer-reserved-cpus on real containerd: the decisions show in the host cgroups.

This machine has 2 CPUs on one NUMA node, so topology-aware has a single pool and affinity
could change nothing. The affinity test therefore decides on a fake tree of the same 2 CPUs
split into two NUMA nodes of one CPU each (pools: root, node #0 = CPU 0, node #1 = CPU 1):
the cpusets are still this machine's CPUs, so the real cgroups take them. PinMemory is off
because the fake node 1 has no memory here; only the cpusets are compared.
"""

from __future__ import annotations

import os

import pytest
from fixtures.cri_objects import make_container_config, make_pod_config, write_json
from fixtures.sysfs_builder import Shape

pytestmark = pytest.mark.integration

TWO_NODES_OF_ONE_CPU = Shape(packages=1, nodes_per_package=2, cores_per_node=1, threads_per_core=1)
AFFINITY = "cri-resource-manager.intel.com/affinity"
ANTI_AFFINITY = "cri-resource-manager.intel.com/anti-affinity"
RESERVED = "prefer-reserved-cpus.cri-resource-manager.intel.com"
HINTS = "topologyhints.cri-resource-manager.intel.com"


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


def run_with_device(node, name: str, device: str, annotations: dict[str, str] | None = None) -> str:
    """A BestEffort pod whose container gets the host device ``device`` read-write (a device hint)."""
    pod = make_pod_config(name, annotations=annotations)
    pod_cfg = write_json(node.workdir / f"pod-{name}.json", pod)
    pod_id = node.crictl("runp", pod_cfg)
    ctr = make_container_config(name, cpu_shares=2)
    ctr["devices"] = [{"container_path": "/dev/accel", "host_path": device, "permissions": "rwm"}]
    cid = node.crictl("create", pod_id, write_json(node.workdir / f"ctr-{name}.json", ctr), pod_cfg)
    node.crictl("start", cid)
    node.pods[cid] = pod_id
    return cid


def test_device_hint_moves_a_container_to_the_devices_numa_pool(node_factory) -> None:
    """/dev/null stands in for an accelerator: the fake sysfs says its device sits on NUMA node 1 (CPU 1)."""
    node = node_factory("policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: 0\n"
                        "  topology-aware:\n    PinMemory: false\n", TWO_NODES_OF_ONE_CPU)
    rdev = os.stat("/dev/null").st_rdev
    device = node.sysfs / "sys/devices/pci0000:00/0000:00:02.0"
    device.mkdir(parents=True)
    (device / "numa_node").write_text("1\n")
    (device / "local_cpulist").write_text("1\n")
    link = node.sysfs / "sys/dev/char" / f"{os.major(rdev)}:{os.minor(rdev)}"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(device)
    plain = node.run("plain", "besteffort")
    assert node.containerd.cgroup_cpuset(plain) == "0"  # an empty node: the tie-break is node #0
    hinted = run_with_device(node, "hinted", "/dev/null")
    assert node.containerd.cgroup_cpuset(hinted) == "1"
    # The annotation turns the hint off: back to the tie-break (node #0 has one container, node #1 one).
    unhinted = run_with_device(node, "unhinted", "/dev/null", annotations={f"{HINTS}/pod": "false"})
    assert node.containerd.cgroup_cpuset(unhinted) == "0"
