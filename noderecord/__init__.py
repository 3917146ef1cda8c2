"""The node record format: the contract between the installer, which writes a node's record, and the extension,
which reads the records as proof of what finished on each node. Neither program imports the other; both import this.

Pod readiness is not proof: a restarted kubelet reports the installer pod Ready before its first probe has run,
and gardener-resource-manager turns that into a healthy ManagedResource. So the installer (installer/node_recorder.py)
writes, after "install complete" (the relay answered CRI Version and kubelet runs on it) and after "uninstall
complete", a coordination.k8s.io Lease ``cri-resmgr-node-<node>`` in kube-system: holderIdentity = the node,
annotations = state, the digest of the rollout it applied (the extension compares it, so a record of an earlier
rollout never counts), a reason and the time. The extension (extension/node_proof.py) reads these records against
the node list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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
# Mode nri, but the node's containerd has NRI off: the reason says how to turn it on. Not a fallback to the relay.
NRI_UNAVAILABLE = "nri-unavailable"
STATES = (INSTALLED, UNINSTALLED, INSTALL_FAILED, UNINSTALL_FAILED, DEGRADED, AGENT_NOT_READY, NRI_UNAVAILABLE)
# The reason of an INSTALLED record of a node where mode auto chose the relay starts with this.
AUTO_RELAY_PREFIX = "mode auto chose the relay: "
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
