"""Resource-manager hooks injected into a relay in front of real containerd change what the runtime does."""

from __future__ import annotations

import json

from cri_api.v1 import api_pb2
from fixtures.cri_objects import make_container_config, make_pod_config, write_json

from devland.waiting import eventually
from resmgr.relay.hooks import ContainerUpdate, HookResult, NoopHook


class PinningHook(NoopHook):
    """Pins every new container to CPU 1; after the second container starts, moves the first to CPU 0."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.created: list[str] = []
        self.synced: tuple[list, list] | None = None

    def sync_with_runtime(self, pods, containers):
        self.synced = (pods, containers)
        # Like the resource manager re-placing what it finds: move running containers to CPU 1.
        return [ContainerUpdate(c.id, cpuset_cpus="1", reason="startup") for c in containers
                if c.state == api_pb2.CONTAINER_RUNNING]

    def reconfigure(self, config):
        self.reconfigured = config
        return [ContainerUpdate(cid, cpuset_cpus=config["cpus"]) for cid in config["containers"]]

    def before(self, method, request):
        self.calls.append(("before", method))
        if method == "CreateContainer":
            request.config.linux.resources.cpuset_cpus = "1"
            return HookResult(request=request)
        return HookResult()

    def after(self, method, request, response):
        self.calls.append(("after", method))
        if method == "CreateContainer":
            self.created.append(response.container_id)
        if method == "StartContainer" and len(self.created) == 2:
            return [ContainerUpdate(self.created[0], cpuset_cpus="0", reason="test")]
        return []


def test_hook_places_containers_and_updates_others(containerd, inproc_relay, tmp_path):
    hook = PinningHook()
    relay = inproc_relay(hook)
    ep = relay.endpoint
    pod_cfg = write_json(tmp_path / "pod.json", make_pod_config("hooked"))
    pod_id = containerd.crictl("runp", pod_cfg, endpoint=ep).stdout.strip()
    ids = []
    for name in ("a", "b"):
        cfg = write_json(tmp_path / f"{name}.json", make_container_config(name, cpuset_cpus="0-1"))
        cid = containerd.crictl("create", pod_id, cfg, pod_cfg, endpoint=ep).stdout.strip()
        containerd.crictl("start", cid, endpoint=ep)
        ids.append(cid)
    assert hook.created == ids
    # b kept the hook's placement; a was moved by the update the hook asked for after b started.
    assert containerd.cgroup_cpuset(ids[1]) == "1"
    # With the splice transport kubelet gets StartContainer's answer while the hook's ``after`` and its
    # updates still run (under the lock, so the next state change waits for them): poll briefly.
    assert eventually(lambda: containerd.cgroup_cpuset(ids[0]) == "0")
    assert hook.calls[:4] == [("before", "RunPodSandbox"), ("after", "RunPodSandbox"),
                              ("before", "CreateContainer"), ("after", "CreateContainer")]
    assert eventually(lambda: relay.metrics.registry.get_sample_value("cri_resmgr_container_updates_total",
                                                                      {"result": "ok"}) == 1, timeout=10)
    # Non-intercepted calls never reach the hook.
    containerd.crictl("ps", endpoint=ep)
    assert not any(m in ("ListContainers", "Version") for _, m in hook.calls)


def test_failing_hook_never_fails_kubelet(containerd, inproc_relay, tmp_path):
    class Broken(NoopHook):
        def before(self, method, request):
            raise RuntimeError("policy exploded")

        def after(self, method, request, response):
            raise RuntimeError("policy exploded again")

    relay = inproc_relay(Broken())
    ep = relay.endpoint
    pod_cfg = write_json(tmp_path / "pod.json", make_pod_config("broken-hook"))
    pod_id = containerd.crictl("runp", pod_cfg, endpoint=ep).stdout.strip()
    cfg = write_json(tmp_path / "c.json", make_container_config("c", cpuset_cpus="1"))
    cid = containerd.crictl("create", pod_id, cfg, pod_cfg, endpoint=ep).stdout.strip()
    containerd.crictl("start", cid, endpoint=ep)
    assert containerd.cgroup_cpuset(cid) == "1"  # the original request went through unchanged
    for method in ("RunPodSandbox", "CreateContainer", "StartContainer"):
        for phase in ("before", "after"):
            assert eventually(lambda m=method, p=phase: relay.metrics.registry.get_sample_value(
                "cri_resmgr_policy_errors_total", {"method": m, "phase": p}) == 1, timeout=10), (method, phase)


def test_startup_sync_sees_existing_pods(containerd, inproc_relay, tmp_path):
    pod_cfg = write_json(tmp_path / "pod.json", make_pod_config("pre-existing"))
    pod_id = containerd.crictl("runp", pod_cfg).stdout.strip()
    cfg = write_json(tmp_path / "c.json", make_container_config("c", cpuset_cpus="0"))
    cid = containerd.crictl("create", pod_id, cfg, pod_cfg).stdout.strip()
    containerd.crictl("start", cid)
    assert containerd.cgroup_cpuset(cid) == "0"
    hook = PinningHook()
    relay = inproc_relay(hook)
    pods, containers = hook.synced
    assert pod_id in [p.id for p in pods] and cid in [c.id for c in containers]
    assert all(isinstance(p, api_pb2.PodSandbox) for p in pods)
    assert relay.snapshot is not None and len(relay.snapshot.pods) == len(pods)
    # The updates the resource manager asked for at startup were applied before serving.
    assert containerd.cgroup_cpuset(cid) == "1"
    info = json.loads(containerd.crictl("inspectp", pod_id, endpoint=relay.endpoint).stdout)
    assert info["status"]["id"] == pod_id
    # A re-read config (SIGHUP) reaches the resource manager, and its updates are applied too.
    relay.reconfigure_hook({"cpus": "0", "containers": [cid]})
    assert hook.reconfigured["cpus"] == "0" and containerd.cgroup_cpuset(cid) == "0"


def test_rewritten_requests_keep_flow_control_in_step(containerd, inproc_relay, tmp_path):
    """A hook that grows requests a lot, many times on ONE connection (as kubelet uses), must not break it."""
    import grpc
    from cri_api.v1 import api_pb2_grpc

    class Growing(NoopHook):
        def before(self, method, request):
            if method == "CreateContainer":
                request.config.annotations["padding"] = "x" * 40000
                return HookResult(request=request)
            return HookResult()

    relay = inproc_relay(Growing())
    pod_cfg = make_pod_config("grow")
    with grpc.insecure_channel(relay.endpoint) as channel:
        stub = api_pb2_grpc.RuntimeServiceStub(channel)
        config = api_pb2.PodSandboxConfig()
        config.metadata.name, config.metadata.namespace = "grow", "default"
        config.metadata.uid = pod_cfg["metadata"]["uid"]
        config.linux.cgroup_parent = pod_cfg["linux"]["cgroup_parent"]
        pod_id = stub.RunPodSandbox(api_pb2.RunPodSandboxRequest(config=config), timeout=60).pod_sandbox_id
        ids = []
        for i in range(6):  # 6 x 40 KB is well past HTTP/2's 64 KB initial window
            request = api_pb2.CreateContainerRequest(pod_sandbox_id=pod_id, sandbox_config=config)
            request.config.metadata.name = f"c{i}"
            request.config.image.image = containerd.busybox_image
            request.config.command.extend(["sleep", "60"])
            ids.append(stub.CreateContainer(request, timeout=60).container_id)
            stub.ListContainers(api_pb2.ListContainersRequest(), timeout=30)
        status = stub.ContainerStatus(api_pb2.ContainerStatusRequest(container_id=ids[-1], verbose=True),
                                      timeout=30)
        assert len(status.status.annotations["padding"]) == 40000
        assert len({c.id for c in stub.ListContainers(api_pb2.ListContainersRequest()).containers} & set(ids)) == 6
