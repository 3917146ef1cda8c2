"""The per-node record: proof, in the shoot API, of what the installer finished on its node.

Pod readiness is not proof: a restarted kubelet reports the installer pod Ready before its first
probe has run, and gardener-resource-manager turns that into a healthy ManagedResource. So the
installer writes, after "install complete" (the relay answered CRI Version and kubelet runs on it)
and after "uninstall complete", a coordination.k8s.io Lease ``cri-resmgr-node-<node>`` in
kube-system: holderIdentity = the node, annotations = state, the digest of the rollout it
applied (the extension compares it, so a record of an earlier rollout never counts), a reason and
the time. The extension (extension/node_proof.py) reads these records against the node list.

The installer's ServiceAccount may create and update leases only; a ValidatingAdmissionPolicy in
the chart (installer-node-record-policy.yaml) lets it write only its own node's record, named in
its pod-bound token. Writing a record never fails the install or uninstall itself: an error is
logged and retried on the next report, and the extension keeps waiting meanwhile.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("installer.node_record")

NAMESPACE = "kube-system"
LEASE_PREFIX = "cri-resmgr-node-"
ANNOTATION_PREFIX = "cri-resmgr.gardener.cloud/"
STATE = ANNOTATION_PREFIX + "state"
DIGEST = ANNOTATION_PREFIX + "digest"
REASON = ANNOTATION_PREFIX + "reason"
TIME = ANNOTATION_PREFIX + "time"
LABEL = "app.kubernetes.io/name"
LABEL_VALUE = "cri-resmgr-node-record"

# States. Only INSTALLED and UNINSTALLED are proof; the others carry the reason for the operator.
INSTALLED = "installed"
UNINSTALLED = "uninstalled"
INSTALL_FAILED = "install-failed"
UNINSTALL_FAILED = "uninstall-failed"
DEGRADED = "degraded"  # installed, but the supervisor fell back to containerd or the relay is unhealthy
AGENT_NOT_READY = "agent-not-ready"  # the relay serves kubelet, but cri-resmgr-agent does not answer healthy yet
STATES = (INSTALLED, UNINSTALLED, INSTALL_FAILED, UNINSTALL_FAILED, DEGRADED, AGENT_NOT_READY)
MAX_REASON = 512  # annotations are small; the installer's log has the whole story


def lease_name(node: str) -> str:
    return LEASE_PREFIX + node


@dataclass(frozen=True)
class NodeRecord:
    node: str
    state: str
    digest: str
    reason: str = ""
    time: str = ""

    def to_lease(self) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": lease_name(self.node), "namespace": NAMESPACE, "labels": {LABEL: LABEL_VALUE},
                         "annotations": {STATE: self.state, DIGEST: self.digest,
                                         REASON: self.reason[:MAX_REASON], TIME: self.time}},
            "spec": {"holderIdentity": self.node, "renewTime": self.time},
        }


def from_lease(lease: dict[str, Any]) -> NodeRecord | None:
    """The record a Lease holds, or None if it is not one of ours (wrong name or holder)."""
    meta = lease.get("metadata") or {}
    name = str(meta.get("name") or "")
    holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
    if not name.startswith(LEASE_PREFIX) or name != lease_name(holder):
        return None
    ann = meta.get("annotations") or {}
    return NodeRecord(node=holder, state=ann.get(STATE, ""), digest=ann.get(DIGEST, ""),
                      reason=ann.get(REASON, ""), time=ann.get(TIME, ""))


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class NodeRecorder:
    """Writes this node's record through the installer's in-cluster ServiceAccount; rewrites only on change."""

    def __init__(self, coordination_api: Any, node: str, digest: str) -> None:
        self.api = coordination_api
        self.node = node
        self.digest = digest
        self._last: tuple[str, str] | None = None

    def record(self, state: str, reason: str = "") -> bool:
        """Write (state, reason) unless it is already written; False (and a log line) if the API refused."""
        if state not in STATES:
            raise ValueError(f"unknown node record state {state!r}; one of {', '.join(STATES)}")
        if self._last == (state, reason):
            return True
        body = NodeRecord(self.node, state, self.digest, reason, now_rfc3339()).to_lease()
        try:
            self._write(body)
        except Exception as exc:  # the API is down or refuses: retried with the next report
            log.warning("cannot write the node record %s/%s (%s): %s", NAMESPACE, lease_name(self.node), state,
                        _short(exc), extra={"state": state})
            return False
        self._last = (state, reason)
        log.info("node record %s/%s: %s", NAMESPACE, lease_name(self.node), state,
                 extra={"state": state, "digest": self.digest})
        return True

    def _write(self, body: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        name = body["metadata"]["name"]
        try:
            current = self.api.read_namespaced_lease(name, NAMESPACE)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self.api.create_namespaced_lease(NAMESPACE, body)
            return
        # Replace with the resourceVersion read: a concurrent writer (an old pod of a roll) makes it retry.
        body["metadata"]["resourceVersion"] = current.metadata.resource_version
        self.api.replace_namespaced_lease(name, NAMESPACE, body)


def _short(exc: Exception) -> str:
    reason = getattr(exc, "reason", None)
    body = getattr(exc, "body", None)
    if reason is not None:
        return f"{getattr(exc, 'status', '')} {reason}: {str(body)[:300] if body else ''}".strip()
    return str(exc)[:300]


def in_cluster_recorder(node: str, digest: str) -> NodeRecorder | None:
    """A recorder over the pod's ServiceAccount, or None (with a warning) when no record can be written."""
    if not node or not digest:
        log.warning("no node record: %s is not set (the chart sets NODE_NAME and CRI_RESMGR_INSTALLER_DIGEST); "
                    "the extension cannot see this node's state", "the node name" if not node else "the digest")
        return None
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException as exc:
        log.warning("no node record: no in-cluster ServiceAccount (%s)", exc)
        return None
    return NodeRecorder(client.CoordinationV1Api(client.ApiClient(cfg)), node, digest)
