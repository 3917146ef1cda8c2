"""The staged config rollout with the real operator process and a real API server.

The test API server is seed and shoot at once (as in test_node_proof.py): the operator reads the shoot's Nodes
through the shoot-access token with the installation chart's RBAC, and the agents' reports are the Node annotations
the agent writes (resmgr.agent.rollout), patched here as the agent would patch them."""

from __future__ import annotations

import json
import uuid

import pytest
from extension_operator_process import by_kind, wait_for
from fixtures.seed_api import default_shoot

from extension import node_proof
from resmgr.agent import rollout

pytestmark = pytest.mark.integration

OLD = "policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: 750m\n"
NEW = "policy:\n  Active: topology-aware\n  AvailableResources:\n    cpu: cpuset:0-200\n"
FIXED = "policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: 500m\n"


def last_op(seed, ns) -> dict:
    return ((seed.extension(ns) or {}).get("status") or {}).get("lastOperation") or {}


def config_maps(seed, ns) -> dict[str, dict]:
    return {name: cm.get("data") or {} for name, cm in by_kind(seed.rendered_objects(ns), "ConfigMap").items()}


def report(seed, node: str, value: str) -> None:
    seed.core.patch_node(node, {"metadata": {"annotations": {rollout.ROLLOUT_ANNOTATION: value}}})


def test_a_refused_config_stops_at_the_canaries_and_a_fixed_one_is_promoted(seed, operator):
    suffix = uuid.uuid4().hex[:6]
    ns = seed.new_namespace(operator.prefix)
    seed.seed_api.create_cluster(ns, shoot=default_shoot(ns, workers=["pool-a", "pool-b"]))
    label = {"cri-resmgr-rollout-test": suffix}
    nodes = {f"ro-{suffix}-a1": "pool-a", f"ro-{suffix}-a2": "pool-a", f"ro-{suffix}-b1": "pool-b"}
    for name, pool in nodes.items():
        labels = {**node_proof.BASE_NODE_SELECTOR, **label, "worker.gardener.cloud/pool": pool}
        seed.seed_api.kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}))
    a1, a2, b1 = nodes
    try:
        seed.create_extension(ns, {"nodeSelector": label, "configs": {"default": OLD}})
        wait_for(lambda: last_op(seed, ns).get("state") == "Succeeded", "first reconcile", operator=operator)
        assert config_maps(seed, ns)["cri-resmgr-config.default"]["policy"] == "Active: topology-aware\n" \
            "ReservedResources:\n  cpu: 750m\n"

        seed.patch_extension(ns, {"spec": {"providerConfig": {"configs": {"default": NEW}}}})
        wait_for(lambda: "started on the canary node" in last_op(seed, ns).get("description", ""),
                 "the rollout started", operator=operator)
        cms = config_maps(seed, ns)
        assert "750m" in cms["cri-resmgr-config.default"]["policy"]  # every other node keeps the good config
        assert "0-200" in cms["cri-resmgr-candidate.default"]["policy"]
        spec = rollout.parse_rollout({"data": cms[rollout.ROLLOUT_CONFIG_MAP]})
        assert spec.canaries == (a1, b1)
        assert last_op(seed, ns)["state"] == "Processing"

        report(seed, a1, f"{spec.attempt} applied")
        report(seed, b1, f"{spec.attempt} failed: policy.AvailableResources.cpu: CPUs 4-200 are not online")
        error = wait_for(lambda: ((seed.extension(ns).get("status") or {}).get("lastError") or {}).get(
            "description"), "lastError naming the node", operator=operator)
        assert f"canary node {b1}: policy.AvailableResources.cpu: CPUs 4-200 are not online" in error, error
        cms = config_maps(seed, ns)
        assert "cri-resmgr-candidate.default" not in cms and "750m" in cms["cri-resmgr-config.default"]["policy"]
        assert rollout.parse_rollout({"data": cms[rollout.ROLLOUT_CONFIG_MAP]}).canaries == ()
        assert a2 not in error

        seed.patch_extension(ns, {"spec": {"providerConfig": {"configs": {"default": FIXED}}}})
        wait_for(lambda: "0-200" not in json.dumps(config_maps(seed, ns).get("cri-resmgr-candidate.default", {}))
                 and "500m" in json.dumps(config_maps(seed, ns).get("cri-resmgr-candidate.default", {})),
                 "the fixed candidate", operator=operator)
        attempt = rollout.parse_rollout({"data": config_maps(seed, ns)[rollout.ROLLOUT_CONFIG_MAP]}).attempt
        assert attempt != spec.attempt
        for node in (a1, b1):
            report(seed, node, f"{attempt} applied")
        wait_for(lambda: last_op(seed, ns).get("state") == "Succeeded", "promoted", operator=operator)
        cms = config_maps(seed, ns)
        assert "500m" in cms["cri-resmgr-config.default"]["policy"] and "cri-resmgr-candidate.default" not in cms
        assert (seed.extension(ns).get("status") or {}).get("lastError") is None
    finally:
        seed.seed_api.kubectl("delete", "node", *nodes, "--ignore-not-found", check=False)
