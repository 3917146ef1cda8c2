"""Give running containers back the cpusets kubelet would give them, once the relay lets go.

Kubelet sets a container's cpuset only when it starts it (and, with the static CPU manager
policy, when the shared pool changes), so after uninstall or a fallback every container would
keep the exclusive or NUMA-pinned set the relay chose until it restarts. What kubelet would
give: with the static policy, the container's assignment in ``cpu_manager_state``, else its
default (shared) set; with policy none (no state, or no default set), all online CPUs.
Memory nodes go back to all online nodes.
"""

from __future__ import annotations

import json
import logging

import grpc
from cri_api.v1 import api_pb2, api_pb2_grpc

from installer.cri_check import OWN_CONNECTION
from installer.host import Host
from resmgr.rpc.sockets import endpoint_path

log = logging.getLogger("installer.cpuset_restore")

KUBELET_CPU_STATE = "/var/lib/kubelet/cpu_manager_state"
ONLINE_CPUS = "/sys/devices/system/cpu/online"
ONLINE_NODES = "/sys/devices/system/node/online"
POD_UID_LABEL = "io.kubernetes.pod.uid"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"


def _read(host: Host, path: str) -> str:
    try:
        return host.path(path).read_text().strip()
    except OSError:
        return ""


def kubelet_cpusets(host: Host) -> tuple[str, dict[tuple[str, str], str]]:
    """(the default set, {(pod uid, container name): assigned set}) as kubelet's CPU manager sees them."""
    online = _read(host, ONLINE_CPUS)
    raw = _read(host, KUBELET_CPU_STATE)
    if not raw:
        return online, {}
    try:
        state = json.loads(raw)
    except ValueError as exc:
        log.warning("cannot read %s (%s); giving containers all online CPUs", KUBELET_CPU_STATE, exc)
        return online, {}
    assigned = {(uid, name): cpus for uid, containers in (state.get("entries") or {}).items()
                for name, cpus in containers.items() if cpus}
    return state.get("defaultCpuSet") or online, assigned


def restore_cpusets(host: Host, runtime_endpoint: str, timeout: float = 10.0) -> int:
    """Reset every running container's cpuset to kubelet's; returns how many were updated.

    Raises RuntimeError naming the containers that could not be updated (after trying all).
    """
    default, assigned = kubelet_cpusets(host)
    if not default:
        raise RuntimeError(f"cannot tell the node's online CPUs ({ONLINE_CPUS} is unreadable)")
    mems = _read(host, ONLINE_NODES)
    failures: list[str] = []
    updated = 0
    sock = host.path(endpoint_path(runtime_endpoint))
    with grpc.insecure_channel(f"unix://{sock}", options=OWN_CONNECTION) as channel:
        stub = api_pb2_grpc.RuntimeServiceStub(channel)
        running = api_pb2.ContainerFilter(state=api_pb2.ContainerStateValue(state=api_pb2.CONTAINER_RUNNING))
        containers = stub.ListContainers(api_pb2.ListContainersRequest(filter=running), timeout=timeout).containers
        for c in containers:
            key = (c.labels.get(POD_UID_LABEL, ""), c.labels.get(CONTAINER_NAME_LABEL, c.metadata.name))
            cpus = assigned.get(key, default)
            request = api_pb2.UpdateContainerResourcesRequest(
                container_id=c.id, linux=api_pb2.LinuxContainerResources(cpuset_cpus=cpus, cpuset_mems=mems))
            try:
                stub.UpdateContainerResources(request, timeout=timeout)
                updated += 1
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.NOT_FOUND:  # gone meanwhile: nothing to restore
                    continue
                failures.append(f"{c.id[:13]} ({exc.code().name}: {exc.details()})")
    log.info("gave %d running container(s) the cpusets kubelet would give them", updated,
             extra={"containers": updated, "default_cpuset": default, "assigned": len(assigned)})
    if failures:
        raise RuntimeError(f"could not restore the cpusets of {len(failures)} container(s): {', '.join(failures)}")
    return updated
