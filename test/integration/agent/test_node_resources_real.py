"""static-pools' node resources (cmk.intel.com/exclusive-cores, the CMK label and taint) published by the real
agent on the real API server: from the relay's active policy, withdrawn when the policy changes, and the agent's
SetNodeResources leaving what others put on the node alone."""

from __future__ import annotations

import json

import pytest
from integration.agent.conftest import put_config_map, wait_for
from kubernetes import client

from resmgr.agent.node_resources import PUBLISHED_ANNOTATION
from resmgr.configplane import AgentClient, AgentError

pytestmark = pytest.mark.integration

CORES = "cmk.intel.com/exclusive-cores"
LABEL = "cmk.intel.com/cmk-node"
# This machine has CPUs 0 and 1: one exclusive core, CPU 0 shared.
STATIC_POOLS = """policy:
  Active: static-pools
  static-pools:
    LabelNode: true
    TaintNode: true
    pools:
      exclusive:
        exclusive: true
        cpuLists:
        - Cpuset: "1"
          Socket: 0
      shared:
        cpuLists:
        - Cpuset: "0"
          Socket: 0
"""


def _state(node) -> tuple[str | None, str | None, list[tuple[str, str, str]]]:
    obj = node.core.read_node(node.name)
    # (kube-controller-manager taints the kubelet-less node not-ready: not ours, kept)
    taints = [(t.key, t.value or "", t.effect) for t in obj.spec.taints or [] if t.key == "cmk"]
    return (obj.status.capacity or {}).get(CORES) if obj.status else None, \
        (obj.metadata.labels or {}).get(LABEL), taints


def _writes(node) -> int:
    """How often the agent wrote the node's published resources (it logs every write)."""
    return node.agent.log_path.read_text(errors="replace").count("published node resources on")


def test_policy_node_resources_published_and_withdrawn(plane_node):
    node = plane_node(fallback=STATIC_POOLS)
    try:
        wait_for(lambda: _state(node) == ("1", "true", [("cmk", "true", "NoSchedule")]), "CMK resources published")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {_state(node)}\n{node.logs()}") from None
    # Another policy through the agent's ConfigMap: what static-pools published goes away.
    put_config_map(node.core, "cri-resmgr-config.default",
                   {"policy": "Active: topology-aware\nReservedResources:\n  cpu: cpuset:0\n"})
    try:
        wait_for(lambda: _state(node) == (None, None, []), "CMK resources withdrawn")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {_state(node)}\n{node.logs()}") from None
    assert json.loads(node.annotations()[PUBLISHED_ANNOTATION]) == {"capacity": [], "labels": [], "taints": []}


def test_set_node_resources_keeps_what_others_own(plane_node):
    node = plane_node()
    # cri-resmgr publishes its own policy's set (none: empty) once the agent answers, retrying with backoff while
    # it is away; that publication must be in before this test's own calls, or it withdraws what they set.
    wait_for(lambda: "node resources published through the agent" in node.resmgr.log_path.read_text(errors="replace"),
             "cri-resmgr's own first publication")
    node.core.patch_node(node.name, {"metadata": {"labels": {"example.com/mine": "x"}},
                                     "spec": {"taints": [{"key": "example.com/other", "effect": "NoExecute"}]}})
    node.core.patch_node_status(node.name, {"status": {"capacity": {"example.com/widgets": "3"}}})
    agent = AgentClient(node.agent_socket, timeout=30)
    try:
        agent.set_node_resources({"capacity": {CORES: "4"}, "labels": {LABEL: "true"},
                                  "taints": [{"key": "cmk", "value": "true", "effect": "NoSchedule"}]})
        obj = node.core.read_node(node.name)
        assert obj.status.capacity[CORES] == "4" and obj.status.capacity["example.com/widgets"] == "3"
        assert obj.metadata.labels[LABEL] == "true" and obj.metadata.labels["example.com/mine"] == "x"
        assert {(t.key, t.effect) for t in obj.spec.taints} >= {("cmk", "NoSchedule"),
                                                                ("example.com/other", "NoExecute")}
        writes = _writes(node)
        agent.set_node_resources({"capacity": {CORES: "4"}, "labels": {LABEL: "true"},
                                  "taints": [{"key": "cmk", "value": "true", "effect": "NoSchedule"}]})
        assert _writes(node) == writes  # an unchanged set is not written again
        agent.set_node_resources({"capacity": {CORES: "2"}, "labels": {}, "taints": []})
        obj = node.core.read_node(node.name)
        assert obj.status.capacity[CORES] == "2" and obj.status.capacity["example.com/widgets"] == "3"
        assert LABEL not in obj.metadata.labels and obj.metadata.labels["example.com/mine"] == "x"
        taints = {(t.key, t.effect) for t in obj.spec.taints}
        assert ("example.com/other", "NoExecute") in taints and ("cmk", "NoSchedule") not in taints
        agent.set_node_resources({})
        obj = node.core.read_node(node.name)
        assert CORES not in obj.status.capacity and obj.status.capacity["example.com/widgets"] == "3"
        with pytest.raises(AgentError, match="INVALID_ARGUMENT.*effect"):
            agent.set_node_resources({"taints": [{"key": "cmk", "value": "true", "effect": "Sometimes"}]})
        with pytest.raises(AgentError, match="INVALID_ARGUMENT.*only extended resources"):
            agent.set_node_resources({"capacity": {"cpu": "64"}})
        with pytest.raises(AgentError, match="INVALID_ARGUMENT|HTTP 422"):
            agent.set_node_resources({"labels": {"not a label!": "x"}})
    finally:
        agent.close()
    assert isinstance(obj, client.V1Node)
