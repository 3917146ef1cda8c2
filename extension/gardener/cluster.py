"""What the extension needs to know from Gardener's Cluster resource."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from extension import constants as c
from extension.gardener.kube import Apis, is_not_found


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    kubernetes_version: str
    hibernated: bool
    worker_pools: tuple[str, ...]
    shoot_deleting: bool
    shoot_failed: bool
    force_deletion: bool
    shoot_name: str = ""
    # The shoot's pod network (spec.networking.pods): the shoot Prometheus's scrapes through the kube-apiserver
    # proxy reach the nodes from there (the VPN's shoot side), so the relay's /metrics must admit it.
    pods_cidr: str = ""
    cluster_missing: bool = False
    # The shoot's CA rotation (status.credentials.rotation.certificateAuthorities): the webhook's CA follows it.
    ca_rotation_phase: str = ""
    ca_rotation_started: str = ""
    # Digest of what a reconcile depends on; --ignore-operation-annotation reacts to its changes.
    digest: str = ""


# Go's strconv.ParseBool; anything else is an error there, which Gardener reads as false
# (gardener v1.149.3 pkg/api/core/v1beta1/helper/shoot.go ShootNeedsForceDeletion).
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})


def go_parse_bool(value: str | None) -> bool:
    """True exactly where Go's strconv.ParseBool returns true without an error."""
    return value in _GO_TRUE


def _ca_rotation(shoot: dict[str, Any]) -> dict[str, Any]:
    credentials = (shoot.get("status") or {}).get("credentials") or {}
    return ((credentials.get("rotation") or {}).get("certificateAuthorities")) or {}


def cluster_digest(cluster: dict[str, Any]) -> str:
    shoot = (cluster.get("spec") or {}).get("shoot") or {}
    rotation = _ca_rotation(shoot)
    relevant = {
        "ca_rotation": [rotation.get("phase"), rotation.get("lastInitiationTime")],
        "shoot_spec": shoot.get("spec"),
        "shoot_annotations": (shoot.get("metadata") or {}).get("annotations"),
        "shoot_deleting": bool((shoot.get("metadata") or {}).get("deletionTimestamp")),
        "cluster_deleting": bool((cluster.get("metadata") or {}).get("deletionTimestamp")),
    }
    return hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cluster_info_from(cluster: dict[str, Any]) -> ClusterInfo:
    """Extract the fields we use from a Cluster object (spec.shoot is the embedded Shoot)."""
    shoot = (cluster.get("spec") or {}).get("shoot") or {}
    meta = shoot.get("metadata") or {}
    spec = shoot.get("spec") or {}
    status = shoot.get("status") or {}
    last_op = status.get("lastOperation") or {}
    workers = ((spec.get("provider") or {}).get("workers")) or []
    annotations = meta.get("annotations") or {}
    rotation = _ca_rotation(shoot)
    return ClusterInfo(
        name=(cluster.get("metadata") or {}).get("name", ""),
        kubernetes_version=str((spec.get("kubernetes") or {}).get("version") or ""),
        hibernated=bool((spec.get("hibernation") or {}).get("enabled")),
        worker_pools=tuple(w.get("name", "") for w in workers if isinstance(w, dict)),
        shoot_deleting=bool(meta.get("deletionTimestamp")) or bool(
            (cluster.get("metadata") or {}).get("deletionTimestamp")),
        shoot_failed=last_op.get("state") == "Failed",
        force_deletion=go_parse_bool(annotations.get(c.FORCE_DELETION_ANNOTATION)),
        shoot_name=meta.get("name", ""),
        pods_cidr=str((spec.get("networking") or {}).get("pods") or ""),
        ca_rotation_phase=str(rotation.get("phase") or ""),
        ca_rotation_started=str(rotation.get("lastInitiationTime") or ""),
        digest=cluster_digest(cluster),
    )


def read_cluster(apis: Apis, namespace: str) -> ClusterInfo:
    """The Cluster is named after the shoot's namespace in the seed."""
    try:
        obj = apis.custom.get_cluster_custom_object(
            c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.CLUSTERS_PLURAL, namespace)
    except Exception as err:
        if is_not_found(err):
            raise ClusterNotFound(namespace) from None
        raise
    return cluster_info_from(obj)


class ClusterNotFound(LookupError):
    def __init__(self, namespace: str) -> None:
        super().__init__(f"Cluster {namespace!r} not found")
        self.namespace = namespace


def missing_cluster(namespace: str) -> ClusterInfo:
    """Stand-in when the Cluster is gone: the shoot is being deleted."""
    return ClusterInfo(name=namespace, kubernetes_version="", hibernated=False, worker_pools=(),
                       shoot_deleting=True, shoot_failed=False, force_deletion=False, cluster_missing=True)
