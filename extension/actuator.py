"""The actuator: Reconcile, Delete, ForceDelete, Migrate and Restore of one Extension.

It orchestrates the plain modules (configs, image vector, chart rendering,
ManagedResources); the kopf handlers only map Gardener's annotations onto it.
Waiting is never done by sleeping: a step that is not done yet raises
WaitingError and is checked again later.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from extension import chart_render, health, imagevector, managed_resources, monitoring
from extension import constants as c
from extension.cluster import ClusterInfo
from extension.configs import SplitConfigs, merge_configs, validate_and_split
from extension.errors import ConfigurationError, WaitingError
from extension.kube import Apis, is_not_found
from extension.provider_config import ProviderConfig, check_worker_pools, parse_provider_config

log = logging.getLogger("extension.actuator")

INSTALL, UNINSTALL = "install", "uninstall"


@dataclass
class ActuatorSettings:
    chart_dir: Path
    images_file: Path
    helm: str
    imagevector_overwrite: str | None = None
    configmap_namespace: str | None = None
    uninstall_timeout: float = 600.0
    poll_interval: float = 5.0
    metrics_port: int = 8891


class UninstallTimeout(RuntimeError):
    """The uninstall rollout is not healthy in time; still waiting, but reported as an error."""

    def __init__(self, message: str, delay: float) -> None:
        self.delay = delay
        super().__init__(message)


@dataclass(frozen=True)
class Rendered:
    manifests: str
    objects: list[dict[str, Any]]


class Actuator:
    def __init__(self, apis: Apis, settings: ActuatorSettings) -> None:
        self.apis = apis
        self.settings = settings

    # -- inputs -----------------------------------------------------------------------------------

    def base_configs(self) -> dict[str, str]:
        """The operator's base configs (ControllerDeployment values.configs), if configured."""
        ns = self.settings.configmap_namespace
        if not ns:
            return {}
        try:
            cm = self.apis.core.read_namespaced_config_map(c.CONFIGS_CONFIGMAP_NAME, ns)
        except Exception as err:
            if is_not_found(err):
                raise ConfigurationError(f"configmap {ns}/{c.CONFIGS_CONFIGMAP_NAME}",
                                         "base configs ConfigMap not found") from None
            raise
        return dict(cm.data or {})

    def provider_config(self, extension: dict[str, Any]) -> ProviderConfig:
        return parse_provider_config((extension.get("spec") or {}).get("providerConfig"))

    def configs(self, pc: ProviderConfig) -> SplitConfigs:
        base = self.base_configs()
        merged = merge_configs(base, pc.configs)
        origin_base = f"configmap {self.settings.configmap_namespace}/{c.CONFIGS_CONFIGMAP_NAME}"
        origins = {name: ("providerConfig.configs" if name in pc.configs else origin_base) for name in merged}
        return validate_and_split(merged, origins=origins)

    def images(self, cluster: ClusterInfo) -> dict[str, str]:
        vector = imagevector.load(self.settings.images_file, self.settings.imagevector_overwrite)
        version = cluster.kubernetes_version or None
        return {
            "installer": imagevector.find_image(vector, c.INSTALLER_IMAGE, target_version=version).image(),
            "agent": imagevector.find_image(vector, c.AGENT_IMAGE, target_version=version).image(),
        }

    # -- rendering ---------------------------------------------------------------------------------

    def render(self, cluster: ClusterInfo, pc: ProviderConfig, split: SplitConfigs, mode: str) -> Rendered:
        values = {
            "images": self.images(cluster),
            "installer": {"mode": mode},
            "configs": {"static": split.static, "dynamic": split.dynamic},
            "nodeSelector": pc.node_selector,
            "workerPools": list(pc.worker_pools),
            "metrics": {"port": self.settings.metrics_port},
        }
        text = chart_render.helm_template(
            self.settings.helm, self.settings.chart_dir, c.INSTALLATION_RELEASE_NAME, c.SHOOT_SYSTEM_NAMESPACE,
            values, kube_version=cluster.kubernetes_version or None)
        objects = chart_render.split_manifests(text)
        chart_render.check_size(text)
        return Rendered(manifests=text, objects=objects)

    def _deploy_runtime(self, namespace: str, rendered: Rendered) -> str:
        data = {c.SECRET_DATA_KEY: rendered.manifests.encode()}
        return managed_resources.deploy(self.apis, managed_resources.for_shoot(
            namespace, c.MANAGED_RESOURCE_NAME, data))

    def _deploy_monitoring(self, namespace: str) -> str:
        data = {"scrape-config.yaml": monitoring.scrape_configmap(namespace, self.settings.metrics_port).encode()}
        return managed_resources.deploy(self.apis, managed_resources.for_seed(
            namespace, c.MONITORING_MANAGED_RESOURCE_NAME, data))

    # -- operations --------------------------------------------------------------------------------

    def reconcile(self, extension: dict[str, Any], cluster: ClusterInfo) -> str:
        ns = extension["metadata"]["namespace"]
        # Validate first even when hibernated: a bad config is reported early either way.
        pc = self.provider_config(extension)
        check_worker_pools(pc.worker_pools, list(cluster.worker_pools))
        split = self.configs(pc)
        if cluster.hibernated:
            log.info("shoot is hibernated, nothing deployed", extra={"namespace": ns})
            return "Shoot is hibernated; nothing deployed"
        rendered = self.render(cluster, pc, split, INSTALL)
        secret = self._deploy_runtime(ns, rendered)
        self._deploy_monitoring(ns)
        log.info("deployed managed resource", extra={"namespace": ns, "secret": secret,
                                                     "objects": len(rendered.objects)})
        return f"Deployed {len(rendered.objects)} objects via secret {secret}"

    def restore(self, extension: dict[str, Any], cluster: ClusterInfo) -> str:
        return self.reconcile(extension, cluster)

    def delete_without_waiting(self, namespace: str) -> None:
        for name in (c.MANAGED_RESOURCE_NAME, c.MONITORING_MANAGED_RESOURCE_NAME):
            managed_resources.delete(self.apis, namespace, name)

    def force_delete(self, extension: dict[str, Any]) -> str:
        self.delete_without_waiting(extension["metadata"]["namespace"])
        return "Force-deleted managed resources without waiting"

    def _uninstall_render(self, extension: dict[str, Any], cluster: ClusterInfo) -> Rendered:
        # Uninstall needs no configs, only the same node selection as the install.
        try:
            pc = self.provider_config(extension)
        except ConfigurationError:
            pc = ProviderConfig()
        return self.render(cluster, ProviderConfig(node_selector=pc.node_selector,
                                                   worker_pools=pc.worker_pools), SplitConfigs(), UNINSTALL)

    def delete(self, extension: dict[str, Any], cluster: ClusterInfo, runtime_seconds: float) -> str:
        """Roll the installer into uninstall mode, wait for it, then delete the ManagedResources."""
        ns = extension["metadata"]["namespace"]
        if cluster.force_deletion:
            return self.force_delete(extension)
        if cluster.hibernated or cluster.shoot_deleting:
            self.delete_without_waiting(ns)
            why = "hibernated" if cluster.hibernated else "being deleted"
            return f"Shoot is {why}; deleted managed resources without waiting"
        mr = managed_resources.get(self.apis, ns, c.MANAGED_RESOURCE_NAME)
        if mr is None:
            # Nothing (left) on the nodes: clean up leftovers and finish.
            self.delete_without_waiting(ns)
            return "Deleted managed resources"
        if (mr.get("metadata") or {}).get("deletionTimestamp"):
            raise WaitingError(f"waiting for managed resource {c.MANAGED_RESOURCE_NAME} to be deleted",
                               self.settings.poll_interval)
        rendered = self._uninstall_render(extension, cluster)
        secret = self._deploy_runtime(ns, rendered)
        mr = managed_resources.get(self.apis, ns, c.MANAGED_RESOURCE_NAME)
        if not health.is_healthy(mr, secret_name=secret):
            _, _, detail = health.assess(mr, hibernated=False)
            if runtime_seconds > self.settings.uninstall_timeout:
                raise UninstallTimeout(
                    f"uninstall rollout not healthy after {int(runtime_seconds)}s "
                    f"(timeout {int(self.settings.uninstall_timeout)}s): {detail}; still waiting",
                    self.settings.poll_interval)
            raise WaitingError(f"waiting for the uninstall rollout to become healthy: {detail}",
                               self.settings.poll_interval)
        log.info("uninstall rollout healthy, deleting managed resources", extra={"namespace": ns})
        self.delete_without_waiting(ns)
        if managed_resources.exists(self.apis, ns, c.MANAGED_RESOURCE_NAME):
            raise WaitingError(f"waiting for managed resource {c.MANAGED_RESOURCE_NAME} to be deleted",
                               self.settings.poll_interval)
        return "Uninstalled cri-resmgr and deleted managed resources"

    def migrate(self, extension: dict[str, Any]) -> str:
        """Keep the shoot's objects, drop our ManagedResources from this seed."""
        ns = extension["metadata"]["namespace"]
        for name in (c.MANAGED_RESOURCE_NAME, c.MONITORING_MANAGED_RESOURCE_NAME):
            managed_resources.set_keep_objects(self.apis, ns, name, True)
            managed_resources.delete(self.apis, ns, name)
        for name in (c.MANAGED_RESOURCE_NAME, c.MONITORING_MANAGED_RESOURCE_NAME):
            if managed_resources.exists(self.apis, ns, name):
                raise WaitingError(f"waiting for managed resource {name} to be deleted",
                                   self.settings.poll_interval)
        return "Migrated: managed resources removed with keepObjects, node workload untouched"
