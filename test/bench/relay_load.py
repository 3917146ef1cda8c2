"""The 32-client CRI mix of issue 15 (kubelet-like traffic from many connections) for relay benchmarks.

28 unary callers, each on its own connection, call Version, ListContainers, ContainerStatus, ExecSync,
ListContainerStats and ListImages (caller i calls method i % 6); 3 GetContainerEvents streams stay open;
1 pod churner starts and removes pods. ``LoadMix`` runs until stopped and counts calls and errors.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

import grpc
from cri_api.v1 import api_pb2, api_pb2_grpc
from fixtures import pod_cgroups

UNARY_CALLERS = 28
EVENT_STREAMS = 3
# A caller pauses this long between calls: about 280 unary calls/s in all, kubelet-like rather than a
# flood, so a 5-minute soak leaves a shared 2-core machine usable. ExecSync runs a process in a container.
CALL_PAUSE_S = 0.1
EXEC_PAUSE_S = 0.5


def pod_config(name: str, namespace: str = "bench") -> api_pb2.PodSandboxConfig:
    uid = str(uuid.uuid4())
    return api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name=name, namespace=namespace, uid=uid),
        hostname=name, log_directory=f"/tmp/cri-bench-logs/{uid}",
        linux=api_pb2.LinuxPodSandboxConfig(cgroup_parent=pod_cgroups.issued(f"/kubepods/besteffort/pod{uid}")))


def container_config(name: str, image: str) -> api_pb2.ContainerConfig:
    return api_pb2.ContainerConfig(metadata=api_pb2.ContainerMetadata(name=name),
                                   image=api_pb2.ImageSpec(image=image), command=["sleep", "3600"],
                                   log_path=f"{name}.log")


# Answers that mean the call did not get through (the relay's or the transport's failure). Anything else,
# such as NOT_FOUND from ListContainerStats for a container the churner just removed, is the runtime's
# answer and would come without the relay too.
FAILURES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL,
                      grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED,
                      grpc.StatusCode.CANCELLED, grpc.StatusCode.DATA_LOSS})


class LoadMix:
    """The 32-client mix against ``endpoint`` (the relay); ``image`` runs the containers."""

    def __init__(self, endpoint: str, image: str) -> None:
        self.endpoint = endpoint
        self.image = image
        self.calls = 0
        self.errors: list[str] = []  # the first 20 failures (FAILURES)
        self.failures = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._channels: list[grpc.Channel] = []
        self._streams: list[grpc.Future] = []
        self._pod_id = ""
        self._container_id = ""

    def _channel(self) -> grpc.Channel:
        channel = grpc.insecure_channel(self.endpoint)
        self._channels.append(channel)
        return channel

    def _count(self, error: str | None = None) -> None:
        with self._lock:
            self.calls += 1
            if error is not None:
                self.failures += 1
                if len(self.errors) < 20:
                    self.errors.append(error)

    def start(self) -> LoadMix:
        setup = api_pb2_grpc.RuntimeServiceStub(self._channel())
        config = pod_config("load-target", "load")
        self._pod_id = setup.RunPodSandbox(api_pb2.RunPodSandboxRequest(config=config), timeout=120).pod_sandbox_id
        self._container_id = setup.CreateContainer(api_pb2.CreateContainerRequest(
            pod_sandbox_id=self._pod_id, config=container_config("target", self.image), sandbox_config=config),
            timeout=120).container_id
        setup.StartContainer(api_pb2.StartContainerRequest(container_id=self._container_id), timeout=120)
        cid = self._container_id
        calls: list[tuple[str, Callable[[object], object], float]] = [
            ("Version", lambda s: s.Version(api_pb2.VersionRequest(), timeout=30), CALL_PAUSE_S),
            ("ListContainers", lambda s: s.ListContainers(api_pb2.ListContainersRequest(), timeout=30),
             CALL_PAUSE_S),
            ("ContainerStatus", lambda s: s.ContainerStatus(
                api_pb2.ContainerStatusRequest(container_id=cid), timeout=30), CALL_PAUSE_S),
            ("ExecSync", lambda s: s.ExecSync(api_pb2.ExecSyncRequest(container_id=cid, cmd=["true"], timeout=10),
                                              timeout=30), EXEC_PAUSE_S),
            ("ListContainerStats", lambda s: s.ListContainerStats(api_pb2.ListContainerStatsRequest(), timeout=30),
             CALL_PAUSE_S),
            ("ListImages", lambda s: s.ListImages(api_pb2.ListImagesRequest(), timeout=30), CALL_PAUSE_S),
        ]
        for i in range(UNARY_CALLERS):
            name, call, pause = calls[i % len(calls)]
            channel = self._channel()
            stub = (api_pb2_grpc.ImageServiceStub if name == "ListImages" else api_pb2_grpc.RuntimeServiceStub)(channel)
            self._spawn(self._unary, name, stub, call, pause)
        for _ in range(EVENT_STREAMS):
            self._spawn(self._events, api_pb2_grpc.RuntimeServiceStub(self._channel()))
        self._spawn(self._churn, api_pb2_grpc.RuntimeServiceStub(self._channel()))
        return self

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _unary(self, name: str, stub: object, call: Callable[[object], object], pause: float) -> None:
        while not self._stop.is_set():
            try:
                call(stub)
                self._count()
            except grpc.RpcError as err:
                self._count(f"{name}: {err.code().name} {err.details()}" if err.code() in FAILURES else None)
            self._stop.wait(pause)

    def _events(self, stub: api_pb2_grpc.RuntimeServiceStub) -> None:
        """Keep an event stream open; reopen it after a second when it ends. Containerd before 1.7
        answers UNIMPLEMENTED at once (that is its answer, not a relay error), so there the stream is
        opened and closed once a second."""
        while not self._stop.is_set():
            stream = stub.GetContainerEvents(api_pb2.GetEventsRequest())
            with self._lock:
                self._streams.append(stream)
            try:
                for _ in stream:
                    pass
                self._count()
            except grpc.RpcError as err:
                if self._stop.is_set() or err.code() == grpc.StatusCode.UNIMPLEMENTED:
                    self._count()
                else:
                    self._count(f"GetContainerEvents: {err.code().name} {err.details()}")
            with self._lock:
                self._streams.remove(stream)
            self._stop.wait(1)

    def _churn(self, stub: api_pb2_grpc.RuntimeServiceStub) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            try:
                config = pod_config(f"churn-{n}", "load")
                pod = stub.RunPodSandbox(api_pb2.RunPodSandboxRequest(config=config), timeout=120).pod_sandbox_id
                ctr = stub.CreateContainer(api_pb2.CreateContainerRequest(
                    pod_sandbox_id=pod, config=container_config("c", self.image), sandbox_config=config),
                    timeout=120).container_id
                stub.StartContainer(api_pb2.StartContainerRequest(container_id=ctr), timeout=120)
                stub.StopPodSandbox(api_pb2.StopPodSandboxRequest(pod_sandbox_id=pod), timeout=120)
                stub.RemovePodSandbox(api_pb2.RemovePodSandboxRequest(pod_sandbox_id=pod), timeout=120)
                for _ in range(5):
                    self._count()
            except grpc.RpcError as err:
                self._count(f"pod churn: {err.code().name} {err.details()}")
                self._stop.wait(1)

    def stop(self) -> None:
        """Stop every client, close the streams and connections and remove the target pod."""
        self._stop.set()
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            stream.cancel()
        for thread in self._threads:
            thread.join(timeout=150)
        if self._pod_id:
            stub = api_pb2_grpc.RuntimeServiceStub(self._channels[0])
            stub.StopPodSandbox(api_pb2.StopPodSandboxRequest(pod_sandbox_id=self._pod_id), timeout=120)
            stub.RemovePodSandbox(api_pb2.RemovePodSandboxRequest(pod_sandbox_id=self._pod_id), timeout=120)
        for channel in self._channels:
            channel.close()


def soak(relay_rss_mb: Callable[[], float], seconds: float, sample_every: float = 5.0,
         progress: Callable[[str], None] = print) -> tuple[float, float, float]:
    """Sample the relay's RSS for ``seconds``; returns (first, last, max) in MB, logging progress each minute."""
    first = relay_rss_mb()
    peak = last = first
    started = time.monotonic()
    next_log = started + 60
    while (now := time.monotonic()) - started < seconds:
        time.sleep(min(sample_every, max(0.0, seconds - (now - started))))
        last = relay_rss_mb()
        peak = max(peak, last)
        if time.monotonic() >= next_log:
            progress(f"  soak {time.monotonic() - started:.0f}s: rss {last:.1f} MB (max {peak:.1f})")
            next_log += 60
    return first, last, peak
