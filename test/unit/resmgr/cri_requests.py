"""CRI request messages for policy tests, built from the shared crictl-style dicts."""

from __future__ import annotations

from typing import Any

from cri_api.v1 import api_pb2
from fixtures.cri_objects import make_container_config, make_pod_config
from google.protobuf import json_format

CFS_PERIOD = 100_000


def pod_config(name: str, *, namespace: str = "default", qos: str = "besteffort",
               annotations: dict[str, str] | None = None) -> api_pb2.PodSandboxConfig:
    return json_format.ParseDict(make_pod_config(name, namespace=namespace, qos=qos, annotations=annotations),
                                 api_pb2.PodSandboxConfig())


def container_resources(qos: str, cpu_milli: int = 0, memory: int = 0) -> dict[str, Any]:
    """cgroup parameters the way kubelet derives them from requests/limits."""
    if qos == "besteffort":
        return {"cpu_shares": 2}
    shares = max(2, cpu_milli * 1024 // 1000)
    out: dict[str, Any] = {"cpu_shares": shares}
    if qos == "guaranteed":
        out.update(cpu_quota=cpu_milli * CFS_PERIOD // 1000, cpu_period=CFS_PERIOD, memory_limit=memory or 1 << 30)
    return out


def create_request(pod_id: str, pod: api_pb2.PodSandboxConfig, name: str, *, cpu_milli: int = 0,
                   annotations: dict[str, str] | None = None) -> api_pb2.CreateContainerRequest:
    parent = pod.linux.cgroup_parent
    qos = "besteffort" if "besteffort" in parent else "burstable" if "burstable" in parent else "guaranteed"
    cfg = make_container_config(name, annotations=annotations, **container_resources(qos, cpu_milli))
    req = api_pb2.CreateContainerRequest(pod_sandbox_id=pod_id)
    req.config.CopyFrom(json_format.ParseDict(cfg, api_pb2.ContainerConfig()))
    req.sandbox_config.CopyFrom(pod)
    return req
