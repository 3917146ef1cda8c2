"""The extension's proof from the nodes, with the real operator process and a real API server.

The test API server is seed and shoot at once: the operator reads the shoot's nodes and node records
(Leases kube-system/cri-resmgr-node-<node>) through the shoot-access token with the installation
chart's RBAC. The records are written with installer.node_recorder, as the installer writes them.
"""

from __future__ import annotations

import json
import uuid

import pytest
from extension_operator_process import wait_for
from fixtures.seed_api import default_shoot

import noderecord
from extension import node_proof
from installer import node_recorder

pytestmark = pytest.mark.integration


def health(seed, ns) -> dict:
    conds = ((seed.extension(ns) or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "SystemComponentsHealthy"), {})


def wait_health(seed, ns, operator, what: str, want) -> dict:
    """Wait until the health condition satisfies ``want``; a timeout names the last condition."""
    last: dict = {}

    def check() -> bool:
        nonlocal last
        last = health(seed, ns)
        return want(last)

    try:
        wait_for(check, what, operator=operator)
    except AssertionError as err:
        raise AssertionError(f"{err}\nlast SystemComponentsHealthy: {last}") from None
    return last


def test_health_and_uninstall_wait_for_every_selected_nodes_record(seed, operator):
    suffix = uuid.uuid4().hex[:6]
    ns = seed.new_namespace(operator.prefix)
    seed.seed_api.create_cluster(ns, shoot=default_shoot(ns))
    label = {"cri-resmgr-proof-test": suffix}
    nodes = [f"proof-{suffix}-{i}" for i in range(2)]
    for name in nodes + [f"unselected-{suffix}"]:
        labels = {**node_proof.BASE_NODE_SELECTOR, **(label if name in nodes else {})}
        seed.seed_api.kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}))
    recorders = {}
    try:
        seed.create_extension(ns, {"nodeSelector": label})
        wait_for(lambda: (seed.extension(ns).get("status") or {}).get("lastOperation", {}).get("state")
                 == "Succeeded", "reconcile", operator=operator)
        mr = seed.managed_resource(ns)
        digest = mr["metadata"]["annotations"][node_proof.EXPECTED_DIGEST_ANNOTATION]
        recorders = {n: node_recorder.NodeRecorder(seed.coordination, n, digest) for n in nodes}
        # gardener-resource-manager says healthy, but no node has proven its install yet.
        seed.set_mr_conditions(ns)
        wait_health(seed, ns, operator, "health waits for the nodes",
                    lambda h: "waiting for the install on 2 of 2 node" in h.get("message", ""))
        assert health(seed, ns)["status"] == "Progressing"
        recorders[nodes[0]].record(noderecord.INSTALLED)
        wait_health(seed, ns, operator, "one node left", lambda h: "on 1 of 2 node" in h.get("message", ""))
        assert nodes[1] in health(seed, ns)["message"] and nodes[0] not in health(seed, ns)["message"]
        recorders[nodes[1]].record(noderecord.INSTALLED)
        wait_health(seed, ns, operator, "healthy once every node proved it", lambda h: h.get("status") == "True")

        seed.delete_extension(ns)
        wait_for(lambda: "waiting for the uninstall on 2 of 2 node" in
                 (seed.extension(ns).get("status") or {}).get("lastOperation", {}).get("description", ""),
                 "uninstall waits for the nodes (install records do not count)", operator=operator)
        udigest = seed.managed_resource(ns)["metadata"]["annotations"][node_proof.EXPECTED_DIGEST_ANNOTATION]
        assert udigest != digest
        seed.set_mr_conditions(ns)  # the uninstall roll "healthy": still not proof
        for n in nodes:
            recorders[n] = node_recorder.NodeRecorder(seed.coordination, n, udigest)
        recorders[nodes[0]].record(noderecord.UNINSTALLED)
        recorders[nodes[1]].record(noderecord.UNINSTALL_FAILED, "uninstall failed: kubelet did not restart")
        wait_for(lambda: (seed.extension(ns).get("status") or {}).get("lastError"), "error naming the node",
                 operator=operator)
        err = seed.extension(ns)["status"]["lastError"]["description"]
        assert f"{nodes[1]}: uninstall failed: kubelet did not restart" in err, err
        assert seed.managed_resource(ns) is not None  # the uninstalling DaemonSet stays, and so the retries
        recorders[nodes[1]].record(noderecord.UNINSTALLED)
        wait_for(lambda: seed.extension(ns) is None, "Extension gone once every node proved its uninstall",
                 timeout=90, operator=operator)
        assert seed.managed_resource(ns) is None
    finally:
        seed.seed_api.kubectl("delete", "node", *nodes, f"unselected-{suffix}", "--ignore-not-found", check=False)
        seed.seed_api.kubectl("delete", "lease", "-n", "kube-system",
                              *[noderecord.lease_name(n) for n in nodes], "--ignore-not-found", check=False)
