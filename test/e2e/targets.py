"""The two targets the e2e scenarios (scenarios.py) run against."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import yaml

from devland import shoot_ops

LANDSCAPE_EXTRA_OPTIONS = "--metrics-address=off"


class GardenerTarget:
    """A real Gardener: the shoot is created, patched and deleted through the garden cluster."""

    def __init__(self, garden: shoot_ops.Kube, namespace: str, name: str, tmp_path: Path, image: str,
                 timeout: float) -> None:
        self.garden, self.namespace, self.name = garden, namespace, name
        self.tmp_path, self.image, self.timeout = tmp_path, image, timeout

    def _manifest(self) -> dict:
        path = Path(os.environ.get("SHOOT_MANIFEST", shoot_ops.REPO / "examples" / "shoot.yaml"))
        shoot = copy.deepcopy(yaml.safe_load(path.read_text()))
        shoot["metadata"] = {"name": self.name, "namespace": self.namespace}
        shoot["spec"].pop("extensions", None)
        return shoot

    def _wait(self) -> None:
        shoot_ops.wait_shoot_reconciled(self.garden, self.namespace, self.name, self.timeout)

    def create(self) -> None:
        self.garden.run("create", "-f", "-", input=json.dumps(self._manifest()))
        self._wait()

    def delete(self) -> None:
        shoot_ops.delete_shoot(self.garden, self.namespace, self.name, self.timeout)

    def enable(self, provider_config: dict, wait: bool = True) -> None:
        shoot_ops.enable_extension(self.garden, self.namespace, self.name, provider_config)
        if wait:
            self._wait()

    def wait_reconciled(self) -> None:
        self._wait()

    wait_gone = wait_reconciled

    def disable(self, wait: bool = True) -> None:
        assert shoot_ops.disable_extension(self.garden, self.namespace, self.name)
        if wait:
            self._wait()

    def set_hibernation(self, enabled: bool) -> None:
        shoot_ops.set_hibernation(self.garden, self.namespace, self.name, enabled)
        self._wait()

    def reconcile(self) -> None:
        shoot_ops.trigger_reconcile(self.garden, self.namespace, self.name)
        self._wait()

    def last_error(self) -> str:
        """The Shoot's lastErrors, where gardenlet reports an Extension's lastError."""
        shoot = shoot_ops.get_shoot(self.garden, self.namespace, self.name)
        return "\n".join(e.get("description", "") for e in (shoot.get("status") or {}).get("lastErrors") or [])

    def shoot(self) -> shoot_ops.Kube:
        kc = shoot_ops.admin_kubeconfig(self.garden, self.namespace, self.name, self.tmp_path / "shoot.kubeconfig")
        return shoot_ops.Kube(self.garden.kubectl_path, str(kc))

    def pools(self) -> list[str]:
        shoot = shoot_ops.get_shoot(self.garden, self.namespace, self.name)
        return [w["name"] for w in shoot["spec"]["provider"]["workers"]]

    def runners(self, nodes: list[str]) -> list:
        shoot = self.shoot()
        return [shoot_ops.NodeShell(shoot, n, self.image) for n in nodes]

    def close_runners(self, runners: list) -> None:
        for r in runners:
            r.close()

    def set_base_configs(self, configs: dict[str, str]) -> None:
        raise NotImplementedError("changing the ControllerDeployment's base configs needs the operator's "
                                  "garden access; run this scenario on the local landscape")

    def kill_extension_pod(self) -> None:
        raise NotImplementedError("killing the extension pod needs seed access; run it on the local landscape")


class LandscapeTarget:
    """The local landscape; gardenlet's part is played by its stand-in driver.

    Deleting the shoot (or hibernating it) takes its machines away: the shoot nodes are replaced by
    fresh ones before the next shoot is created (or when it wakes up), as new machines would be.
    """

    def __init__(self, land, timeout: float = 600) -> None:
        self.land = land
        self.timeout = timeout
        self.gardenlet = None

    def create(self) -> None:
        # The landscape outlives a target (one per test): whether its nodes served a shoot is its state.
        if getattr(self.land, "shoot_nodes_used", False):
            self.land.replace_shoot_nodes()
        self.land.shoot_nodes_used = True
        self.gardenlet = self.land.gardenlet()
        self.gardenlet.write_cluster()

    def delete(self) -> None:
        g = self.gardenlet
        g.mark_shoot_deleted()
        if g.extension() is not None:
            g.delete_extension()
            g.wait_gone(self.timeout)
        g.delete_cluster()
        # gardenlet finishes a shoot's deletion only when its seed namespace is gone, with every
        # ManagedResource in it; the landscape reuses the namespace, so wait for those instead.
        g.wait(g.no_managed_resources, "the shoot's ManagedResources deleted", self.timeout)

    def enable(self, provider_config: dict, wait: bool = True) -> None:
        # The landscape's nodes share one network namespace: one relay metrics port cannot serve them all.
        pc = copy.deepcopy(provider_config)
        pc.setdefault("configs", {}).setdefault("EXTRA_OPTIONS", LANDSCAPE_EXTRA_OPTIONS)
        self.gardenlet.reconcile(pc)
        if wait:
            self.gardenlet.wait_ready(self.timeout)

    def wait_reconciled(self) -> None:
        self.gardenlet.wait_ready(self.timeout)

    def wait_gone(self) -> None:
        self.gardenlet.wait_gone(self.timeout)

    def disable(self, wait: bool = True) -> None:
        self.gardenlet.delete_extension()
        if wait:
            self.gardenlet.wait_gone(self.timeout)

    def set_hibernation(self, enabled: bool) -> None:
        g = self.gardenlet
        g.set_hibernation(enabled)
        if not enabled:
            self.land.replace_shoot_nodes()  # waking up: new machines
        if g.extension() is not None:
            g.annotate_reconcile()
            g.wait_ready(self.timeout)
        if enabled:
            self.land.stop_shoot_nodes()  # hibernated: the machines are gone

    def reconcile(self) -> None:
        self.gardenlet.annotate_reconcile()
        self.gardenlet.wait_ready(self.timeout)

    def last_error(self) -> str:
        ext = self.gardenlet.extension() or {}
        return ((ext.get("status") or {}).get("lastError") or {}).get("description", "")

    def shoot(self) -> shoot_ops.Kube:
        return self.land.shoot

    def pools(self) -> list[str]:
        return list(self.land.pools)

    def runners(self, nodes: list[str]) -> list:
        from devland.node_checks import NodeRunner

        return [NodeRunner(n) for n in self.land.shoot_nodes if n.name in nodes]

    def close_runners(self, runners: list) -> None:
        pass

    def set_base_configs(self, configs: dict[str, str]) -> None:
        self.land.set_base_configs(configs)

    def kill_extension_pod(self) -> None:
        """Force-delete the extension's pod while the installer DaemonSet rolls out in the shoot."""
        from devland import seed_extension
        from devland.workloads import daemonset_rolled_out

        def rolling() -> tuple[bool, str]:
            done, why = daemonset_rolled_out(self.land.shoot, "cri-resmgr-installer")
            exists = "NotFound" not in why
            return exists and not done, f"no installer rollout in progress ({why})"
        shoot_ops.wait_until("an installer rollout in progress", rolling, self.timeout, 0.3)
        pod = seed_extension.pod_name(self.land.seed)
        self.land.seed.run("-n", seed_extension.NAMESPACE, "delete", "pod", pod, "--grace-period=0", "--force")
