"""The frontend label of this node (``cri-resmgr.gardener.cloud/frontend``), through the installer's ServiceAccount.

The NRI plugin's DaemonSet selects on ``nri``: only an nri or auto installer sets it, after the relay is gone
from the node and containerd's NRI answers. A relay install sets ``relay`` over a stale ``nri`` before the relay
starts, so the plugin never runs beside the relay. The chart's ValidatingAdmissionPolicy
``cri-resmgr-installer-node-label`` lets the installer change only this label, of its own node.
"""

from __future__ import annotations

import logging
from typing import Any

from installer import in_cluster

log = logging.getLogger("installer.node_label")

FRONTEND_LABEL = "cri-resmgr.gardener.cloud/frontend"  # extension/installation.py FRONTEND_LABEL (tested to agree)
NRI, RELAY = "nri", "relay"


class NodeLabeler:
    def __init__(self, core_api: Any, node: str) -> None:
        self.api = core_api
        self.node = node
        # The value this labeler last read or wrote: the nri installer ensures the label every --check-interval,
        # which must not cost every node an API call each time.
        self._known: tuple[str | None] | None = None

    def current(self) -> str | None:
        node = self.api.read_node(self.node)
        value = ((node.metadata.labels or {}) if node.metadata else {}).get(FRONTEND_LABEL)
        self._known = (value,)
        return value

    def ensure(self, value: str | None) -> bool:
        """Set the label to ``value`` (None: remove it); True if it changed. Raises what the API raises."""
        if self._known == (value,) or self.current() == value:
            return False
        self.api.patch_node(self.node, {"metadata": {"labels": {FRONTEND_LABEL: value}}})
        self._known = (value,)
        log.info("node label %s=%s", FRONTEND_LABEL, value if value is not None else "(removed)",
                 extra={"node": self.node, "label": FRONTEND_LABEL, "value": value})
        return True

    def leave_nri(self) -> None:
        """Before the relay starts: a stale ``nri`` label (the node ran the NRI plugin) becomes ``relay``. A label
        that cannot be read is left as it is (logged): a node that never ran the plugin must still install."""
        try:
            if self.current() != NRI:
                return
        except Exception as exc:  # the API is down: nothing proves the label is stale
            log.warning("cannot read the node's %s label (%s); installing the relay anyway", FRONTEND_LABEL, exc)
            return
        self.ensure(RELAY)


def in_cluster_labeler(node: str) -> NodeLabeler | None:
    """A labeler over the pod's ServiceAccount, or None (with a warning) outside a cluster."""
    if not node:
        return None
    from kubernetes import client

    api = in_cluster.api_client("no node label")
    return None if api is None else NodeLabeler(client.CoreV1Api(api), node)
