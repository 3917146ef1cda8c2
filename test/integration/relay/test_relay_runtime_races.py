"""What the relay does in the two critest specs whose outcome the runtime itself decides by a race.

test_relay_critest_parity.py leaves these specs out of its comparison (see NOT_COMPARED there), because
containerd's answer depends on event timing that neither we nor critest control:
- "should terminate with exitCode 137 and reason OOMKilled": containerd 1.6 records the reason from the
  kernel's OOM event, which races the task's exit; a ContainerStatus read before the OOM event is handled
  says "Error". Measured on containerd 1.6.20 here, directly, without the relay (see the note on
  NOT_COMPARED for the numbers).
- "should support execSync with timeout": the timed-out process may still be listed by the next ExecSync.

The relay's part in both is deterministic, and this file checks exactly that part on a real containerd:
the request reaches the runtime (the memory limit kills the container; the exec timeout ends the exec) and
the runtime's answer reaches the client unchanged, byte for byte, compared with a direct read of the same
container taken just before and just after.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cri_api.v1 import api_pb2, api_pb2_grpc
from fixtures.cri_objects import make_container_config, make_pod_config
from google.protobuf import json_format
from integration.relay.relay_process import RelayProcess

pytestmark = pytest.mark.integration

MEMORY_LIMIT = 16 << 20
# dd reads 64 MiB of zeroes into one buffer: with the limit the kernel kills it (exit 137); without the
# limit it would exit 0, so the exit code shows that the limit reached the runtime.
OOM_COMMAND = ["dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"]


@pytest.fixture(params=["splice", "grpc"])
def transport_relay(request, containerd) -> Iterator[RelayProcess]:
    workdir = Path(tempfile.mkdtemp(prefix="relay-race-", dir="/tmp"))
    relay = RelayProcess(workdir, containerd.socket, args=["--transport", request.param]).start()
    try:
        yield relay
    finally:
        relay.stop()
        containerd.remove_all()
        shutil.rmtree(workdir, ignore_errors=True)


def stub(endpoint: str) -> tuple[grpc.Channel, api_pb2_grpc.RuntimeServiceStub]:
    channel = grpc.insecure_channel(endpoint)
    return channel, api_pb2_grpc.RuntimeServiceStub(channel)


def run_container(runtime: api_pb2_grpc.RuntimeServiceStub, name: str, command: list[str],
                  memory_limit: int | None = None) -> str:
    pod_config = json_format.ParseDict(make_pod_config(name), api_pb2.PodSandboxConfig())
    pod_id = runtime.RunPodSandbox(api_pb2.RunPodSandboxRequest(config=pod_config), timeout=60).pod_sandbox_id
    config = json_format.ParseDict(make_container_config("c", command=command, memory_limit=memory_limit),
                                   api_pb2.ContainerConfig())
    cid = runtime.CreateContainer(api_pb2.CreateContainerRequest(pod_sandbox_id=pod_id, config=config,
                                                                 sandbox_config=pod_config), timeout=60).container_id
    runtime.StartContainer(api_pb2.StartContainerRequest(container_id=cid), timeout=60)
    return cid


def status_bytes(runtime: api_pb2_grpc.RuntimeServiceStub, cid: str) -> bytes:
    answer = runtime.ContainerStatus(api_pb2.ContainerStatusRequest(container_id=cid, verbose=True), timeout=30)
    return answer.SerializeToString(deterministic=True)


def wait_exited(runtime: api_pb2_grpc.RuntimeServiceStub, cid: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answer = runtime.ContainerStatus(api_pb2.ContainerStatusRequest(container_id=cid), timeout=30)
        if answer.status.state == api_pb2.CONTAINER_EXITED:
            return
        time.sleep(0.1)
    raise AssertionError(f"container {cid} did not exit within {timeout} s")


def test_oom_kill_status_reaches_the_client_unchanged(containerd, transport_relay):
    direct_channel, direct = stub(containerd.endpoint)
    relay_channel, relayed = stub(transport_relay.endpoint)
    with direct_channel, relay_channel:
        cid = run_container(relayed, "oom-race", OOM_COMMAND, memory_limit=MEMORY_LIMIT)
        wait_exited(direct, cid)
        # The status may still change once, when containerd handles the OOM event after the exit. A relayed
        # read bracketed by two equal direct reads must equal them; a change in between only means try again.
        for _ in range(20):
            before = status_bytes(direct, cid)
            through_relay = status_bytes(relayed, cid)
            after = status_bytes(direct, cid)
            if before == after:
                break
        else:
            raise AssertionError("the runtime's answer for an exited container never stayed the same for 3 reads")
        assert through_relay == before, "the relay changed the runtime's ContainerStatus answer"
        answer = api_pb2.ContainerStatusResponse.FromString(through_relay)
        assert answer.status.exit_code == 137, f"not killed by the memory limit: {answer.status}"
        assert answer.status.reason in ("OOMKilled", "Error"), answer.status.reason  # which one is the race
        spec = json.loads(answer.info["info"])["runtimeSpec"]
        assert spec["linux"]["resources"]["memory"]["limit"] == MEMORY_LIMIT


def exec_sync_error(runtime: api_pb2_grpc.RuntimeServiceStub, cid: str) -> tuple[grpc.StatusCode, str]:
    request = api_pb2.ExecSyncRequest(container_id=cid, cmd=["sleep", "30"], timeout=1)
    try:
        answer = runtime.ExecSync(request, timeout=60)
    except grpc.RpcError as e:
        return e.code(), e.details()
    raise AssertionError(f"ExecSync with a 1 s timeout of `sleep 30` returned normally: {answer}")


def test_exec_sync_timeout_reaches_the_runtime(containerd, transport_relay):
    direct_channel, direct = stub(containerd.endpoint)
    relay_channel, relayed = stub(transport_relay.endpoint)
    with direct_channel, relay_channel:
        cid = run_container(relayed, "exec-timeout", ["sleep", "3600"])
        # Had the relay dropped the timeout, the exec would run for 30 s and return exit code 0.
        assert exec_sync_error(relayed, cid) == exec_sync_error(direct, cid)
