"""Relay + resource manager + real containerd: the policy's decisions end up in the host cgroups.

Decisions are made on the fake sysfs tree of this machine's shape (2 CPUs, one NUMA node,
built by test/fixtures/sysfs_builder.py), so the cpusets are valid for the real cgroups that
enforce them. Pods are shaped like kubelet's Guaranteed, Burstable and BestEffort pods (cgroup
parent per QoS class, CPU shares/quota, memory limit).
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.cri_objects import make_container_config, make_pod_config, write_json
from fixtures.sysfs_builder import THIS_MACHINE, build_sysfs
from fixtures.waiting import eventually

from resmgr.config import validate_config_text
from resmgr.manager.resource_manager import ResourceManager
from resmgr.relay.server import Relay
from resmgr.topology import discover_topology, format_cpuset, parse_cpuset

pytestmark = pytest.mark.integration

PERIOD = 100_000
SHAPES = {  # QoS -> (cgroup parent QoS dir, container resources as kubelet would set them)
    "guaranteed": {"cpu_shares": 1024, "cpu_quota": PERIOD, "cpu_period": PERIOD, "memory_limit": 64 << 20},
    "burstable": {"cpu_shares": 512},
    "besteffort": {"cpu_shares": 2},
}


class Node:
    """A relay in this process whose hook is a ResourceManager, in front of the shared containerd."""

    def __init__(self, containerd, workdir: Path, config_text: str) -> None:
        self.containerd = containerd
        self.workdir = workdir
        self.sysfs = build_sysfs(workdir / "sysfs", THIS_MACHINE)
        self.config = validate_config_text(config_text)
        self.relay: Relay | None = None
        self.rm: ResourceManager | None = None
        self.pods: dict[str, str] = {}

    def start(self) -> Node:
        self.rm = ResourceManager(discover_topology(self.sysfs), relay_dir=self.workdir / "state",
                                  fallback_config=self.config, sysfs_root=str(self.sysfs))
        self.relay = Relay(relay_socket=str(self.workdir / f"relay-{uuid.uuid4().hex[:6]}.sock"),
                           runtime_socket=self.containerd.socket, hook=self.rm)
        self.relay.start()
        self.endpoint = "unix://" + self.relay.relay_socket
        return self

    def stop(self) -> None:
        if self.relay is not None:
            self.relay.stop(grace=1)
            self.relay = None

    def crictl(self, *args: str, direct: bool = False) -> str:
        return self.containerd.crictl(*args, endpoint=None if direct else self.endpoint).stdout.strip()

    def run(self, name: str, qos: str, *, namespace: str = "default", direct: bool = False) -> str:
        pod_cfg = write_json(self.workdir / f"pod-{name}.json", make_pod_config(name, namespace=namespace, qos=qos))
        pod_id = self.crictl("runp", pod_cfg, direct=direct)
        cfg = write_json(self.workdir / f"ctr-{name}.json", make_container_config(name, **SHAPES[qos]))
        cid = self.crictl("create", pod_id, cfg, pod_cfg, direct=direct)
        self.crictl("start", cid, direct=direct)
        self.pods[cid] = pod_id
        return cid

    def remove(self, cid: str, *, direct: bool = False) -> None:
        self.crictl("stop", cid, direct=direct)
        self.crictl("rm", cid, direct=direct)
        pod_id = self.pods.pop(cid)
        self.crictl("stopp", pod_id, direct=direct)
        self.crictl("rmp", pod_id, direct=direct)

    def cgroups(self, cids: list[str]) -> dict[str, tuple[str, str]]:
        return {cid: (self.containerd.cgroup_cpuset(cid), self.containerd.cgroup_mems(cid)) for cid in cids}

    def expected(self, cids: list[str]) -> dict[str, tuple[str, str]]:
        """What the policy decided; an unset cpuset/mems is inherited from the parent (the whole node)."""
        assert self.rm is not None
        whole = (format_cpuset(self.rm.topology.online), format_cpuset(self.rm.topology.nodes))
        placements = self.rm.placements()
        return {cid: (placements[cid][0] or whole[0], placements[cid][1] or whole[1]) for cid in cids}

    def in_sync(self, cids: list[str]) -> bool:
        return self.cgroups(cids) == self.expected(cids)


@pytest.fixture
def node_factory(containerd) -> Iterator:
    nodes: list[Node] = []

    def make(config_text: str) -> Node:
        node = Node(containerd, Path(tempfile.mkdtemp(prefix="policy-it-", dir="/tmp")), config_text)
        nodes.append(node)
        return node.start()

    yield make
    for node in nodes:
        node.stop()
    containerd.remove_all()


STATIC = "policy:\n  Active: static\n  ReservedResources:\n    cpu: 1\n"


def test_static_policy_exclusive_and_shared_updates(node_factory) -> None:
    node = node_factory(STATIC)
    reserved = format_cpuset(node.rm.policy.reserved)
    be = node.run("be", "besteffort")
    bu = node.run("bu", "burstable")
    assert node.cgroups([be, bu]) == {be: ("0-1", "0"), bu: ("0-1", "0")}
    g = node.run("g", "guaranteed")
    exclusive = format_cpuset(node.rm.policy.grants[g].exclusive)
    assert exclusive != reserved and len(exclusive) == 1
    assert node.containerd.cgroup_cpuset(g) == exclusive
    # The shared containers were moved off the exclusive CPU by UpdateContainerResources.
    assert eventually(lambda: node.cgroups([be, bu]) == {be: (reserved, "0"), bu: (reserved, "0")})
    assert node.in_sync([be, bu, g])
    # Freeing the exclusive CPU hands it back to the shared pool.
    node.remove(g)
    assert eventually(lambda: node.cgroups([be, bu]) == {be: ("0-1", "0"), bu: ("0-1", "0")})


def test_topology_aware_pins_memory_and_reserves_kube_system(node_factory) -> None:
    node = node_factory("policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: cpuset:0\n")
    sys_ctr = node.run("sys", "burstable", namespace="kube-system")
    be = node.run("be", "besteffort")
    assert node.cgroups([sys_ctr]) == {sys_ctr: ("0", "0")}
    assert node.cgroups([be]) == {be: ("1", "0")}
    g = node.run("g", "guaranteed")  # the only non-reserved CPU is taken by the shared pool's users
    assert eventually(lambda: node.in_sync([sys_ctr, be, g]))


def test_topology_aware_full_node_never_shares_exclusive_cpus(node_factory) -> None:
    """The 2-CPU node of issue 17: 750m reserved (CPU 0), a Guaranteed pod, then Burstable and
    BestEffort ones. No container's host cpuset may hold another's exclusive CPU; an unset cpuset
    would be the whole node."""
    node = node_factory("policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: 750m\n")
    g = node.run("g", "guaranteed")
    bu = node.run("bu", "burstable")
    be = node.run("be", "besteffort")
    cids = [g, bu, be]
    assert eventually(lambda: node.in_sync(cids))
    host = {cid: parse_cpuset(node.containerd.cgroup_cpuset(cid)) for cid in cids}
    for owner, cpus in node.rm.policy.exclusive_sets().items():
        for cid in cids:
            assert cid == owner or not cpus & host[cid], f"{cid} runs on {owner}'s exclusive CPUs {cpus}"
    # As upstream, the last shared CPU is not sliced off: all three share CPU 1, off the reserved CPU 0.
    assert host == {g: {1}, bu: {1}, be: {1}}
    sys_ctr = node.run("sys", "burstable", namespace="kube-system")
    assert node.cgroups([sys_ctr]) == {sys_ctr: ("0", "0")}


def test_balloons_seed_style_config(node_factory) -> None:
    node = node_factory("""\
policy:
  Active: balloons
  ReservedResources:
    CPU: cpuset:0
  balloons:
    BalloonTypes:
      - Name: small
        MinCPUs: 1
        MaxCPUs: 1
        MinBalloons: 1
        Namespaces: [small]
""")
    s = node.run("s", "burstable", namespace="small")
    sys_ctr = node.run("sys", "besteffort", namespace="kube-system")
    assert node.cgroups([s, sys_ctr]) == {s: ("1", "0"), sys_ctr: ("0", "0")}
    assert node.in_sync([s, sys_ctr])


def test_restart_restores_drops_and_adopts(node_factory) -> None:
    node = node_factory(STATIC)
    be = node.run("be", "besteffort")
    g = node.run("g", "guaranteed")
    assert eventually(lambda: node.in_sync([be, g]))
    before = node.rm.placements()
    node.stop()
    # While the relay is down: one container goes away, another appears behind our back.
    node.remove(g, direct=True)
    stranger = node.run("stranger", "besteffort", direct=True)
    node.start()
    placements = node.rm.placements()
    assert g not in placements and stranger in placements
    assert placements[be] != before[be]  # the exclusive CPU returned to the shared pool
    assert eventually(lambda: node.in_sync([be, stranger]))
    assert node.cgroups([be, stranger]) == {be: ("0-1", "0"), stranger: ("0-1", "0")}
