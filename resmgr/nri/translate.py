"""NRI's pods and containers as the CRI messages the hook contract takes, and the hook's answers back as NRI's.

The resource manager decides on CRI requests (``resmgr.relay.hooks``). NRI hands a plugin the pod and
container the runtime is about to create instead, so they are written as the CRI request kubelet sent
(the fields our model reads: metadata, labels, annotations, cgroup parent, command, environment, mounts,
Linux resources), and the request the hook returns is read back as an NRI ``ContainerAdjustment``.
"""

from __future__ import annotations

from typing import Any

from resmgr.nri import api_pb2 as nri
from resmgr.relay.cri import api_pb2 as cri
from resmgr.relay.hooks import ContainerUpdate

_STATE = {nri.CONTAINER_CREATED: cri.CONTAINER_CREATED, nri.CONTAINER_PAUSED: cri.CONTAINER_RUNNING,
          nri.CONTAINER_RUNNING: cri.CONTAINER_RUNNING, nri.CONTAINER_STOPPED: cri.CONTAINER_EXITED}


def sandbox_config(pod: nri.PodSandbox) -> cri.PodSandboxConfig:
    config = cri.PodSandboxConfig(metadata=cri.PodSandboxMetadata(name=pod.name, uid=pod.uid,
                                                                  namespace=pod.namespace),
                                  labels=dict(pod.labels), annotations=dict(pod.annotations))
    if pod.HasField("linux"):
        config.linux.cgroup_parent = pod.linux.cgroup_parent
    return config


def run_pod(pod: nri.PodSandbox) -> tuple[cri.RunPodSandboxRequest, cri.RunPodSandboxResponse]:
    return (cri.RunPodSandboxRequest(config=sandbox_config(pod), runtime_handler=pod.runtime_handler),
            cri.RunPodSandboxResponse(pod_sandbox_id=pod.id))


def linux_resources(resources: nri.LinuxResources) -> cri.LinuxContainerResources:
    """NRI's Linux resources (optional values) as CRI's (zero for unset)."""
    out = cri.LinuxContainerResources()
    if resources.HasField("cpu"):
        cpu = resources.cpu
        out.cpu_shares = cpu.shares.value
        out.cpu_quota = cpu.quota.value
        out.cpu_period = cpu.period.value
        out.cpuset_cpus = cpu.cpus
        out.cpuset_mems = cpu.mems
    if resources.HasField("memory"):
        out.memory_limit_in_bytes = resources.memory.limit.value
    return out


def _container_config(container: nri.Container) -> cri.ContainerConfig:
    envs = [cri.KeyValue(key=k, value=v) for k, _, v in (e.partition("=") for e in container.env)]
    mounts = [cri.Mount(host_path=m.source, container_path=m.destination, readonly="ro" in m.options)
              for m in container.mounts]
    config = cri.ContainerConfig(metadata=cri.ContainerMetadata(name=container.name), command=list(container.args),
                                 labels=dict(container.labels), annotations=dict(container.annotations),
                                 envs=envs, mounts=mounts)
    if container.HasField("linux") and container.linux.HasField("resources"):
        config.linux.resources.CopyFrom(linux_resources(container.linux.resources))
    return config


def create_container(pod: nri.PodSandbox, container: nri.Container
                     ) -> tuple[cri.CreateContainerRequest, cri.CreateContainerResponse]:
    request = cri.CreateContainerRequest(pod_sandbox_id=container.pod_sandbox_id or pod.id,
                                         config=_container_config(container), sandbox_config=sandbox_config(pod))
    return request, cri.CreateContainerResponse(container_id=container.id)


def adjustment(original: cri.CreateContainerRequest, decided: cri.CreateContainerRequest) -> nri.ContainerAdjustment:
    """What the hook changed in a create request, as an NRI adjustment: cpuset, memory nodes, annotations, env,
    and the command line (static-pools drops ``cmk isolate ...`` from it).

    Only changes are sent: containerd refuses an adjustment that two plugins both make, so what we did not
    decide stays with whoever did.
    """
    adjust = nri.ContainerAdjustment()
    old, new = original.config.linux.resources, decided.config.linux.resources
    if new.cpuset_cpus != old.cpuset_cpus and new.cpuset_cpus:
        adjust.linux.resources.cpu.cpus = new.cpuset_cpus
    if new.cpuset_mems != old.cpuset_mems and new.cpuset_mems:
        adjust.linux.resources.cpu.mems = new.cpuset_mems
    for key, value in decided.config.annotations.items():
        if original.config.annotations.get(key) != value:
            adjust.annotations[key] = value
    old_env = {kv.key: kv.value for kv in original.config.envs}
    for kv in decided.config.envs:
        if old_env.get(kv.key) != kv.value:
            adjust.env.add(key=kv.key, value=kv.value)
    # NRI's args are the process's whole argv (``_container_config`` read them as the command), and an
    # adjustment's args replace it (containerd/nri pkg/adaptation/result.go, adjustArgs); a leading "" would
    # mean "clear another plugin's args" there, so an argv starting with "" is not sent.
    command = [*decided.config.command, *decided.config.args]
    if command != [*original.config.command, *original.config.args] and command and command[0]:
        adjust.args.extend(command)
    return adjust


def container_update(update: ContainerUpdate) -> nri.ContainerUpdate:
    """A hook's update of another container as NRI's; a failure is not fatal for the event that carries it."""
    out = nri.ContainerUpdate(container_id=update.container_id, ignore_failure=True)
    cpu = out.linux.resources.cpu
    if update.cpuset_cpus is not None:
        cpu.cpus = update.cpuset_cpus
    if update.cpuset_mems is not None:
        cpu.mems = update.cpuset_mems
    return out


def update_resources(container: nri.Container, resources: nri.LinuxResources) -> cri.UpdateContainerResourcesRequest:
    return cri.UpdateContainerResourcesRequest(container_id=container.id, linux=linux_resources(resources))


def listed_pod(pod: nri.PodSandbox) -> cri.PodSandbox:
    return cri.PodSandbox(id=pod.id, metadata=cri.PodSandboxMetadata(name=pod.name, uid=pod.uid,
                                                                     namespace=pod.namespace),
                          state=cri.SANDBOX_READY, labels=dict(pod.labels), annotations=dict(pod.annotations))


def listed_container(container: nri.Container) -> cri.Container:
    return cri.Container(id=container.id, pod_sandbox_id=container.pod_sandbox_id,
                         metadata=cri.ContainerMetadata(name=container.name),
                         state=_STATE.get(container.state, cri.CONTAINER_UNKNOWN),
                         labels=dict(container.labels), annotations=dict(container.annotations))


def synchronized(pods: list[nri.PodSandbox], containers: list[nri.Container]
                 ) -> tuple[list[cri.PodSandbox], list[cri.Container], dict[str, Any]]:
    """Synchronize's listing as the runtime listing ``sync_with_runtime`` takes, with every container's resources
    (NRI sends them with the listing, so the cgroups that disagree with the policy are found without a read)."""
    resources = {c.id: cri.ContainerResources(linux=linux_resources(c.linux.resources))
                 for c in containers if c.HasField("linux") and c.linux.HasField("resources")}
    return [listed_pod(p) for p in pods], [listed_container(c) for c in containers], resources
