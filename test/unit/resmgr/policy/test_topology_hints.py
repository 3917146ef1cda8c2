"""Device topology hints: sysfs lookup of a container's devices and mounts, scores per pool, and how
they steer topology-aware's pool choice (and the topologyhints annotation that turns them off).

The devices are real device nodes of this machine (/dev/null, /dev/zero, whose major:minor are
fixed); their sysfs entries are built in a fake sysfs tree, so the hints say what the test wants."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fixtures.sysfs_builder import EIGHT_NUMA_256, build_sysfs
from unit.resmgr.policy_helpers import burstable

from resmgr.config import validate_config_text
from resmgr.policy.registry import create_policy
from resmgr.policy.topology_hints import Hint, container_hints, hint_score, pool_hint_scores
from resmgr.topology import discover_topology

KEY = "topologyhints.cri-resource-manager.intel.com"
CONFIG = "policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: 1\n"


def _char_dev(sysfs: Path, node: str, device_dir: str, files: dict[str, str]) -> None:
    st = os.stat(node)
    link = sysfs / "sys/dev/char" / f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    target = sysfs / "sys/devices" / device_dir
    target.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (target / name).write_text(text + "\n")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


@pytest.fixture
def node(tmp_path: Path):
    sysfs = build_sysfs(tmp_path / "sysfs", EIGHT_NUMA_256)
    topology = discover_topology(sysfs)
    # /dev/null: a device on NUMA node 5 (a PCI function's numa_node and local_cpulist);
    # /dev/zero: one whose BIOS reports only numa_node 1, which upstream reads as socket 1.
    cpus5 = ",".join(map(str, sorted(topology.nodes[5])))
    _char_dev(sysfs, "/dev/null", "pci0000:80/0000:80:01.0", {"numa_node": "5", "local_cpulist": cpus5})
    _char_dev(sysfs, "/dev/zero", "platform/weird0", {"numa_node": "1"})
    policy = create_policy(validate_config_text(CONFIG), topology, sysfs_root=str(sysfs))
    return policy, topology, sysfs


def with_paths(c, *paths):
    c.host_paths = list(paths)
    return c


def test_hints_from_devices_and_what_is_ignored(node) -> None:
    policy, topology, sysfs = node
    c = with_paths(burstable("a", 100), ("/dev/null", "/dev/accel", False))
    (hint,) = container_hints(c, str(sysfs)).values()
    assert hint.cpus == topology.nodes[5] and hint.numas == {5}
    assert not container_hints(with_paths(burstable("b", 100), ("/dev/null", "/dev/accel", True)), str(sysfs))
    assert not container_hints(with_paths(burstable("c", 100), ("/dev/null", "/etc/hosts", False)), str(sysfs))
    assert not container_hints(with_paths(burstable("d", 100), ("/nonexistent", "/data", False)), str(sysfs))
    off = with_paths(burstable("e", 100, annotations={f"{KEY}/pod": "false"}), ("/dev/null", "/dev/accel", False))
    assert not container_hints(off, str(sysfs))
    (socket_hint,) = container_hints(with_paths(burstable("f", 100), ("/dev/zero", "/dev/z", False)),
                                     str(sysfs)).values()
    assert socket_hint.sockets == {1} and not socket_hint.numas and not socket_hint.cpus


def test_hint_scores_per_pool_kind(node) -> None:
    policy, topology, _ = node
    pools = policy.pools
    numa5 = pools["NUMA node #5"]
    hint = Hint("x", numas=frozenset({5}))
    assert hint_score(hint, numa5, topology) == 1.0
    assert hint_score(hint, pools["NUMA node #0"], topology) == 0.0
    assert hint_score(hint, numa5.parent, topology) == pytest.approx(0.9)
    assert hint_score(hint, pools["root"], topology) == pytest.approx(0.81)
    cpus = Hint("y", cpus=frozenset(sorted(numa5.cpus)[:4]) | frozenset(sorted(pools["NUMA node #0"].cpus)[:4]))
    assert hint_score(cpus, numa5, topology) == 0.5
    combined = pool_hint_scores({"x": hint, "y": cpus}, pools, topology)
    assert combined["NUMA node #5"] == (0.5, 0.5)
    assert combined["NUMA node #1"] == (0.0, 0.0)


def test_hints_steer_topology_aware_and_the_annotation_turns_them_off(node) -> None:
    policy, topology, _ = node
    policy.allocate("plain", burstable("plain", 100))
    assert policy.grants["plain"].pool != "NUMA node #5"  # the spread alone picks another node first
    policy.allocate("dev", with_paths(burstable("dev", 100), ("/dev/null", "/dev/accel", False)))
    assert policy.grants["dev"].pool == "NUMA node #5"
    off = with_paths(burstable("off", 100, annotations={f"{KEY}/container.off": "false"}),
                     ("/dev/null", "/dev/accel", False))
    policy.allocate("off", off)
    assert policy.grants["off"].pool != "NUMA node #5"
    # A socket hint: the socket's NUMA pools fit it (split over its nodes), the other socket's do not.
    policy.allocate("probe", burstable("probe", 100))
    probe = policy.pools[policy.grants["probe"].pool]
    assert {topology.cpus[c].package for c in probe.cpus} == {0}  # without the hint: socket 0
    policy.release("probe")
    policy.allocate("sock", with_paths(burstable("sock", 100), ("/dev/zero", "/dev/z", False)))
    pool = policy.pools[policy.grants["sock"].pool]
    assert {topology.cpus[c].package for c in pool.cpus} == {1}
