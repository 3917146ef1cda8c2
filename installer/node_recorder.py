"""Writing this node's record (the format is the package ``noderecord``), through the installer's ServiceAccount.

The installer's ServiceAccount may create and update leases only; a ValidatingAdmissionPolicy in
the chart (installer-node-record-policy.yaml) lets it write only its own node's record, named in
its pod-bound token. Writing a record never fails the install or uninstall itself: an error is
logged and retried on the next report, and the extension keeps waiting meanwhile.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from installer import in_cluster
from noderecord import NAMESPACE, STATES, NodeRecord, lease_name

log = logging.getLogger("installer.node_recorder")


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
    from kubernetes import client

    api = in_cluster.api_client("no node record")
    return None if api is None else NodeRecorder(client.CoordinationV1Api(api), node, digest)
