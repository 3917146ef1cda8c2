"""Every CRI method passes the relay, on Debian's containerd 1.6 and on containerd 2.

kubelet 1.33 calls methods containerd 1.6 does not serve and containerd 2 does: RuntimeConfig at its start
(it takes its cgroup driver from the answer), UpdatePodSandboxResources on every in-place resize,
GetContainerEvents, ListMetricDescriptors and ListPodSandboxMetrics behind feature gates. containerd 2.4 also
serves the methods of CRI v0.37 that our table (CRI v0.33, as kubelet 1.33) does not know: the Stream* calls
(server-streaming) and CheckpointPod/RestorePod. Each is called directly and through the relay with the
same request, and must get the same answer: the same status and details, and the same messages where the
runtime's answer does not change between two calls (stats and metrics carry the moment they were read).
Messages are compared decoded, lists as sets: containerd (Go) writes maps and some lists in a random order.
"""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cri_api.v1 import api_pb2
from fixtures.containerd import RUNTIMES, Containerd, running_containerd
from fixtures.cri_objects import make_container_config, make_pod_config, write_json
from google.protobuf.message import Message

from devland.tools import Tools
from resmgr.relay.hooks import INTERCEPTED_METHODS
from resmgr.relay.methods import IMAGE_SERVICE, RUNTIME_SERVICE, cri_methods
from resmgr.relay.server import Relay

pytestmark = pytest.mark.integration

TRANSPORTS = ("splice", "grpc")
EXACT, SHAPE = "exact", "shape"  # compare status, details and messages / status and message count


@pytest.fixture(scope="module", params=RUNTIMES)
def runtime(request, tools: Tools) -> Iterator[Containerd]:
    """A containerd of each kind, for this module alone (a few seconds to start)."""
    with running_containerd(tools, "ctrd-m-", runtime=request.param) as ctrd:
        yield ctrd


@pytest.fixture(scope="module")
def running(runtime: Containerd) -> tuple[str, str]:
    """A pod with a running container, made directly: (pod id, container id)."""
    pod_cfg = write_json(runtime.workdir / "pod.json", make_pod_config("methods"))
    pod_id = runtime.crictl("runp", pod_cfg).stdout.strip()
    cid = runtime.crictl("create", pod_id, write_json(runtime.workdir / "c.json", make_container_config("c")),
                         pod_cfg).stdout.strip()
    runtime.crictl("start", cid)
    return pod_id, cid


@pytest.fixture(params=TRANSPORTS)
def relay_endpoint(request, runtime: Containerd) -> Iterator[str]:
    workdir = Path(tempfile.mkdtemp(prefix="relay-m-", dir="/tmp"))
    relay = Relay(relay_socket=str(workdir / "r.sock"), runtime_socket=runtime.socket, transport=request.param)
    relay.start()
    try:
        yield "unix://" + relay.relay_socket
    finally:
        relay.stop(grace=1)


def kubelet_calls(pod_id: str, cid: str) -> dict[str, tuple[bytes, str]]:
    """A request for each method of our table that the relay passes through untouched (the intercepted ones
    go through the resource manager and have tests of their own), by short name -> (request bytes, comparison).
    State-changing ones change nothing the second call would see differently."""
    r = api_pb2
    calls = {
        "Version": (r.VersionRequest(), EXACT),
        "Status": (r.StatusRequest(), EXACT),
        "RuntimeConfig": (r.RuntimeConfigRequest(), EXACT),
        "UpdateRuntimeConfig": (r.UpdateRuntimeConfigRequest(), EXACT),
        "ListPodSandbox": (r.ListPodSandboxRequest(), EXACT),
        "PodSandboxStatus": (r.PodSandboxStatusRequest(pod_sandbox_id=pod_id), EXACT),
        "ListContainers": (r.ListContainersRequest(), EXACT),
        "ContainerStatus": (r.ContainerStatusRequest(container_id=cid), EXACT),
        "ReopenContainerLog": (r.ReopenContainerLogRequest(container_id=cid), EXACT),
        "ExecSync": (r.ExecSyncRequest(container_id=cid, cmd=["echo", "through"], timeout=30), EXACT),
        # Exec, Attach and PortForward answer with a streaming URL holding a fresh token.
        "Exec": (r.ExecRequest(container_id=cid, cmd=["true"], stdout=True), SHAPE),
        "Attach": (r.AttachRequest(container_id=cid, stdout=True), SHAPE),
        "PortForward": (r.PortForwardRequest(pod_sandbox_id=pod_id, port=[80]), SHAPE),
        "ContainerStats": (r.ContainerStatsRequest(container_id=cid), SHAPE),
        "ListContainerStats": (r.ListContainerStatsRequest(), SHAPE),
        "PodSandboxStats": (r.PodSandboxStatsRequest(pod_sandbox_id=pod_id), SHAPE),
        "ListPodSandboxStats": (r.ListPodSandboxStatsRequest(), SHAPE),
        "CheckpointContainer": (r.CheckpointContainerRequest(container_id=cid, location="/nonexistent/cp.tar"),
                                EXACT),
        "ListMetricDescriptors": (r.ListMetricDescriptorsRequest(), EXACT),
        "ListPodSandboxMetrics": (r.ListPodSandboxMetricsRequest(), SHAPE),
        "UpdatePodSandboxResources": (r.UpdatePodSandboxResourcesRequest(
            pod_sandbox_id=pod_id, resources=r.LinuxContainerResources(cpu_shares=256, cpuset_cpus="0")), EXACT),
        "ListImages": (r.ListImagesRequest(), EXACT),
        "ImageStatus": (r.ImageStatusRequest(image=r.ImageSpec(image="docker.io/library/busybox:latest")), EXACT),
        # A name that resolves nowhere: the pull fails at once (the message names a lookup, not compared).
        "PullImage": (r.PullImageRequest(image=r.ImageSpec(image="registry.invalid/none:1")), SHAPE),
        "RemoveImage": (r.RemoveImageRequest(image=r.ImageSpec(image="registry.invalid/none:1")), EXACT),
        "ImageFsInfo": (r.ImageFsInfoRequest(), SHAPE),
    }
    return {name: (request.SerializeToString(), how) for name, (request, how) in calls.items()}


# CRI v0.37 (containerd 2.4's) methods missing from our table: relayed as raw bytes of an unknown method.
# An empty message is a valid request for each. (service, name, comparison, the v0.33 message their answer
# is wire-compatible with: StreamXResponse, like ListXResponse, is field 1 repeated X)
NEWER_METHODS = (
    (RUNTIME_SERVICE, "StreamPodSandboxes", EXACT, api_pb2.ListPodSandboxResponse),
    (RUNTIME_SERVICE, "StreamContainers", EXACT, api_pb2.ListContainersResponse),
    (IMAGE_SERVICE, "StreamImages", EXACT, api_pb2.ListImagesResponse),
    (RUNTIME_SERVICE, "StreamContainerStats", SHAPE, None),
    (RUNTIME_SERVICE, "StreamPodSandboxStats", SHAPE, None),
    (RUNTIME_SERVICE, "StreamPodSandboxMetrics", SHAPE, None),
    (RUNTIME_SERVICE, "CheckpointPod", EXACT, None),
    (RUNTIME_SERVICE, "RestorePod", EXACT, None),
)


def canonical(message_class: type[Message], raw: bytes) -> bytes:
    """``raw`` decoded and written again with map keys and top-level lists sorted."""
    message = message_class.FromString(raw)
    for field, value in message.ListFields():
        if field.is_repeated and field.message_type is not None and not \
                field.message_type.GetOptions().map_entry:
            items = sorted(value, key=lambda item: item.SerializeToString(deterministic=True))
            copies = [type(item)() for item in items]
            for copy, item in zip(copies, items, strict=True):
                copy.CopyFrom(item)
            del value[:]
            value.extend(copies)
    return message.SerializeToString(deterministic=True)


def answer(endpoint: str, path: str, request: bytes, streaming: bool, how: str,
           message_class: type[Message] | None) -> tuple:
    """What a call got, in the form compared: (status, details or None, messages or their count)."""
    with grpc.insecure_channel(endpoint) as channel:
        try:
            if streaming:
                messages = list(channel.unary_stream(path)(request, timeout=60))
            else:
                messages = [channel.unary_unary(path)(request, timeout=60)]
        except grpc.RpcError as err:
            return err.code().name, err.details() if how == EXACT else None, None
    if how == SHAPE:
        return "OK", None, len(messages)
    assert message_class is not None, path
    return "OK", None, [canonical(message_class, m) for m in messages]


def test_every_method_the_relay_does_not_intercept_is_called_here():
    """The table is built from cri_api's descriptors: a method a newer cri_api brings must be added above."""
    passthrough = {m.name for m in cri_methods().values() if m.name not in INTERCEPTED_METHODS}
    assert passthrough == set(kubelet_calls("p", "c")) | {"GetContainerEvents"}


def test_unary_methods_answer_as_the_runtime_does(runtime, running, relay_endpoint):
    methods = {m.name: m for m in cri_methods().values()}
    got = {}
    for name, (request, how) in kubelet_calls(*running).items():
        method = methods[name]
        direct = answer(runtime.endpoint, method.path, request, False, how, method.response_class)
        relayed = answer(relay_endpoint, method.path, request, False, how, method.response_class)
        got[name] = direct[0]
        assert relayed == direct, name
    if runtime.runtime == "containerd2":  # what kubelet 1.33 newly relies on is served, and got through
        for name in ("RuntimeConfig", "UpdatePodSandboxResources", "ListMetricDescriptors", "ListPodSandboxMetrics"):
            assert got[name] == "OK", name
    else:
        assert got["RuntimeConfig"] == "UNIMPLEMENTED"  # kubelet falls back to its own cgroupDriver


def test_newer_cri_methods_pass_as_unknown_methods(runtime, running, relay_endpoint):
    for service, name, how, message_class in NEWER_METHODS:
        path = f"/{service}/{name}"
        assert path not in cri_methods()
        direct = answer(runtime.endpoint, path, b"", True, how, message_class)
        relayed = answer(relay_endpoint, path, b"", True, how, message_class)
        assert relayed == direct, name
        if runtime.runtime == "containerd2" and name in ("StreamPodSandboxes", "StreamImages"):
            assert direct[0] == "OK" and direct[2], name  # served, and not empty: the messages were compared


class EventReader:
    """GetContainerEvents in a thread: every event's (id, type), or the status it ended with."""

    def __init__(self, endpoint: str) -> None:
        self.channel = grpc.insecure_channel(endpoint)
        path = f"/{RUNTIME_SERVICE}/GetContainerEvents"
        self.stream = self.channel.unary_stream(
            path, response_deserializer=api_pb2.ContainerEventResponse.FromString)(
            api_pb2.GetEventsRequest().SerializeToString(), timeout=120)
        self.events: list[tuple[str, int]] = []
        self.ended: str | None = None
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for event in self.stream:
                with self.changed:
                    self.events.append((event.container_id, event.container_event_type))
                    self.changed.notify_all()
        except grpc.RpcError as err:
            with self.changed:
                self.ended = err.code().name
                self.changed.notify_all()

    def wait(self, done, timeout: float = 30) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.ended is not None or done(self.events), timeout)

    def close(self) -> None:
        self.stream.cancel()
        self.channel.close()
        self.thread.join(10)


def test_container_events_stream_through(runtime, relay_endpoint, tmp_path):
    """The events of a pod started directly reach a GetContainerEvents stream through the relay as they reach
    one opened on the runtime. A stream has no sign of being subscribed: pods are started until both streams
    have seen one, and the pod started after that is compared."""
    direct, relayed = EventReader(runtime.endpoint), EventReader(relay_endpoint)
    pods: list[str] = []
    try:

        def start_pod() -> str:
            cfg = write_json(tmp_path / f"p{len(pods)}.json", make_pod_config(f"events{len(pods)}"))
            pods.append(runtime.crictl("runp", cfg).stdout.strip())
            return pods[-1]

        def seen(pod_id: str, types: int = 1):
            return lambda events: len([e for e in events if e[0] == pod_id]) >= types

        for _ in range(10):
            pod_id = start_pod()
            if all(r.wait(seen(pod_id), 10) for r in (direct, relayed)):
                break
        if direct.ended is not None:  # containerd 1.6: not implemented, and the relay says so too
            assert relayed.wait(lambda _: False, 30) and relayed.ended == direct.ended == "UNIMPLEMENTED"
            assert runtime.runtime != "containerd2"
            return
        assert relayed.ended is None and pods and seen(pods[-1])(direct.events), "no event came directly"
        compared = start_pod()
        started = api_pb2.ContainerEventType.CONTAINER_STARTED_EVENT
        for reader in (direct, relayed):
            assert reader.wait(lambda events: (compared, started) in events, 30)
        assert [e for e in relayed.events if e[0] == compared] == [e for e in direct.events if e[0] == compared]
    finally:
        direct.close()
        relayed.close()
        for pod_id in pods:  # not remove_all: the module's running pod stays
            runtime.crictl("stopp", pod_id, check=False)
            runtime.crictl("rmp", "-f", pod_id, check=False)
