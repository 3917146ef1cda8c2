"""End-to-end against a real (kind-based local) Gardener, asserting on the shoot's nodes.

Runs only when GARDEN_KUBECONFIG points at the garden cluster with this extension registered
(examples/ctrldeploy-ctrlreg.yaml or hacks/generate-controller-registration.sh). Environment:

  GARDEN_KUBECONFIG   kubeconfig of the garden (virtual garden in the local setup)     required
  SHOOT_NAMESPACE     project namespace                                             garden-local
  SHOOT_NAME          name of the shoot the scenarios create and delete, one after another   local
  SHOOT_MANIFEST      Shoot YAML to create (its extensions are cleared)     examples/shoot.yaml
  E2E_DEBUG_IMAGE     image of the privileged pod used to reach the nodes          busybox:1.36
  E2E_TIMEOUT         seconds to wait for one shoot operation                               1800
  KUBECTL             kubectl binary                              the dev cache's (make setup)

Each scenario creates the shoot, so it must not exist beforehand. The enable/disable logic used
here is tested without a Gardener in test/integration/e2e_logic/.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
import yaml

if not os.environ.get("GARDEN_KUBECONFIG"):
    pytest.skip("real-Gardener e2e: set GARDEN_KUBECONFIG to a local Gardener's garden kubeconfig "
                "(and SHOOT_NAMESPACE/SHOOT_NAME, default garden-local/local) to run it",
                allow_module_level=True)

from e2e.gardener import shoot_ops  # noqa: E402

# A shoot operation takes minutes; a scenario does several.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(4 * 3600)]

NAMESPACE = os.environ.get("SHOOT_NAMESPACE", "garden-local")
NAME = os.environ.get("SHOOT_NAME", "local")
TIMEOUT = float(os.environ.get("E2E_TIMEOUT", "1800"))
IMAGE = os.environ.get("E2E_DEBUG_IMAGE", "busybox:1.36")
PROVIDER_CONFIG = {
    "apiVersion": "cri-resmgr.extensions.gardener.cloud/v1alpha1", "kind": "CriResMgrConfig",
    "configs": {"default": "policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 750m\n"},
}


@pytest.fixture
def garden(tools) -> shoot_ops.Kube:
    return shoot_ops.Kube(os.environ.get("KUBECTL", tools.kubectl), os.environ["GARDEN_KUBECONFIG"])


def shoot_manifest() -> dict:
    path = Path(os.environ.get("SHOOT_MANIFEST", shoot_ops.REPO / "examples" / "shoot.yaml"))
    shoot = copy.deepcopy(yaml.safe_load(path.read_text()))
    shoot["metadata"] = {"name": NAME, "namespace": NAMESPACE}
    shoot["spec"].pop("extensions", None)
    return shoot


@pytest.fixture
def shoot(garden, tmp_path):
    """Creates the shoot, yields a helper; deletes the shoot even when the test fails."""
    garden.run("create", "-f", "-", input=json.dumps(shoot_manifest()))
    try:
        shoot_ops.wait_shoot_reconciled(garden, NAMESPACE, NAME, TIMEOUT)
        yield Scenario(garden, tmp_path)
    finally:
        shoot_ops.delete_shoot(garden, NAMESPACE, NAME, TIMEOUT)


class Scenario:
    def __init__(self, garden: shoot_ops.Kube, tmp_path: Path):
        self.garden, self.tmp_path = garden, tmp_path

    def shoot_kube(self) -> shoot_ops.Kube:
        kc = shoot_ops.admin_kubeconfig(self.garden, NAMESPACE, NAME, self.tmp_path / "shoot.kubeconfig")
        return shoot_ops.Kube(self.garden.kubectl_path, str(kc))

    def enable(self) -> None:
        assert shoot_ops.enable_extension(self.garden, NAMESPACE, NAME, PROVIDER_CONFIG)
        shoot_ops.wait_shoot_reconciled(self.garden, NAMESPACE, NAME, TIMEOUT)

    def disable(self) -> None:
        assert shoot_ops.disable_extension(self.garden, NAMESPACE, NAME)
        shoot_ops.wait_shoot_reconciled(self.garden, NAMESPACE, NAME, TIMEOUT)

    def assert_nodes(self, installed: bool) -> None:
        shoot = self.shoot_kube()
        nodes = shoot_ops.shoot_nodes(shoot)
        assert nodes, "the shoot has no nodes"
        for name in nodes:
            node = shoot_ops.NodeShell(shoot, name, IMAGE)
            try:
                check = shoot_ops.installed_check(node) if installed else shoot_ops.removed_check(node)
                shoot_ops.wait_until("cri-resmgr installed" if installed else "cri-resmgr removed", check, 600)
                state = shoot_ops.node_state(node)
                if installed:
                    assert state["active"] == "active" and state["status_rc"] == 0, state["status"]
                    assert state["kubelet_endpoint"] == shoot_ops.normalize_endpoint(shoot_ops.RELAY_ENDPOINT)
                    # The providerConfig's default config reached cri-resmgr through the agent.
                    shoot_ops.wait_until("agent applied the default config",
                                         lambda n=name: shoot_ops.agent_config_applied(shoot.get_json("node", n)), 300)
                else:
                    assert not state["unit_installed"], state["status"]
                    assert state["kubelet_endpoint"] == shoot_ops.normalize_endpoint(shoot_ops.CONTAINERD_ENDPOINT)
            finally:
                node.close()


def test_create_enable_delete(shoot):
    shoot.enable()
    shoot.assert_nodes(installed=True)


@pytest.mark.parametrize("reenable", [False, True], ids=["create-enable-disable-delete",
                                                      "create-enable-disable-reenable-delete"])
def test_create_enable_disable_delete(shoot, reenable):
    shoot.enable()
    shoot.assert_nodes(installed=True)
    shoot.disable()
    shoot.assert_nodes(installed=False)
    if reenable:
        shoot.enable()
        shoot.assert_nodes(installed=True)


def test_hibernate_then_reconcile(shoot):
    shoot.enable()
    shoot.assert_nodes(installed=True)
    shoot_ops.set_hibernation(shoot.garden, NAMESPACE, NAME, True)
    shoot_ops.wait_shoot_reconciled(shoot.garden, NAMESPACE, NAME, TIMEOUT)
    # A reconcile while hibernated succeeds (the extension deploys nothing then).
    shoot_ops.trigger_reconcile(shoot.garden, NAMESPACE, NAME)
    shoot_ops.wait_shoot_reconciled(shoot.garden, NAMESPACE, NAME, TIMEOUT)
    shoot_ops.set_hibernation(shoot.garden, NAMESPACE, NAME, False)
    shoot_ops.wait_shoot_reconciled(shoot.garden, NAMESPACE, NAME, TIMEOUT)
    shoot.assert_nodes(installed=True)  # the woken-up nodes are new machines
    shoot_ops.trigger_reconcile(shoot.garden, NAMESPACE, NAME)
    shoot_ops.wait_shoot_reconciled(shoot.garden, NAMESPACE, NAME, TIMEOUT)
    shoot.assert_nodes(installed=True)
