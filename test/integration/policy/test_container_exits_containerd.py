"""Exited containers give their CPUs back, on real containerd through the relay (issue 26, item 1).

kubelet sends no CRI call when a container exits; the relay learns of exits from the runtime's answers to
kubelet's relist (ListContainers about once a second). Here one gRPC connection through the relay stands in
for kubelet: it relists, and it creates a pod's next container as soon as a relist shows the previous one
exited, as kubelet's pod worker does. The node is this machine (2 CPUs) under the static policy with one
reserved CPU: CPU 1 is the one exclusive CPU it can grant, and a BestEffort container shows where the
shared pool is.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cri_api.v1 import api_pb2, api_pb2_grpc
from fixtures.cri_objects import make_container_config, make_pod_config
from fixtures.sysfs_builder import THIS_MACHINE, build_sysfs
from google.protobuf import json_format

from devland.waiting import eventually
from resmgr.config import validate_config_text
from resmgr.manager.resource_manager import ResourceManager
from resmgr.model.state import Lifecycle
from resmgr.relay.server import Relay
from resmgr.topology import discover_topology

pytestmark = pytest.mark.integration

STATIC = "policy:\n  Active: static\n  ReservedResources:\n    cpu: 1\n"
PERIOD = 100_000
GUARANTEED_1CPU = {"cpu_shares": 1024, "cpu_quota": PERIOD, "cpu_period": PERIOD, "memory_limit": 64 << 20}


class Kubelet:
    """The CRI calls of kubelet for these scenarios, on one connection through the relay (kubelet uses one)."""

    def __init__(self, endpoint: str, image: str) -> None:
        self.channel = grpc.insecure_channel(endpoint)
        self.stub = api_pb2_grpc.RuntimeServiceStub(self.channel)
        self.image = image
        self.sandboxes: dict[str, api_pb2.PodSandboxConfig] = {}

    def close(self) -> None:
        self.channel.close()

    def run_pod(self, name: str, qos: str) -> str:
        config = json_format.ParseDict(make_pod_config(name, qos=qos), api_pb2.PodSandboxConfig())
        pod_id = self.stub.RunPodSandbox(api_pb2.RunPodSandboxRequest(config=config), timeout=60).pod_sandbox_id
        self.sandboxes[pod_id] = config
        return pod_id

    def start(self, pod_id: str, name: str, command: list[str], attempt: int = 0, **resources: int) -> str:
        config = json_format.ParseDict(make_container_config(name, image=self.image, command=command, **resources),
                                       api_pb2.ContainerConfig())
        config.metadata.attempt = attempt
        request = api_pb2.CreateContainerRequest(pod_sandbox_id=pod_id, config=config,
                                                 sandbox_config=self.sandboxes[pod_id])
        cid = self.stub.CreateContainer(request, timeout=60).container_id
        self.stub.StartContainer(api_pb2.StartContainerRequest(container_id=cid), timeout=60)
        return cid

    def relist(self) -> dict[str, int]:
        """PLEG's relist: every container with its state (an empty filter, as kubelet sends)."""
        answer = self.stub.ListContainers(api_pb2.ListContainersRequest(filter=api_pb2.ContainerFilter()), timeout=30)
        return {c.id: c.state for c in answer.containers}

    def exited(self, cid: str) -> bool:
        """Not via a relist: ContainerStatus, which the relay does not read."""
        status = self.stub.ContainerStatus(api_pb2.ContainerStatusRequest(container_id=cid), timeout=30).status
        return status.state == api_pb2.CONTAINER_EXITED

    def relist_until_exited(self, cid: str) -> None:
        assert eventually(lambda: self.relist().get(cid) == api_pb2.CONTAINER_EXITED, timeout=30), \
            f"{cid} did not exit"


@pytest.fixture(params=["splice", "grpc"])
def node(request, containerd) -> Iterator[tuple[ResourceManager, Kubelet]]:
    workdir = Path(tempfile.mkdtemp(prefix="exits-it-", dir="/tmp"))
    sysfs = build_sysfs(workdir / "sysfs", THIS_MACHINE)
    rm = ResourceManager(discover_topology(sysfs), relay_dir=workdir / "state",
                         fallback_config=validate_config_text(STATIC), sysfs_root=str(sysfs))
    relay = Relay(relay_socket=str(workdir / f"relay-{uuid.uuid4().hex[:6]}.sock"), runtime_socket=containerd.socket,
                  hook=rm, transport=request.param)
    relay.start()
    kubelet = Kubelet("unix://" + relay.relay_socket, containerd.busybox_image)
    try:
        yield rm, kubelet
    finally:
        kubelet.close()
        relay.stop(grace=1)
        containerd.remove_all()


def test_the_app_container_gets_the_cpu_its_exited_init_container_had(node, containerd) -> None:
    """A Guaranteed pod whose init container and app container each request the node's one exclusive CPU:
    the init container gets it; once a relist shows it exited, the app container created right then gets it."""
    rm, kubelet = node
    be = kubelet.start(kubelet.run_pod("be", "besteffort"), "be", ["sleep", "3600"], cpu_shares=2)
    pod = kubelet.run_pod("g", "guaranteed")
    init = kubelet.start(pod, "init", ["sh", "-c", "sleep 1"], **GUARANTEED_1CPU)
    assert containerd.cgroup_cpuset(init) == "1" and rm.policy.exclusive_sets() == {init: {1}}
    assert eventually(lambda: containerd.cgroup_cpuset(be) == "0")
    kubelet.relist_until_exited(init)
    app = kubelet.start(pod, "app", ["sleep", "3600"], **GUARANTEED_1CPU)  # at once, as kubelet's pod worker does
    assert containerd.cgroup_cpuset(app) == "1"
    assert rm.policy.exclusive_sets() == {app: {1}}
    assert init in rm.containers and init not in rm.policy.containers
    # The registry says so explicitly. (The app's own lifecycle is left out: with the splice transport its
    # StartContainer may overtake its create's answer, so it may still read created until the next resync.)
    assert rm.state.lifecycle(init) is Lifecycle.EXITED
    assert containerd.cgroup_cpuset(be) == "0"


def test_a_crash_looping_guaranteed_container_keeps_exactly_one_exclusive_set(node, containerd) -> None:
    """kubelet restarts a crashing container with a new instance of the same name. Whether a relist showed
    the crash first (the exit is released) or not (the re-creation releases the older instance), the new
    instance gets the exclusive CPU and exactly one exclusive set exists; after the last crash, none."""
    rm, kubelet = node
    be = kubelet.start(kubelet.run_pod("be", "besteffort"), "be", ["sleep", "3600"], cpu_shares=2)
    pod = kubelet.run_pod("crash", "guaranteed")
    crash = ["sh", "-c", "sleep 1; exit 1"]
    instances = []
    for attempt in range(4):
        cid = kubelet.start(pod, "crasher", crash, attempt=attempt, **GUARANTEED_1CPU)
        instances.append(cid)
        assert containerd.cgroup_cpuset(cid) == "1", f"attempt {attempt} was not given the exclusive CPU"
        assert rm.policy.exclusive_sets() == {cid: {1}}, f"attempt {attempt}"
        assert eventually(lambda: containerd.cgroup_cpuset(be) == "0")
        if attempt % 2 == 0:
            kubelet.relist_until_exited(cid)  # the crash seen in a relist: released before the restart
            assert eventually(lambda: containerd.cgroup_cpuset(be) == "0-1")  # CPU 1 went back to the shared pool
        else:
            assert eventually(lambda cid=cid: kubelet.exited(cid), timeout=30)  # restarted before a relist saw it
    kubelet.relist()
    assert eventually(lambda: not rm.policy.exclusive_sets())
    assert not set(instances) & set(rm.policy.containers)
    assert eventually(lambda: {rm.state.lifecycle(c) for c in instances} == {Lifecycle.EXITED})
    assert eventually(lambda: containerd.cgroup_cpuset(be) == "0-1")
