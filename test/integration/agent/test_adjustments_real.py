"""Adjustment CRs end to end: the agent pushes them, cri-resmgr changes a running container's cpuset in the
host cgroup, and a conflicting Adjustment is rejected with the error in the CR's status."""

from __future__ import annotations

import pytest
from integration.agent.conftest import ADJ, NAMESPACE, STATIC_RESERVED_0, wait_for

pytestmark = pytest.mark.integration


def adjustment(name: str, nodes: list[str], expressions: list[dict]) -> dict:
    return {"apiVersion": "criresmgr.intel.com/v1alpha1", "kind": "Adjustment",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"scope": [{"nodes": nodes, "containers": expressions}],
                     "resources": {"requests": {"cpu": "1", "memory": "64Mi"},
                                   "limits": {"cpu": "1", "memory": "64Mi"}}}}


def node_errors(custom, name: str, node: str) -> dict | None:
    obj = custom.get_namespaced_custom_object(*ADJ, name)
    entry = ((obj.get("status") or {}).get("nodes") or {}).get(node)
    return None if entry is None else (entry.get("errors") or {})


def test_adjustment_moves_a_running_container_and_a_conflict_is_reported(plane_node):
    node = plane_node(fallback=STATIC_RESERVED_0)
    web = node.run_container("web")
    side = node.run_container("side")
    assert node.containerd.cgroup_cpuset(web) == "0-1" and node.containerd.cgroup_cpuset(side) == "0-1"

    # Scope: every node whose name starts with "worker-", and the container named web.
    by_name = [{"key": "name", "operator": "Equals", "values": ["web"]}]
    node.custom.create_namespaced_custom_object(*ADJ[:3], ADJ[3], adjustment("pin-web", ["worker-*"], by_name))
    wait_for(lambda: node.containerd.cgroup_cpuset(web) == "1", f"web gets an exclusive CPU\n{node.logs()}")
    # The shared pool shrank around it: cri-resmgr updates the containers one by one, side may come after web.
    wait_for(lambda: node.containerd.cgroup_cpuset(side) == "0", f"side on the shrunk shared pool\n{node.logs()}")
    assert wait_for(lambda: node_errors(node.custom, "pin-web", node.name) == {}, "pin-web status: no errors")

    # An adjustment for another node changes nothing here.
    other = adjustment("elsewhere", ["master-*"], [{"key": "name", "operator": "Equals", "values": ["side"]}])
    node.custom.create_namespaced_custom_object(*ADJ[:3], ADJ[3], other)

    # A second adjustment selecting the same container conflicts: neither applies to it, both say why.
    by_pod = [{"key": "pod/name", "operator": "In", "values": ["web", "nothing"]}]
    node.custom.create_namespaced_custom_object(*ADJ[:3], ADJ[3], adjustment("also-web", [node.name], by_pod))
    errors = wait_for(lambda: node_errors(node.custom, "also-web", node.name), "also-web status errors")
    assert "conflicts with adjustment kube-system/pin-web" in errors["default/web/web"]
    errors = wait_for(lambda: node_errors(node.custom, "pin-web", node.name), "pin-web status errors")
    assert "conflicts with adjustment kube-system/also-web" in errors["default/web/web"]
    wait_for(lambda: node.containerd.cgroup_cpuset(web) == "0-1", "the conflicting override is withdrawn")
    wait_for(lambda: node.containerd.cgroup_cpuset(side) == "0-1", "side on the whole shared pool again")
    assert node_errors(node.custom, "elsewhere", node.name) is None

    # Resolving the conflict applies the remaining adjustment again and clears the stale errors.
    node.custom.delete_namespaced_custom_object(*ADJ, "also-web")
    wait_for(lambda: node.containerd.cgroup_cpuset(web) == "1", "web pinned again")
    assert wait_for(lambda: node_errors(node.custom, "pin-web", node.name) == {}, "pin-web errors cleared")

    # A container that starts later in the adjustment's scope gets the override too.
    node.remove_pod_of(web)
    wait_for(lambda: node.containerd.cgroup_cpuset(side) == "0-1", "the exclusive CPU was given back")
    new_web = node.run_container("web", pod="web-v2")
    wait_for(lambda: node.containerd.cgroup_cpuset(new_web) == "1", f"the new web is pinned\n{node.logs()}")
    wait_for(lambda: node.containerd.cgroup_cpuset(side) == "0", "side on the shrunk shared pool again")


def test_invalid_adjustment_spec_is_reported_in_status(plane_node):
    node = plane_node(fallback=STATIC_RESERVED_0)
    bad = adjustment("bad", ["worker-*"], [{"key": "name", "operator": "Equals", "values": ["a", "b"]}])
    node.custom.create_namespaced_custom_object(*ADJ[:3], ADJ[3], bad)
    errors = wait_for(lambda: node_errors(node.custom, "bad", node.name), "bad status errors")
    assert "spec.scope[0].containers[0].values" in errors["spec"] and "exactly one value" in errors["spec"]
