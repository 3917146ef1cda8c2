"""The e2e scenarios, written once and run against either target (test/e2e/targets.py):

* GardenerTarget: a real Gardener (GARDEN_KUBECONFIG), shoots created and deleted through the garden;
* LandscapeTarget: the local landscape, with the gardenlet stand-in playing gardenlet's part.

A scenario uses only the Target interface plus the node checks of shoot_ops, which work on any
NodeRunner (a debug pod on a real shoot node, or nsenter into a landscape node).
"""

from __future__ import annotations

import json
from typing import Protocol

from devland import shoot_ops

DEFAULT_CONFIG = "policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 750m\n"


def provider_config(configs: dict[str, str] | None = None, worker_pools: list[str] | None = None) -> dict:
    pc: dict = {"apiVersion": "cri-resmgr.extensions.gardener.cloud/v1alpha1", "kind": "CriResMgrConfig",
                "configs": {"default": DEFAULT_CONFIG, **(configs or {})}}
    if worker_pools is not None:
        pc["workerPools"] = worker_pools
    return pc


class Target(Protocol):
    """Where a scenario runs: a shoot whose extension it can enable, disable and hibernate."""

    timeout: float

    def create(self) -> None: ...                       # the shoot exists, nodes Ready, extension off
    def delete(self) -> None: ...                       # the shoot (and its machines) gone
    def enable(self, provider_config: dict, wait: bool = True) -> None: ...  # and wait until reconciled
    def disable(self, wait: bool = True) -> None: ...  # and wait until reconciled (the Extension gone)
    def wait_reconciled(self) -> None: ...
    def wait_gone(self) -> None: ...
    def set_hibernation(self, enabled: bool) -> None: ...  # and wait until reconciled
    def reconcile(self) -> None: ...                    # and wait until reconciled
    def last_error(self) -> str: ...                    # the extension's error as the shoot's owner sees it
    def shoot(self) -> shoot_ops.Kube: ...
    def pools(self) -> list[str]: ...
    def runners(self, nodes: list[str]) -> list[shoot_ops.NodeRunner]: ...
    def close_runners(self, runners: list[shoot_ops.NodeRunner]) -> None: ...
    # Seed-side operations; a target without seed access raises NotImplementedError.
    def set_base_configs(self, configs: dict[str, str]) -> None: ...
    def kill_extension_pod(self) -> None: ...


def assert_nodes(t: Target, installed: bool, pools: list[str] | None = None,
                 configmap: dict[str, str] | None = None) -> None:
    """Every node (of ``pools``) has cri-resmgr installed with kubelet on the relay and the agent
    reporting its config applied, or removed with kubelet back on containerd.
    ``configmap``: node name -> the ConfigMap the agent must report (default: cri-resmgr-config.default)."""
    shoot = t.shoot()
    nodes = shoot_ops.shoot_nodes(shoot, pools)
    assert nodes, f"the shoot has no nodes (pools {pools})"
    runners = t.runners(nodes)
    try:
        for node in runners:
            check = shoot_ops.installed_check(node) if installed else shoot_ops.removed_check(node)
            shoot_ops.wait_until("cri-resmgr installed" if installed else "cri-resmgr removed", check, 600, 2)
            state = shoot_ops.node_state(node)
            if installed:
                assert state["active"] == "active" and state["status_rc"] == 0, state["status"]
                assert state["kubelet_endpoint"] == shoot_ops.normalize_endpoint(shoot_ops.RELAY_ENDPOINT)
                cm = (configmap or {}).get(node.node, "cri-resmgr-config.default")
                shoot_ops.wait_until(f"agent applied {cm}",
                                     lambda n=node.node, cm=cm: shoot_ops.agent_config_applied(
                                         shoot.get_json("node", n), cm), 300, 2)
            else:
                assert not state["unit_installed"], state["status"]
                assert state["kubelet_endpoint"] == shoot_ops.normalize_endpoint(shoot_ops.CONTAINERD_ENDPOINT)
    finally:
        t.close_runners(runners)


# ----- the scenarios ----------------------------------------------------------------------------

def create_enable_delete(t: Target) -> None:
    t.create()
    t.enable(provider_config())
    assert_nodes(t, installed=True)
    t.delete()


def enable_disable(t: Target, reenable: bool) -> None:
    t.create()
    t.enable(provider_config())
    assert_nodes(t, installed=True)
    t.disable()
    assert_nodes(t, installed=False)
    if reenable:
        t.enable(provider_config())
        assert_nodes(t, installed=True)
    t.delete()


def hibernate_then_reconcile(t: Target) -> None:
    t.create()
    t.enable(provider_config())
    assert_nodes(t, installed=True)
    t.set_hibernation(True)
    t.reconcile()  # a reconcile while hibernated succeeds (the extension deploys nothing then)
    t.set_hibernation(False)
    assert_nodes(t, installed=True)  # the woken-up nodes are new machines
    t.reconcile()
    assert_nodes(t, installed=True)
    t.delete()


def worker_pool_selection(t: Target) -> None:
    """workerPools: the relay runs on the chosen pool only; the other pool is untouched."""
    pools = t.pools()
    assert len(pools) >= 2, f"needs two worker pools, the shoot has {pools}"
    chosen, other = pools[:1], pools[1:]
    t.create()
    t.enable(provider_config(worker_pools=chosen))
    assert_nodes(t, installed=True, pools=chosen)
    assert_nodes(t, installed=False, pools=other)
    t.disable()
    assert_nodes(t, installed=False)
    t.delete()


def node_config(t: Target) -> None:
    """A node.<NAME> config reaches that node only; the others keep the default."""
    t.create()
    nodes = shoot_ops.shoot_nodes(t.shoot())
    target = nodes[0]
    node_cfg = DEFAULT_CONFIG.replace("CPU: 750m", "CPU: 500m")
    t.enable(provider_config({f"node.{target}": node_cfg}))
    expected = {n: ("cri-resmgr-config.node." + n if n == target else "cri-resmgr-config.default") for n in nodes}
    assert_nodes(t, installed=True, configmap=expected)
    t.disable()
    t.delete()


def base_config_change(t: Target) -> None:
    """A changed base config (the operator's, not the shoot's) reaches the nodes by itself: the extension
    re-reconciles every Extension when its base configs change (no gardenlet reconcile, no operation annotation)."""
    t.create()
    t.set_base_configs({"default": DEFAULT_CONFIG})
    pc = provider_config()
    del pc["configs"]["default"]  # the base config provides it
    t.enable(pc)
    assert_nodes(t, installed=True)
    shoot = t.shoot()
    before = {n: shoot.get_json("node", n)["metadata"]["annotations"][shoot_ops.CONFIG_SOURCE]
              for n in shoot_ops.shoot_nodes(shoot)}
    changed = DEFAULT_CONFIG.replace("CPU: 750m", "CPU: 250m")
    t.set_base_configs({"default": changed})

    def propagated() -> tuple[bool, str]:
        cm = shoot.get_json("configmap", "-n", "kube-system", "cri-resmgr-config.default")
        data = "".join(cm.get("data", {}).values())
        return "CPU: 250m" in data, f"cri-resmgr-config.default still: {data!r}"
    shoot_ops.wait_until("the changed base config in the shoot", propagated, 120, 2)
    for n, old in before.items():
        def pushed(n=n, old=old) -> tuple[bool, str]:
            node = shoot.get_json("node", n)
            ok, why = shoot_ops.agent_config_applied(node)
            src = node["metadata"]["annotations"].get(shoot_ops.CONFIG_SOURCE)
            return ok and src != old, why or f"{n}: still {src}"
        shoot_ops.wait_until("the agent applied the changed base config", pushed, 300, 2)
    t.disable()
    t.set_base_configs({})
    t.delete()


def extension_pod_killed_during_rollout(t: Target) -> None:
    """The extension's pod dies while the DaemonSets roll out; its replacement finishes the job."""
    t.create()
    t.enable(provider_config(), wait=False)
    t.kill_extension_pod()
    t.wait_reconciled()
    assert_nodes(t, installed=True)
    t.disable(wait=False)
    t.kill_extension_pod()  # and once more in the middle of the uninstall roll
    t.wait_gone()
    assert_nodes(t, installed=False)
    t.delete()


def staged_config_rollout(t: Target) -> None:
    """A changed dynamic config goes to one canary node per worker pool first. A canary whose cri-resmgr refuses it
    goes back to the last good config, the rollout stops and the extension's error names that node; no node keeps
    the change. A corrected config is then promoted to every node.

    The refusal is real: ``node.<first node>`` asks for CPUs 0-200, which the schema accepts and the node's
    cri-resmgr refuses (it has 2 CPUs). The default changes as well, so the other pool's node is a canary too."""
    from resmgr.agent.rollout import ROLLOUT_ANNOTATION, ROLLOUT_CONFIG_MAP

    t.create()
    t.enable(provider_config())
    assert_nodes(t, installed=True)
    shoot = t.shoot()
    nodes = shoot_ops.shoot_nodes(shoot)
    refusing = nodes[0]

    def default_cm() -> dict:
        return shoot.get_json("configmap", "-n", "kube-system", "cri-resmgr-config.default")

    good_rv = default_cm()["metadata"]["resourceVersion"]
    changed = DEFAULT_CONFIG.replace("CPU: 750m", "CPU: 500m")
    unplaceable = "policy:\n  Active: topology-aware\n  AvailableResources:\n    cpu: cpuset:0-200\n"
    t.enable(provider_config({"default": changed, f"node.{refusing}": unplaceable}), wait=False)

    def rollout() -> dict:
        r = shoot.run("get", "configmap", "-n", "kube-system", ROLLOUT_CONFIG_MAP, "-o", "json", check=False)
        return json.loads(r.stdout) if r.returncode == 0 else {}

    def canaries_named() -> tuple[bool, str]:
        data = json.dumps(rollout().get("data") or {})
        return all(n in data for n in nodes), f"{ROLLOUT_CONFIG_MAP}: {data}"
    shoot_ops.wait_until("a rollout naming one canary per pool", canaries_named, t.timeout, 1)

    def refused() -> tuple[bool, str]:
        report = (shoot.get_json("node", refusing)["metadata"].get("annotations") or {}).get(ROLLOUT_ANNOTATION, "")
        return " failed: " in report, f"{refusing}: rollout report {report!r}"
    shoot_ops.wait_until(f"{refusing} reports the candidate refused", refused, t.timeout, 1)

    def stopped() -> tuple[bool, str]:
        error = t.last_error()
        return refusing in error and "AvailableResources" in error, f"the extension's error: {error!r}"
    shoot_ops.wait_until("the rollout stopped, naming the node and the error", stopped, t.timeout, 2)

    # Every node is back on (or never left) the last good config: the ordinary ConfigMap, unchanged.
    assert default_cm()["metadata"]["resourceVersion"] == good_rv
    assert "CPU: 750m" in json.dumps(default_cm()["data"])
    for n in nodes:
        shoot_ops.wait_until(f"{n} on the last good config",
                             lambda n=n: _on_config_map(shoot.get_json("node", n), "cri-resmgr-config.default",
                                                        good_rv), t.timeout, 2)

    # Corrected: the canaries apply it, then it is promoted to the ordinary ConfigMap on every node.
    t.enable(provider_config({"default": changed}))
    assert not t.last_error()

    def promoted_in_shoot() -> tuple[bool, str]:  # gardener-resource-manager applies the promotion after the reconcile
        data = default_cm()["data"]
        return "CPU: 500m" in json.dumps(data), f"cri-resmgr-config.default: {data}"
    shoot_ops.wait_until("the corrected config promoted to cri-resmgr-config.default", promoted_in_shoot, t.timeout, 1)
    promoted = default_cm()
    for n in nodes:
        shoot_ops.wait_until(f"{n} on the promoted config",
                             lambda n=n: _on_config_map(shoot.get_json("node", n), "cri-resmgr-config.default",
                                                        promoted["metadata"]["resourceVersion"]), t.timeout, 2)
    t.disable()
    t.delete()


def _on_config_map(node_obj: dict, name: str, resource_version: str) -> tuple[bool, str]:
    """Whether the agent reports ``name`` at ``resource_version`` applied on the Node."""
    ok, why = shoot_ops.agent_config_applied(node_obj, name)
    source = (node_obj["metadata"].get("annotations") or {}).get(shoot_ops.CONFIG_SOURCE, "")
    return ok and source.endswith(f"@{resource_version}"), why or f"config source {source}, want @{resource_version}"
