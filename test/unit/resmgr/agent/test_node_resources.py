"""The agent's plan for its Node: what it published before and no longer wants goes, others' entries stay."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from resmgr.agent.node_resources import (
    PUBLISHED_ANNOTATION,
    NodeResources,
    NodeResourcesError,
    capacity_problem,
    plan_metadata_patch,
)

CMK_TAINT = {"key": "cmk", "value": "true", "effect": "NoSchedule"}


def node(published: dict | None = None, taints: list[client.V1Taint] | None = None) -> client.V1Node:
    annotations = {PUBLISHED_ANNOTATION: json.dumps(published)} if published is not None else {}
    return client.V1Node(metadata=client.V1ObjectMeta(name="n", resource_version="7", annotations=annotations,
                                                      labels={"cmk.intel.com/cmk-node": "true", "other": "x"}),
                         spec=client.V1NodeSpec(taints=taints))


def test_withdrawn_entries_go_and_others_stay() -> None:
    before = node({"capacity": ["cmk.intel.com/exclusive-cores"], "labels": ["cmk.intel.com/cmk-node"],
                   "taints": [["cmk", "NoSchedule"]]},
                  [client.V1Taint(key="cmk", value="true", effect="NoSchedule"),
                   client.V1Taint(key="node.kubernetes.io/not-ready", effect="NoSchedule")])
    patch = plan_metadata_patch(before, NodeResources())
    assert patch["metadata"]["resourceVersion"] == "7"
    assert patch["metadata"]["labels"] == {"cmk.intel.com/cmk-node": None}
    assert patch["spec"]["taints"] == [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    assert json.loads(patch["metadata"]["annotations"][PUBLISHED_ANNOTATION]) == {
        "capacity": [], "labels": [], "taints": []}


def test_wanted_entries_are_added_once() -> None:
    wanted = NodeResources(labels={"cmk.intel.com/cmk-node": "true"}, taints=[CMK_TAINT])
    patch = plan_metadata_patch(node(None, [client.V1Taint(key="cmk", value="old", effect="NoSchedule")]), wanted)
    assert patch["spec"]["taints"] == [CMK_TAINT]  # the same key and effect is replaced, not doubled
    assert patch["metadata"]["labels"] == {"cmk.intel.com/cmk-node": "true"}


@pytest.mark.parametrize(("wanted", "error"), [
    (NodeResources(capacity={"cpu": "4"}), "only extended resources"),
    (NodeResources(capacity={"example.com/x": "lots"}), "invalid quantity"),
    (NodeResources(taints=[{"key": "a", "effect": "Sometimes"}]), "effect"),
    (NodeResources(taints=[{"key": "", "effect": "NoSchedule"}]), "needs a key"),
    (NodeResources(taints=[CMK_TAINT, CMK_TAINT]), "given twice"),
])
def test_bad_sets_are_refused(wanted: NodeResources, error: str) -> None:
    with pytest.raises(NodeResourcesError, match=error):
        wanted.check()


def test_capacity_problem() -> None:
    assert capacity_problem({"cmk.intel.com/exclusive-cores": "6"}) == ""

