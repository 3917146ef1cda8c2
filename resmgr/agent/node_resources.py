"""What the active policy wants published on the agent's own Node: extended resources, labels, taints.

cri-resmgr has no API access; it sends the complete wanted set over the Agent API
(SetNodeResources) and the agent makes the Node match it. What the agent published is
recorded in the Node annotation ``PUBLISHED_ANNOTATION``, so that what is no longer wanted
is removed again (also after an agent restart, or when the policy changes), while labels,
taints and resources that others own are never touched. Capacity goes to ``status``
(``nodes/status``); labels, taints and the record to the Node object, with its
resourceVersion, so a concurrent change is retried rather than overwritten.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from resmgr.config import parse_memory_quantity

log = logging.getLogger("resmgr.agent.node_resources")

PUBLISHED_ANNOTATION = "cri-resmgr.intel.com/published-node-resources"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
MERGE_PATCH = "application/merge-patch+json"
CONFLICT_RETRIES = 5


class NodeResourcesError(ValueError):
    """The wanted set is malformed (the message says which entry)."""


@dataclass
class NodeResources:
    capacity: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)  # {"key", "value", "effect"}

    def check(self) -> None:
        """Raise NodeResourcesError for anything the agent will not publish."""
        problem = capacity_problem(self.capacity)
        if problem:
            raise NodeResourcesError(problem)
        seen = set()
        for t in self.taints:
            if not t.get("key"):
                raise NodeResourcesError("a taint needs a key")
            if t.get("effect") not in TAINT_EFFECTS:
                raise NodeResourcesError(f"taint {t['key']}: effect {t.get('effect')!r} is not one of "
                                         f"{', '.join(TAINT_EFFECTS)}")
            if (t["key"], t["effect"]) in seen:
                raise NodeResourcesError(f"taint {t['key']}:{t['effect']} is given twice")
            seen.add((t["key"], t["effect"]))


def capacity_problem(capacities: dict[str, str]) -> str:
    """"" if every entry is an extended resource (domain/name) with a valid quantity, else why not."""
    for name, value in capacities.items():
        if "/" not in name:
            return f"capacity {name!r}: only extended resources (domain/name) may be set"
        try:
            parse_memory_quantity(value)
        except ValueError:
            return f"capacity {name!r}: invalid quantity {value!r}"
    return ""


def _published(node: Any) -> dict[str, Any]:
    raw = (node.metadata.annotations or {}).get(PUBLISHED_ANNOTATION)
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        log.warning("ignoring malformed %s annotation on node %s", PUBLISHED_ANNOTATION, node.metadata.name)
        data = {}
    # Nothing recorded is the same as having published nothing (a node never asked to publish is not patched).
    return data if isinstance(data, dict) and data else _record(NodeResources())


def _taint_id(t: dict[str, str]) -> tuple[str, str]:
    return (t["key"], t["effect"])


def plan_metadata_patch(node: Any, wanted: NodeResources) -> dict[str, Any]:
    """The merge patch (with the resourceVersion it was planned on) that makes labels, taints and the record match."""
    before = _published(node)
    labels: dict[str, str | None] = {name: None for name in before.get("labels", []) if name not in wanted.labels}
    labels.update(wanted.labels)
    wanted_ids = {_taint_id(t) for t in wanted.taints}
    ours_before = {tuple(t) for t in before.get("taints", [])}
    taints = []
    for t in node.spec.taints or []:
        tid = (t.key, t.effect)
        if tid in wanted_ids or tid in ours_before:
            continue  # ours: re-added below if still wanted
        taints.append({k: v for k, v in (("key", t.key), ("value", t.value), ("effect", t.effect),
                                         ("timeAdded", t.time_added.isoformat() if t.time_added else None)) if v})
    taints += [{"key": t["key"], "value": t.get("value", ""), "effect": t["effect"]} for t in wanted.taints]
    record = _record(wanted)
    patch: dict[str, Any] = {"metadata": {"resourceVersion": node.metadata.resource_version,
                                          "annotations": {PUBLISHED_ANNOTATION: json.dumps(record, sort_keys=True)}},
                             "spec": {"taints": taints or None}}
    if labels:
        patch["metadata"]["labels"] = labels
    return patch


def _record(wanted: NodeResources) -> dict[str, Any]:
    return {"capacity": sorted(wanted.capacity), "labels": sorted(wanted.labels),
            "taints": sorted(list(_taint_id(t)) for t in wanted.taints)}


def _in_place(node: Any, before: dict[str, Any], wanted: NodeResources) -> bool:
    """Nothing to do: the record matches and so does everything it lists (no write for an unchanged set)."""
    if before != _record(wanted):
        return False
    labels = node.metadata.labels or {}
    capacity = (node.status.capacity if node.status else None) or {}
    taints = {(t.key, t.effect): t.value or "" for t in node.spec.taints or []}
    return (all(labels.get(k) == v for k, v in wanted.labels.items())
            and all(capacity.get(k) == v for k, v in wanted.capacity.items())
            and all(taints.get(_taint_id(t)) == t.get("value", "") for t in wanted.taints))


def publish_node_resources(core: client.CoreV1Api, node_name: str, wanted: NodeResources) -> None:
    """Make ``node_name`` carry exactly the wanted set of what the agent publishes; raises ApiException."""
    wanted.check()
    for attempt in range(CONFLICT_RETRIES):
        node = core.read_node(node_name)
        before = _published(node)
        if _in_place(node, before, wanted):
            log.debug("node %s already carries its published resources", node_name)
            return
        gone = [name for name in before.get("capacity", []) if name not in wanted.capacity]
        status: dict[str, Any] = {name: None for name in gone}
        status.update(wanted.capacity)
        if status:
            body: dict[str, Any] = {"capacity": status}
            if gone:  # removed resources leave allocatable too (kubelet copies only what capacity has)
                body["allocatable"] = {name: None for name in gone}
            # The metadata patch below must carry the resourceVersion this one produced.
            node = core.patch_node_status(node_name, {"status": body}, _content_type=MERGE_PATCH)
        try:
            core.patch_node(node_name, plan_metadata_patch(node, wanted), _content_type=MERGE_PATCH)
        except ApiException as exc:
            if exc.status == 409 and attempt < CONFLICT_RETRIES - 1:
                log.info("node %s changed while publishing its resources; retrying", node_name)
                continue
            raise
        log.info("published node resources on %s", node_name, extra={
            "capacity": wanted.capacity, "labels": wanted.labels, "taints": wanted.taints, "removed": gone})
        return
