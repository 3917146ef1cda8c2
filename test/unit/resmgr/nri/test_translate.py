"""NRI's pods and containers as the CRI requests the hook contract takes, and the hook's answers back."""

from __future__ import annotations

from resmgr.model.resources import QOS_GUARANTEED, container_from_create_request, pod_from_sandbox_config
from resmgr.nri import api_pb2 as nri
from resmgr.nri import translate
from resmgr.policy.base import ContainerEdits
from resmgr.relay.cri import api_pb2 as cri
from resmgr.relay.hooks import ContainerUpdate


def _pod() -> nri.PodSandbox:
    pod = nri.PodSandbox(id="p1", name="web", uid="u1", namespace="ns", labels={"app": "web"},
                         annotations={"a": "b"})
    pod.linux.cgroup_parent = "/kubepods/podu1"
    return pod


def _container() -> nri.Container:
    c = nri.Container(id="c1", pod_sandbox_id="p1", name="main", args=["sleep", "1"], env=["STP_POOL=x", "B=1=2"],
                      state=nri.CONTAINER_RUNNING)
    c.mounts.add(source="/host", destination="/data", options=["rbind", "ro"])
    cpu = c.linux.resources.cpu
    cpu.shares.value, cpu.quota.value, cpu.period.value, cpu.cpus = 2048, 200_000, 100_000, "0-3"
    c.linux.resources.memory.limit.value = 1 << 30
    return c


def test_create_container_reads_as_kubelets_request() -> None:
    request, response = translate.create_container(_pod(), _container())
    assert response.container_id == "c1" and request.pod_sandbox_id == "p1"
    res = request.config.linux.resources
    assert (res.cpu_shares, res.cpu_quota, res.cpu_period, res.cpuset_cpus, res.memory_limit_in_bytes) == (
        2048, 200_000, 100_000, "0-3", 1 << 30)
    assert [(kv.key, kv.value) for kv in request.config.envs] == [("STP_POOL", "x"), ("B", "1=2")]
    assert request.config.mounts[0].readonly and request.config.mounts[0].host_path == "/host"
    info = container_from_create_request(request, pod_from_sandbox_config("p1", request.sandbox_config))
    assert (info.name, info.pod_name, info.namespace, info.qos) == ("main", "web", "ns", QOS_GUARANTEED)
    assert (info.request_milli, info.limit_milli) == (2000, 2000)


def test_adjustment_carries_only_what_the_hook_changed() -> None:
    original, _ = translate.create_container(_pod(), _container())
    decided = cri.CreateContainerRequest()
    decided.CopyFrom(original)
    decided.config.linux.resources.cpuset_cpus = "2-3"
    decided.config.linux.resources.cpuset_mems = "0"
    decided.config.annotations["new"] = "1"
    decided.config.envs.add(key="ADDED", value="v")
    adjust = translate.adjustment(original, decided)
    assert (adjust.linux.resources.cpu.cpus, adjust.linux.resources.cpu.mems) == ("2-3", "0")
    assert dict(adjust.annotations) == {"new": "1"}
    assert [(kv.key, kv.value) for kv in adjust.env] == [("ADDED", "v")]
    assert translate.adjustment(original, original) == nri.ContainerAdjustment()


def test_a_rewritten_command_line_is_the_adjustments_args() -> None:
    """static-pools drops ``cmk isolate ...`` from the command (ContainerEdits): through NRI the container must
    run the rest, as through the relay; the adjustment once left the args out, so it ran the missing cmk."""
    container = _container()
    del container.args[:]
    container.args.extend(["sh", "-c", "/opt/bin/cmk isolate --conf-dir=/etc/cmk --pool=infra sleep 3600"])
    original, _ = translate.create_container(_pod(), container)
    decided = cri.CreateContainerRequest()
    decided.CopyFrom(original)
    ContainerEdits(env={"CMK_CPUS_ASSIGNED": "0"}, command=["sleep", "3600"]).apply(decided.config)
    adjust = translate.adjustment(original, decided)
    assert list(adjust.args) == ["sleep", "3600"]
    assert [(kv.key, kv.value) for kv in adjust.env] == [("CMK_CPUS_ASSIGNED", "0")]
    unchanged = cri.CreateContainerRequest()
    unchanged.CopyFrom(original)
    ContainerEdits(env={"CMK_CPUS_ASSIGNED": "0"}).apply(unchanged.config)
    assert list(translate.adjustment(original, unchanged).args) == []


def test_container_update_sets_only_the_decided_fields() -> None:
    update = translate.container_update(ContainerUpdate("c9", cpuset_cpus="1", seq=3))
    assert update.container_id == "c9" and update.ignore_failure
    assert (update.linux.resources.cpu.cpus, update.linux.resources.cpu.mems) == ("1", "")


def test_synchronize_listing_maps_states_and_resources() -> None:
    stopped = nri.Container(id="c2", pod_sandbox_id="p1", name="old", state=nri.CONTAINER_STOPPED)
    pods, containers, resources = translate.synchronized([_pod()], [_container(), stopped])
    assert [(p.id, p.metadata.namespace) for p in pods] == [("p1", "ns")]
    assert [(c.id, c.state) for c in containers] == [("c1", cri.CONTAINER_RUNNING), ("c2", cri.CONTAINER_EXITED)]
    assert resources["c1"].linux.cpuset_cpus == "0-3" and "c2" not in resources
