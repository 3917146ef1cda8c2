"""Drive a ResourceManager through the hook protocol the way the relay does, tracking the
cpusets a runtime would have applied (create-time request plus ContainerUpdates)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from cri_api.v1 import api_pb2
from unit.resmgr.cri_requests import create_request, pod_config

from resmgr.config import validate_config_text
from resmgr.manager.resource_manager import ResourceManager
from resmgr.relay.hooks import ContainerUpdate
from resmgr.topology import Topology


class FakeRuntime:
    """What the runtime would hold: pods, containers and each container's cpuset/mems."""

    def __init__(self) -> None:
        self.pods: dict[str, api_pb2.PodSandboxConfig] = {}
        self.cpusets: dict[str, tuple[str, str]] = {}
        self.container_pod: dict[str, str] = {}
        self.container_name: dict[str, str] = {}

    def apply(self, updates: list[ContainerUpdate]) -> None:
        for u in updates:
            assert u.container_id in self.cpusets, f"update for unknown container {u.container_id}"
            cpus, mems = self.cpusets[u.container_id]
            self.cpusets[u.container_id] = (u.cpuset_cpus if u.cpuset_cpus is not None else cpus,
                                            u.cpuset_mems if u.cpuset_mems is not None else mems)

    def listing(self) -> tuple[list[api_pb2.PodSandbox], list[api_pb2.Container]]:
        pods = [api_pb2.PodSandbox(id=pid, metadata=cfg.metadata, labels=cfg.labels, annotations=cfg.annotations)
                for pid, cfg in self.pods.items()]
        containers = [api_pb2.Container(id=cid, pod_sandbox_id=self.container_pod[cid],
                                        metadata=api_pb2.ContainerMetadata(name=self.container_name[cid]),
                                        state=api_pb2.CONTAINER_RUNNING)
                      for cid in self.cpusets]
        return pods, containers


class Driver:
    def __init__(self, topology: Topology, relay_dir: Path, config_text: str) -> None:
        self.topology = topology
        self.relay_dir = relay_dir
        self.config = validate_config_text(config_text)
        self.runtime = FakeRuntime()
        self.rm = self.new_rm()
        self.seq = 0

    def new_rm(self, **kw: Any) -> ResourceManager:
        return ResourceManager(self.topology, relay_dir=self.relay_dir, fallback_config=self.config,
                               cache_fsync=False, **kw)

    def run_pod(self, name: str, *, namespace: str = "default", qos: str = "besteffort",
                annotations: dict[str, str] | None = None) -> str:
        cfg = pod_config(name, namespace=namespace, qos=qos, annotations=annotations)
        req = api_pb2.RunPodSandboxRequest(config=cfg)
        self.runtime.apply(self.rm.before("RunPodSandbox", req).updates)
        pod_id = f"pod-{name}"
        self.runtime.pods[pod_id] = cfg
        self.runtime.apply(self.rm.after("RunPodSandbox", req, api_pb2.RunPodSandboxResponse(pod_sandbox_id=pod_id)))
        return pod_id

    def create(self, pod_id: str, name: str, milli: int = 0, *, fail: bool = False,
               annotations: dict[str, str] | None = None) -> str | None:
        req = create_request(pod_id, self.runtime.pods[pod_id], name, cpu_milli=milli, annotations=annotations)
        result = self.rm.before("CreateContainer", req)
        self.runtime.apply(result.updates)
        if fail:
            self.runtime.apply(self.rm.failed("CreateContainer", req, result.call))
            return None
        sent = result.request or req
        self.seq += 1
        cid = f"ctr-{self.seq}-{name}"
        res = sent.config.linux.resources
        self.runtime.cpusets[cid] = (res.cpuset_cpus, res.cpuset_mems)
        self.runtime.container_pod[cid] = pod_id
        self.runtime.container_name[cid] = name
        resp = api_pb2.CreateContainerResponse(container_id=cid)
        self.runtime.apply(self.rm.after("CreateContainer", sent, resp, result.call))
        return cid

    def call(self, method: str, request: Any, response: Any, *, fail: bool = False,
             send: Callable[[list[ContainerUpdate]], None] | None = None) -> None:
        """One relayed call; with ``fail`` the runtime refuses it: ``failed`` instead of ``after``.
        ``send`` delivers the container updates (default: straight to the runtime)."""
        send = send or self.runtime.apply
        result = self.rm.before(method, request)
        send(result.updates)
        if fail:
            send(self.rm.failed(method, result.request or request, result.call))
            return
        if method == "UpdateContainerResources":
            sent = result.request or request
            cid = sent.container_id
            self.runtime.cpusets[cid] = (sent.linux.cpuset_cpus or self.runtime.cpusets[cid][0],
                                         sent.linux.cpuset_mems or self.runtime.cpusets[cid][1])
        if method == "RemoveContainer":
            for d in (self.runtime.cpusets, self.runtime.container_pod, self.runtime.container_name):
                d.pop(request.container_id, None)
        if method == "RemovePodSandbox":
            for cid in [c for c, p in self.runtime.container_pod.items() if p == request.pod_sandbox_id]:
                for d in (self.runtime.cpusets, self.runtime.container_pod, self.runtime.container_name):
                    d.pop(cid, None)
            self.runtime.pods.pop(request.pod_sandbox_id, None)
        send(self.rm.after(method, request, response, result.call))

    def remove_container(self, cid: str, send: Callable[[list[ContainerUpdate]], None] | None = None) -> None:
        self.call("StopContainer", api_pb2.StopContainerRequest(container_id=cid), api_pb2.StopContainerResponse(),
                  send=send)
        self.call("RemoveContainer", api_pb2.RemoveContainerRequest(container_id=cid),
                  api_pb2.RemoveContainerResponse(), send=send)

    def remove_pod(self, pod_id: str) -> None:
        self.call("StopPodSandbox", api_pb2.StopPodSandboxRequest(pod_sandbox_id=pod_id),
                  api_pb2.StopPodSandboxResponse())
        self.call("RemovePodSandbox", api_pb2.RemovePodSandboxRequest(pod_sandbox_id=pod_id),
                  api_pb2.RemovePodSandboxResponse())

    def kubelet_update(self, cid: str, cpus: str = "", *, milli: int | None = None, guaranteed: bool = False,
                       fail: bool = False) -> None:
        """UpdateContainerResources as kubelet sends it: a cpuset, and/or new CPU resources (resize)."""
        linux = api_pb2.LinuxContainerResources(cpuset_cpus=cpus)
        if milli is not None:
            linux.cpu_shares = max(2, milli * 1024 // 1000)
            if guaranteed:
                linux.cpu_period, linux.cpu_quota = 100_000, milli * 100
                linux.memory_limit_in_bytes = 1 << 30
        req = api_pb2.UpdateContainerResourcesRequest(container_id=cid, linux=linux)
        self.call("UpdateContainerResources", req, api_pb2.UpdateContainerResourcesResponse(), fail=fail)

    def settle(self) -> None:
        """Another relayed call. Failed calls are reported at once (``failed``), so nothing is left to settle."""
        self.runtime.apply(self.rm.before("StartContainer", api_pb2.StartContainerRequest(container_id="-")).updates)

    def restart(self, *, statuses: bool = True, **kw: Any) -> list[ContainerUpdate]:
        """A new ResourceManager from the cache, synced with the runtime's listing (and, with
        ``statuses``, the cpusets the runtime reports, as ContainerStatus would)."""
        self.rm = self.new_rm(**kw)
        pods, containers = self.runtime.listing()
        resources = None
        if statuses:
            resources = {cid: api_pb2.ContainerResources(linux=api_pb2.LinuxContainerResources(
                cpuset_cpus=cpus, cpuset_mems=mems)) for cid, (cpus, mems) in self.runtime.cpusets.items()}
        updates = self.rm.sync_with_runtime(pods, containers, resources)
        self.runtime.apply(updates)
        return updates

    def runtime_view(self) -> dict[str, tuple[str | None, str | None]]:
        """The runtime's cpusets, in the shape of ResourceManager.placements() (None: unset)."""
        wanted = self.rm.placements()
        out = {}
        for cid, (cpus, mems) in self.runtime.cpusets.items():
            want_c, want_m = wanted.get(cid, (None, None))
            out[cid] = (cpus if want_c is not None else None, mems if want_m is not None else None)
        return out
