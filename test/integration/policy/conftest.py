"""Shared by the policy placement tests on real containerd: a relay in this process whose hook is a
ResourceManager (decisions on the fake sysfs tree of this machine's shape), and pods shaped like kubelet's."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.cri_objects import make_container_config, make_pod_config, write_json
from fixtures.sysfs_builder import THIS_MACHINE, build_sysfs

from resmgr.config import validate_config_text
from resmgr.manager.resource_manager import ResourceManager
from resmgr.relay.server import Relay
from resmgr.topology import discover_topology, format_cpuset

PERIOD = 100_000
SHAPES = {  # QoS -> (cgroup parent QoS dir, container resources as kubelet would set them)
    "guaranteed": {"cpu_shares": 1024, "cpu_quota": PERIOD, "cpu_period": PERIOD, "memory_limit": 64 << 20},
    "burstable": {"cpu_shares": 512},
    "besteffort": {"cpu_shares": 2},
}


class Node:
    """A relay in this process whose hook is a ResourceManager, in front of the shared containerd."""

    def __init__(self, containerd, workdir: Path, config_text: str, machine=THIS_MACHINE) -> None:
        self.containerd = containerd
        self.workdir = workdir
        self.sysfs = build_sysfs(workdir / "sysfs", machine)
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

    def run(self, name: str, qos: str, *, namespace: str = "default", direct: bool = False,
            annotations: dict[str, str] | None = None, command: list[str] | None = None) -> str:
        pod = make_pod_config(name, namespace=namespace, qos=qos, annotations=annotations)
        pod_cfg = write_json(self.workdir / f"pod-{name}.json", pod)
        pod_id = self.crictl("runp", pod_cfg, direct=direct)
        cfg = write_json(self.workdir / f"ctr-{name}.json",
                         make_container_config(name, command=command, **SHAPES[qos]))
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

    def make(config_text: str, machine=THIS_MACHINE) -> Node:
        node = Node(containerd, Path(tempfile.mkdtemp(prefix="policy-it-", dir="/tmp")), config_text, machine)
        nodes.append(node)
        return node.start()

    yield make
    for node in nodes:
        node.stop()
    containerd.remove_all()
