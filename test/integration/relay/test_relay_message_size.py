"""Messages of any size up to the runtime's 16 MiB limit pass through the relay, intercepted or not.

The relay holds an intercepted request until it is whole; before the fix it returned no
flow-control credit meanwhile, so any request over the 64 KiB window hung forever, and with it
every other call on the client's connection. These run the real program (and the in-process
relay with the grpc transport) in front of real containerd, with crictl (grpc-go, like kubelet)
as the client where crictl can send the message.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cri_api.v1 import api_pb2, api_pb2_grpc
from fixtures.cri_objects import make_container_config, make_pod_config, write_json
from google.protobuf import json_format
from integration.relay.relay_process import RelayProcess, running_relay

from resmgr.relay.methods import MAX_MESSAGE_BYTES

KIB = 1024
MIB = 1024 * KIB
SIZES = {"100KiB": 100 * KIB, "1MiB": MIB, "8MiB": 8 * MIB}
# A policy that really decides (so every intercepted request is held and rewritten).
POLICY = "policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: 200m\n"
GRPC_OPTIONS = [("grpc.max_send_message_length", 64 * MIB), ("grpc.max_receive_message_length", 64 * MIB)]


def big_annotations(total: int, prefix: str = "big") -> dict[str, str]:
    """Annotations of about ``total`` bytes, in 1000-byte values as real pods carry them."""
    return {f"{prefix}-{i}": "x" * 1000 for i in range(max(1, total // 1000))}


@pytest.fixture(scope="module")
def policy_relay(containerd) -> Iterator[RelayProcess]:
    with running_relay(containerd, "--fallback-config", POLICY, prefix="relay-size-") as proc:
        yield proc


def run_pod_and_container(containerd, endpoint: str, tmp_path: Path, size: int, name: str) -> tuple[str, str]:
    """Via crictl: RunPodSandbox with ``size`` bytes of annotations, then CreateContainer (which carries the
    pod's config too) with a quarter of that more, then StartContainer."""
    pod_cfg = write_json(tmp_path / f"{name}-pod.json",
                         make_pod_config(name, qos="guaranteed", annotations=big_annotations(size, "pod")))
    pod_id = containerd.crictl("runp", pod_cfg, endpoint=endpoint, timeout=90).stdout.strip()
    ctr = make_container_config(name, cpu_shares=1024, cpu_quota=100000, cpu_period=100000,
                                memory_limit=64 * MIB, annotations=big_annotations(size // 4, "ctr"))
    ctr_cfg = write_json(tmp_path / f"{name}-ctr.json", ctr)
    cid = containerd.crictl("create", pod_id, ctr_cfg, pod_cfg, endpoint=endpoint, timeout=90).stdout.strip()
    containerd.crictl("start", cid, endpoint=endpoint, timeout=90)
    return pod_id, cid


def update_with_annotations(endpoint: str, cid: str, size: int) -> None:
    with grpc.insecure_channel(endpoint, options=GRPC_OPTIONS) as channel:
        api_pb2_grpc.RuntimeServiceStub(channel).UpdateContainerResources(
            api_pb2.UpdateContainerResourcesRequest(
                container_id=cid, linux=api_pb2.LinuxContainerResources(cpu_shares=512),
                annotations=big_annotations(size, "upd")),
            timeout=60)


@pytest.mark.parametrize("size", sorted(SIZES, key=SIZES.get))
def test_large_requests_pass_the_policy_relay(containerd, policy_relay, tmp_path, size):
    total = SIZES[size]
    pod_id, cid = run_pod_and_container(containerd, policy_relay.endpoint, tmp_path, total, f"big-{size.lower()}")
    # What arrived at containerd is the whole message, not a truncated one.
    # (Not verbose: containerd's verbose status repeats the config and would pass its own 16 MiB limit.)
    with grpc.insecure_channel("unix://" + containerd.socket, options=GRPC_OPTIONS) as channel:
        stub = api_pb2_grpc.RuntimeServiceStub(channel)
        pod = stub.PodSandboxStatus(api_pb2.PodSandboxStatusRequest(pod_sandbox_id=pod_id), timeout=60)
        ctr = stub.ContainerStatus(api_pb2.ContainerStatusRequest(container_id=cid), timeout=60)
    assert sum(len(v) for k, v in pod.status.annotations.items() if k.startswith("pod-")) == len(
        big_annotations(total)) * 1000
    assert sum(1 for k in ctr.status.annotations if k.startswith("ctr-")) == len(big_annotations(total // 4))
    # The policy placed it (the relay rewrote the big request rather than passing it untouched).
    assert containerd.cgroup_cpuset(cid)
    update_with_annotations(policy_relay.endpoint, cid, total)
    assert containerd.crictl("version", endpoint=policy_relay.endpoint).returncode == 0
    containerd.crictl("rmp", "-f", pod_id)


def test_large_request_does_not_stall_its_connection(containerd, policy_relay, tmp_path):
    """Other calls on the same connection keep working while a big request is held and sent on."""
    errors: list[BaseException] = []
    with grpc.insecure_channel(policy_relay.endpoint, options=GRPC_OPTIONS) as channel:
        stub = api_pb2_grpc.RuntimeServiceStub(channel)
        stub.Version(api_pb2.VersionRequest(), timeout=10)  # the connection is up

        def big(n: int) -> None:
            try:
                pod = json_format_pod(f"stall-{n}", 4 * MIB)
                resp = stub.RunPodSandbox(api_pb2.RunPodSandboxRequest(config=pod), timeout=60)
                stub.RemovePodSandbox(api_pb2.RemovePodSandboxRequest(pod_sandbox_id=resp.pod_sandbox_id),
                                      timeout=60)
            except BaseException as err:  # reported below
                errors.append(err)

        threads = [threading.Thread(target=big, args=(n,)) for n in range(2)]
        for t in threads:
            t.start()
        for _ in range(20):
            stub.Version(api_pb2.VersionRequest(), timeout=10)
            stub.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=10)
        for t in threads:
            t.join(90)
    assert not errors, errors


def json_format_pod(name: str, size: int) -> api_pb2.PodSandboxConfig:
    return json_format.ParseDict(make_pod_config(name, annotations=big_annotations(size)), api_pb2.PodSandboxConfig())


def test_over_the_limit_is_refused_as_the_runtime_refuses_it(containerd, policy_relay):
    """A request over 16 MiB gets the runtime's own RESOURCE_EXHAUSTED, through the relay and directly."""
    pod = json_format_pod("too-big", MAX_MESSAGE_BYTES + MIB)
    codes = {}
    for path, endpoint in (("direct", "unix://" + containerd.socket), ("relay", policy_relay.endpoint)):
        with grpc.insecure_channel(endpoint, options=GRPC_OPTIONS) as channel:
            with pytest.raises(grpc.RpcError) as err:
                api_pb2_grpc.RuntimeServiceStub(channel).RunPodSandbox(api_pb2.RunPodSandboxRequest(config=pod),
                                                                       timeout=60)
            codes[path] = err.value.code()
            # ... and the connection still serves the next call.
            api_pb2_grpc.RuntimeServiceStub(channel).Version(api_pb2.VersionRequest(), timeout=10)
    assert codes == {"direct": grpc.StatusCode.RESOURCE_EXHAUSTED, "relay": grpc.StatusCode.RESOURCE_EXHAUSTED}


@pytest.mark.parametrize("size", ["1MiB"])
def test_large_requests_pass_each_transport(containerd, inproc_relay, tmp_path, size):
    relay = inproc_relay()
    pod_id, cid = run_pod_and_container(containerd, relay.endpoint, tmp_path, SIZES[size], f"tr-{size.lower()}")
    update_with_annotations(relay.endpoint, cid, SIZES[size])
    containerd.crictl("rmp", "-f", pod_id)
