"""What pods and containers are and what they ask for, estimated from CRI requests.

Kubelet does not pass a container's resource requests to the runtime. It passes
cgroup parameters derived from them, and these are inverted here: CPU shares are
``request_milli * 1024 / 1000`` (2 for no request), the CFS quota is
``limit_milli * period / 1000``. When cri-resource-manager's webhook annotated the
pod (``intel.com/resources``), its exact requests and limits are used instead.
The QoS class is read from the pod's cgroup parent (``/kubepods/burstable/pod<uid>``,
``kubepods-besteffort-pod<uid>.slice``, ...), else from the annotated requirements,
else estimated from the resources.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

import yaml

from resmgr.config.constraints import parse_cpu_quantity, parse_memory_quantity
from resmgr.model.annotation_budget import RESOURCES_ANNOTATION, within_budget

log = logging.getLogger("resmgr.resources")

QOS_GUARANTEED = "Guaranteed"
QOS_BURSTABLE = "Burstable"
QOS_BESTEFFORT = "BestEffort"
KUBE_SYSTEM = "kube-system"

# Kubelet's minimum shares (BestEffort pods get exactly this).
MIN_SHARES = 2

POD_NAME_LABEL = "io.kubernetes.pod.name"
POD_NAMESPACE_LABEL = "io.kubernetes.pod.namespace"
POD_UID_LABEL = "io.kubernetes.pod.uid"
CONTAINER_NAME_LABEL = "io.kubernetes.container.name"


@dataclass
class PodInfo:
    id: str
    name: str = ""
    namespace: str = ""
    uid: str = ""
    cgroup_parent: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def qos_class(self) -> str | None:
        return qos_from_cgroup_parent(self.cgroup_parent)

    def to_json(self) -> dict[str, Any]:
        # Shallow: the cache serialises it at once (dataclasses.asdict deep-copies, ~30x slower).
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PodInfo:
        pod = cls(**data)
        pod.labels, pod.annotations = within_budget(pod.labels), within_budget(pod.annotations)
        return pod


@dataclass
class ContainerInfo:
    """One container as the policies see it; ``id`` is empty until the runtime assigned one."""

    id: str
    pod_id: str
    name: str
    namespace: str = ""
    pod_name: str = ""
    qos: str = QOS_BESTEFFORT
    request_milli: int = 0
    limit_milli: int = 0
    memory_limit: int = 0
    annotations: dict[str, str] = field(default_factory=dict)
    pod_annotations: dict[str, str] = field(default_factory=dict)
    # Only known from the webhook's annotation (the CRI request carries neither).
    memory_request: int = 0
    extended_resources: dict[str, int] = field(default_factory=dict)
    # CRI labels (kubelet's io.kubernetes.*) of the container and its pod: expression keys read them.
    labels: dict[str, str] = field(default_factory=dict)
    pod_labels: dict[str, str] = field(default_factory=dict)
    # (host path, container path, read-only) of its mounts and devices: topology-aware's device hints.
    host_paths: list[tuple[str, str, bool]] = field(default_factory=list)
    # Env and command line, only where a policy reads them (policy_env, policy_command).
    env: dict[str, str] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)

    @property
    def is_kube_system(self) -> bool:
        return self.namespace == KUBE_SYSTEM

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ContainerInfo:
        c = cls(**data)
        c.annotations, c.pod_annotations = within_budget(c.annotations), within_budget(c.pod_annotations)
        c.labels, c.pod_labels = within_budget(c.labels), within_budget(c.pod_labels)
        return c


def shares_to_milli(shares: int) -> int:
    """Invert kubelet's MilliCPUToShares; the minimum shares mean no request at all."""
    if shares <= MIN_SHARES:
        return 0
    return int(round(shares * 1000 / 1024))


def quota_to_milli(quota: int, period: int) -> int:
    """Invert kubelet's MilliCPUToQuota; no quota (<= 0) means no limit."""
    if quota <= 0 or period <= 0:
        return 0
    return int(round(quota * 1000 / period))


def qos_from_cgroup_parent(parent: str) -> str | None:
    """QoS class from kubelet's cgroup naming (cgroupfs or systemd driver), None if unknown."""
    p = parent.lower()
    if "besteffort" in p:
        return QOS_BESTEFFORT
    if "burstable" in p:
        return QOS_BURSTABLE
    if "kubepods" in p:
        return QOS_GUARANTEED
    return None


def qos_from_resources(request_milli: int, limit_milli: int, memory_limit: int) -> str:
    if request_milli == 0 and limit_milli == 0 and memory_limit == 0:
        return QOS_BESTEFFORT
    if request_milli > 0 and request_milli == limit_milli and memory_limit > 0:
        return QOS_GUARANTEED
    return QOS_BURSTABLE


# cri-resource-manager's webhook puts the pod's real resource requirements in RESOURCES_ANNOTATION, as JSON:
# {"containers": {"<name>": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {...}}},
#  "initContainers": {...}}


def _cpu_milli(value: Any) -> int:
    return int(round(value * 1000)) if isinstance(value, int | float) else parse_cpu_quantity(str(value))


def annotated_requirements(pod_annotations: dict[str, str]) -> dict[str, dict[str, Any]] | None:
    """The webhook's per-container requirements ({name: {"requests":..., "limits":...}}), or None."""
    raw = pod_annotations.get(RESOURCES_ANNOTATION)
    if not raw:
        return None
    try:
        data = json.loads(raw)
        out = {}
        for section in ("initContainers", "containers"):
            for name, req in (data.get(section) or {}).items():
                out[str(name)] = {"requests": dict(req.get("requests") or {}), "limits": dict(req.get("limits") or {})}
        return out
    except (ValueError, TypeError, AttributeError):
        log.warning("ignoring malformed %s annotation", RESOURCES_ANNOTATION)
        return None


def resources_from_requirements(req: dict[str, Any]) -> tuple[int, int, int]:
    """(request milli-CPU, limit milli-CPU, memory limit) from one container's requirements."""
    requests, limits = req.get("requests", {}), req.get("limits", {})
    cpu_limit = _cpu_milli(limits["cpu"]) if "cpu" in limits else 0
    # Kubernetes defaults a missing request to the limit.
    cpu_request = _cpu_milli(requests["cpu"]) if "cpu" in requests else cpu_limit
    memory = parse_memory_quantity(limits["memory"]) if "memory" in limits else 0
    return cpu_request, cpu_limit, memory


def is_extended_resource(name: str) -> bool:
    """Kubernetes' rule: a domain-qualified name outside *kubernetes.io/ (and not a quota's requests.*)."""
    domain, sep, _ = name.partition("/")
    return bool(sep) and not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io")) \
        and not name.startswith("requests.")


def requests_from_requirements(req: dict[str, Any]) -> tuple[int, dict[str, int]]:
    """(memory request bytes, extended resource requests) of one container; a missing request is the limit."""
    requests, limits = req.get("requests", {}), req.get("limits", {})
    memory = requests.get("memory", limits.get("memory"))
    extended = {name: parse_memory_quantity(value)  # counts, with any quantity suffix
                for name, value in {**limits, **requests}.items() if is_extended_resource(name)}
    return (parse_memory_quantity(memory) if memory is not None else 0), extended


def qos_from_requirements(requirements: dict[str, dict[str, Any]]) -> str:
    """Kubernetes' QoS rules over all containers of a pod."""
    guaranteed, empty = True, True
    for req in requirements.values():
        requests, limits = req.get("requests", {}), req.get("limits", {})
        if requests or limits:
            empty = False
        for resource in ("cpu", "memory"):
            if resource not in limits or requests.get(resource, limits[resource]) != limits[resource]:
                guaranteed = False
    if empty:
        return QOS_BESTEFFORT
    return QOS_GUARANTEED if guaranteed else QOS_BURSTABLE


def estimate_linux_resources(res: Any) -> tuple[int, int, int]:
    """(request milli-CPU, limit milli-CPU, memory limit bytes) of a LinuxContainerResources."""
    if res is None:
        return 0, 0, 0
    return (shares_to_milli(res.cpu_shares), quota_to_milli(res.cpu_quota, res.cpu_period),
            max(0, res.memory_limit_in_bytes))


def pod_from_sandbox_config(pod_id: str, config: Any) -> PodInfo:
    """A PodInfo from a RunPodSandbox request's PodSandboxConfig."""
    meta = config.metadata
    labels = dict(config.labels)
    return PodInfo(
        id=pod_id,
        name=meta.name or labels.get(POD_NAME_LABEL, ""),
        namespace=meta.namespace or labels.get(POD_NAMESPACE_LABEL, ""),
        uid=meta.uid or labels.get(POD_UID_LABEL, ""),
        cgroup_parent=config.linux.cgroup_parent if config.HasField("linux") else "",
        labels=within_budget(labels),
        annotations=within_budget(config.annotations),
    )


def pod_from_listed_sandbox(sandbox: Any) -> PodInfo:
    """A PodInfo from a ListPodSandbox entry (no cgroup parent is listed there)."""
    meta = sandbox.metadata
    return PodInfo(id=sandbox.id, name=meta.name, namespace=meta.namespace, uid=meta.uid,
                   labels=within_budget(sandbox.labels), annotations=within_budget(sandbox.annotations))


# The cache is on disk and other variables or arguments may carry secrets: only what static-pools reads
# for CMK compatibility is kept (its STP_*/CMK_* variables, a `cmk isolate` command line).
POLICY_ENV_PREFIXES = ("STP_", "CMK_")
MAX_POLICY_COMMAND = 4096


def policy_env(envs: Any) -> dict[str, str]:
    """The CRI KeyValue env entries a policy reads."""
    return {kv.key: kv.value[:MAX_POLICY_COMMAND] for kv in envs if kv.key.startswith(POLICY_ENV_PREFIXES)}


def policy_command(words: list[str]) -> list[str]:
    """The command line (command + args) if it runs `cmk isolate`, else nothing."""
    if sum(len(w) for w in words) > MAX_POLICY_COMMAND or not any("isolate" in w and "cmk" in w for w in
                                                                   (" ".join(words), *words)):
        return []
    return list(words)


def host_paths_of(config: Any) -> list[tuple[str, str, bool]]:
    """A ContainerConfig's mounts and devices; a device is read-only without w or m permission."""
    paths = [(m.host_path, m.container_path, bool(m.readonly)) for m in config.mounts]
    paths += [(d.host_path, d.container_path, not set(d.permissions) & set("wm")) for d in config.devices]
    return paths


def container_from_create_request(request: Any, pod: PodInfo | None) -> ContainerInfo:
    """A ContainerInfo (without id) from a CreateContainerRequest, estimating its resources."""
    config = request.config
    sandbox = request.sandbox_config
    if pod is None:
        pod = pod_from_sandbox_config(request.pod_sandbox_id, sandbox)
    res = config.linux.resources if config.HasField("linux") and config.linux.HasField("resources") else None
    request_milli, limit_milli, memory = estimate_linux_resources(res)
    labels = dict(config.labels)
    name = config.metadata.name or labels.get(CONTAINER_NAME_LABEL, "")
    pod_annotations = dict(sandbox.annotations) or dict(pod.annotations)
    annotated = annotated_requirements(pod_annotations)
    memory_request, extended = 0, {}
    if annotated is not None and name in annotated:
        try:  # the webhook's numbers are exact; the cgroup parameters are only estimates
            request_milli, limit_milli, memory = resources_from_requirements(annotated[name])
            memory_request, extended = requests_from_requirements(annotated[name])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring %s for container %s: %s", RESOURCES_ANNOTATION, name, exc)
    parent = sandbox.linux.cgroup_parent if sandbox.HasField("linux") else pod.cgroup_parent
    qos = qos_from_cgroup_parent(parent) or qos_from_cgroup_parent(pod.cgroup_parent)
    if qos is None and annotated:
        try:
            qos = qos_from_requirements(annotated)
        except (ValueError, TypeError):
            qos = None
    if qos is None:
        qos = qos_from_resources(request_milli, limit_milli, memory)
    return ContainerInfo(
        id="",
        pod_id=request.pod_sandbox_id,
        name=name,
        namespace=pod.namespace or sandbox.metadata.namespace or labels.get(POD_NAMESPACE_LABEL, ""),
        pod_name=pod.name or sandbox.metadata.name or labels.get(POD_NAME_LABEL, ""),
        qos=qos,
        request_milli=request_milli,
        limit_milli=limit_milli,
        memory_limit=memory,
        annotations=within_budget(config.annotations),
        pod_annotations=within_budget(pod_annotations),
        memory_request=memory_request,
        extended_resources=extended,
        labels=within_budget(labels),
        host_paths=host_paths_of(config),
        pod_labels=within_budget(dict(sandbox.labels)) or dict(pod.labels),
        env=policy_env(config.envs),
        command=policy_command([*config.command, *config.args]),
    )


def container_from_listed(container: Any, pod: PodInfo | None, resources: Any = None) -> ContainerInfo:
    """A ContainerInfo for a container found in ListContainers (adopted after a restart).

    ``resources`` is the LinuxContainerResources from ContainerStatus when known;
    without it the container is treated as asking for no CPU.
    """
    labels = dict(container.labels)
    request_milli, limit_milli, memory = estimate_linux_resources(resources)
    qos = (qos_from_cgroup_parent(pod.cgroup_parent) if pod else None) or qos_from_resources(
        request_milli, limit_milli, memory)
    return ContainerInfo(
        id=container.id,
        pod_id=container.pod_sandbox_id,
        name=container.metadata.name or labels.get(CONTAINER_NAME_LABEL, ""),
        namespace=(pod.namespace if pod else "") or labels.get(POD_NAMESPACE_LABEL, ""),
        pod_name=(pod.name if pod else "") or labels.get(POD_NAME_LABEL, ""),
        qos=qos,
        request_milli=request_milli,
        limit_milli=limit_milli,
        memory_limit=memory,
        annotations=within_budget(container.annotations),
        pod_annotations=dict(pod.annotations) if pod else {},
        labels=within_budget(labels),
        pod_labels=dict(pod.labels) if pod else {},
    )


def preference_annotation(container: ContainerInfo, key: str) -> str | None:
    """cri-resource-manager's per-container / per-pod annotation lookup.

    ``<key>/container.<name>`` wins over ``<key>/pod``, which wins over the bare ``<key>``.
    Pod annotations are consulted first, then the container's own annotations.
    """
    for source in (container.pod_annotations, container.annotations):
        for candidate in (f"{key}/container.{container.name}", f"{key}/pod", key):
            if candidate in source:
                return source[candidate]
    return None


# Go's strconv.ParseBool, which upstream uses for these annotations (so "yes" is not a boolean there).
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
RESMGR_KEY_NAMESPACE = "cri-resource-manager.intel.com"


def go_parse_bool(value: str) -> bool | None:
    """Go's strconv.ParseBool: True/False for its accepted spellings, None for anything else."""
    return True if value in _GO_TRUE else False if value in _GO_FALSE else None


def annotated_bool(container: ContainerInfo, key: str) -> bool | None:
    """The effective annotation ``key`` (``preference_annotation``) as Go's ParseBool reads it; None when
    it is not set or not a boolean (logged: upstream ignores such values too)."""
    value = preference_annotation(container, key)
    if value is None:
        return None
    parsed = go_parse_bool(value)
    if parsed is None:
        log.error("invalid boolean in annotation %s: %r; ignored", key, value)
    return parsed


def preference_flag(container: ContainerInfo, key: str) -> bool | None:
    """A boolean preference as upstream reads it; None when the container is not explicitly annotated.

    The effective annotation (``preference_annotation``) is parsed like Go's ParseBool. Without it,
    upstream's deprecated pod annotation ``cri-resource-manager.intel.com/<name>`` counts too: "true",
    "false", or a YAML map of container name -> boolean. Unparsable values are logged and ignored.
    """
    if preference_annotation(container, key) is not None:
        return annotated_bool(container, key)
    short = key.removesuffix("." + RESMGR_KEY_NAMESPACE)
    deprecated = f"{RESMGR_KEY_NAMESPACE}/{short}"
    value = container.pod_annotations.get(deprecated)
    if value is None or short == key:
        return None
    log.warning("using deprecated annotation %s; use %s/container.%s or %s/pod instead", deprecated, key,
                container.name, key)
    if value in ("true", "false"):
        return value == "true"
    try:
        per_container = yaml.safe_load(value)
    except yaml.YAMLError:
        per_container = None
    if not isinstance(per_container, dict):
        log.error("invalid deprecated annotation %s: %r; ignored", deprecated, value)
        return None
    wanted = per_container.get(container.name)
    if isinstance(wanted, bool):
        return wanted
    return {"true": True, "false": False}.get(wanted) if isinstance(wanted, str) else None
