"""The agent may patch only its own Node, shown against a real API server with a pod-bound token.

The installation chart is applied for real (the test API server stands in for the shoot's).
The agent's token is bound to a pod on one node, as a projected token in its DaemonSet pod is;
patching that node and its status is allowed, any other node is denied by the admission policy.
"""

from __future__ import annotations

from integration.extension.pod_bound_token import Result, first_denial, patch_node, pod_bound_token
from integration.extension.test_extension_charts import INSTALL_CHART, INSTALL_VALUES, helm

POLICY = "cri-resmgr-agent-own-node"


def test_agent_can_patch_its_own_node_only(tools, seed_api):
    with pod_bound_token(tools, seed_api, policy=POLICY, service_account="cri-resmgr-agent",
                         container="agent") as (own, other, token, suffix):
        def patch(node: str, *, status: bool = False) -> Result:
            """A merge patch as the agent sends it, with the agent's token."""
            body = ({"status": {"capacity": {"example.com/thing": "1"}}} if status
                    else {"metadata": {"annotations": {"cri-resource-manager.intel.com/test": suffix}}})
            return patch_node(seed_api.url, token, node, body, status=status)

        # The policy takes effect once the API server has loaded it: wait for the first denial.
        denied = first_denial(lambda: patch(other), denied=lambda r: r.returncode != 0, undo=lambda: None)
        assert denied.returncode != 0, "patching another node was allowed"
        assert "may change only the node its pod runs on" in denied.stderr and POLICY in denied.stderr
        assert patch(own).returncode == 0, patch(own).stderr
        assert patch(own, status=True).returncode == 0, patch(own, status=True).stderr
        status_denied = patch(other, status=True)
        assert status_denied.returncode != 0 and "may change only the node" in status_denied.stderr
        # Everyone else is untouched by the policy.
        seed_api.kubectl("annotate", "node", other, f"cri-resource-manager.intel.com/test={suffix}")


def test_no_policy_where_the_shoot_has_no_admission_policies(tools):
    text = helm(tools, "template", "cri-resmgr-installation", str(INSTALL_CHART), "--namespace", "kube-system",
                "--kube-version", "1.29.4", values=INSTALL_VALUES)
    assert "ValidatingAdmissionPolicy" not in text
