"""The installer may change only the frontend label of its own Node (installer/node_label.py), shown against a
real API server with a pod-bound token, as test_agent_node_policy.py shows the agent's policy."""

from __future__ import annotations

from typing import Any

from integration.extension.pod_bound_token import Result, first_denial, patch_node, pod_bound_token
from integration.extension.test_extension_charts import INSTALL_CHART, INSTALL_VALUES, helm

POLICY = "cri-resmgr-installer-node-label"
LABEL = "cri-resmgr.gardener.cloud/frontend"


def test_installer_can_set_the_frontend_label_of_its_own_node_only(tools, seed_api):
    with pod_bound_token(tools, seed_api, policy=POLICY, service_account="cri-resmgr-installer",
                         container="installer") as (own, other, token, suffix):
        def patch(node: str, body: dict[str, Any]) -> Result:
            """A merge patch as installer/node_label.py sends it, with the installer's token."""
            return patch_node(seed_api.url, token, node, body)

        def label(value: str | None) -> dict[str, Any]:
            return {"metadata": {"labels": {LABEL: value}}}

        denied = first_denial(lambda: patch(other, label("nri")), denied=lambda r: r.returncode != 0,
                              undo=lambda: seed_api.kubectl("label", "node", other, f"{LABEL}-", check=False))
        assert denied.returncode != 0, "labelling another node was allowed"
        assert "may label only the node its pod runs on" in denied.stderr and POLICY in denied.stderr
        assert patch(own, label("nri")) == Result(0, "")
        assert patch(own, label("relay")) == Result(0, "")
        assert patch(own, label(None)) == Result(0, "")
        other_label = patch(own, {"metadata": {"labels": {"example.com/x": suffix}}})
        assert other_label.returncode != 0 and f"may change only the label {LABEL}" in other_label.stderr
        annotation = patch(own, {"metadata": {"annotations": {"example.com/x": suffix}}})
        assert annotation.returncode != 0
        cordon = patch(own, {"spec": {"unschedulable": True}})
        assert cordon.returncode != 0
        # Everyone else is untouched by the policy.
        seed_api.kubectl("label", "node", other, f"example.com/x={suffix}")


def test_the_label_rights_come_with_the_policy_only(tools):
    old = helm(tools, "template", "cri-resmgr-installation", str(INSTALL_CHART), "--namespace", "kube-system",
               "--kube-version", "1.29.4", values=INSTALL_VALUES)
    assert "cri-resmgr-installer-node-label" not in old
    new = helm(tools, "template", "cri-resmgr-installation", str(INSTALL_CHART), "--namespace", "kube-system",
               "--kube-version", "1.30.0", values=INSTALL_VALUES)
    assert f"name: {POLICY}" in new and "kind: ClusterRoleBinding" in new
