"""The Agent API (what cri-resmgr asks of the cluster) served by the real agent against the real API server."""

from __future__ import annotations

import pytest

from devland.waiting import wait_until
from resmgr.configplane import AgentClient, AgentError

pytestmark = pytest.mark.integration


def test_node_operations_through_the_agent(plane_node):
    node = plane_node()
    agent = AgentClient(node.agent_socket, timeout=30)
    try:
        assert agent.get_node()["metadata"]["name"] == node.name
        agent.patch_node({"metadata": {"labels": {"example.com/tuned": "yes"}}})
        agent.patch_node({"metadata": {"annotations": {"example.com/note": "hi"}}}, patch_type="merge")
        agent.patch_node([{"op": "add", "path": "/metadata/labels/example.com~1json", "value": "1"}],
                         patch_type="json")
        labels = node.core.read_node(node.name).metadata.labels
        assert labels["example.com/tuned"] == "yes" and labels["example.com/json"] == "1"
        assert node.annotations()["example.com/note"] == "hi"
        agent.update_node_capacity({"example.com/widgets": "4"})
        assert node.core.read_node(node.name).status.capacity["example.com/widgets"] == "4"
        with pytest.raises(AgentError, match="INVALID_ARGUMENT.*only extended resources"):
            agent.update_node_capacity({"cpu": "64"})
        with pytest.raises(AgentError, match="INVALID_ARGUMENT"):
            agent.patch_node({"not": "a list"}, patch_type="json")
        with pytest.raises(AgentError, match="INVALID_ARGUMENT|UNPROCESSABLE|HTTP 422"):
            agent.patch_node([{"op": "replace", "path": "/metadata/name", "value": "x"}], patch_type="json")
        # Healthy once its first ConfigMap list is in (under load that came after the calls above: "not synced
        # with the Kubernetes API yet (configmaps: listing)"); waited for, then it must say nothing.
        wait_until("the agent's ConfigMap watch synced", lambda: (
            (status := agent.health_check("config-status")) == "", status), 120, 0.5)
        assert "unknown health query" in agent.health_check("nonsense")
    finally:
        agent.close()
