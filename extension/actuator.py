"""The actuator: Reconcile, Delete, ForceDelete, Migrate and Restore of one Extension.

It reads the inputs (providerConfig, base configs, image vector) and composes two
components, the installation (``extension.installation``) and the monitoring
(``extension.monitoring``), each with Deploy, Wait and Destroy (``extension.component``);
migrate is destroy with keepObjects. The reconciler maps Gardener's annotations onto it; a reconcile
hands back what the reconciler records of it (ReconcileResult), so nothing is read or validated twice.
Waiting is never done by sleeping: a step that is not done yet raises
WaitingError and is checked again later.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import noderecord
from extension import base_configs, config_rollout, node_proof, webhook
from extension import constants as c
from extension.component import ManagedResourceComponent, NotHealthy
from extension.configs import SplitConfigs, validate_and_split
from extension.errors import ConfigurationError, RetryLater, WaitingError
from extension.gardener import imagevector, status
from extension.gardener.cluster import ClusterInfo
from extension.gardener.kube import Apis
from extension.installation import INSTALL, UNINSTALL, Installation, InstallationValues
from extension.monitoring import Monitoring
from extension.provider_config import ProviderConfig, parse_provider_config
from extension.shoot_config import check_shoot_config, shoot_configs, with_base
from extension.webhook_certs import CARotation

log = logging.getLogger("extension.actuator")


@dataclass
class ActuatorSettings:
    chart_dir: Path
    images_file: Path
    helm: str
    imagevector_overwrite: str | None = None
    configmap_namespace: str | None = None
    uninstall_timeout: float = 600.0
    uninstall_max_unavailable: str | int = "50%"  # nodes uninstalling at once (installer DaemonSet maxUnavailable)
    config_rollout_timeout: float = 300.0  # a canary that has not reported a changed dynamic config stops it
    poll_interval: float = 2.0  # as Gardener's managedresources.IntervalWait (extension/cli.py)
    metrics_port: int = 8891
    # Admit the shoot's pod network to the relays' /metrics (opt-in: it admits every pod; see
    # docs/usage/metrics-and-logs.md).
    metrics_allow_pod_network: bool = False


@dataclass(frozen=True)
class ReconcileResult:
    """What one reconcile did, and what the reconciler records of it on the Extension."""

    detail: str
    # What the shoot owner should fix but that must not fail the reconcile (it would block the shoot):
    # worker pools that do not exist, config fields left out or not applied.
    warnings: tuple[str, ...] = ()
    # The digest of the base configs this reconcile used (extension.base_configs); None: none configured.
    base_configs_digest: str | None = None


class UninstallTimeout(RetryLater):
    """The uninstall has not finished on every node in time; still waiting, but reported as an error."""


class Actuator:
    def __init__(self, apis: Apis, settings: ActuatorSettings, shoot: node_proof.ShootReader | None = None) -> None:
        self.apis = apis
        self.settings = settings
        # Reads the nodes' records from the shoot: the proof that an install or uninstall finished.
        self.shoot = shoot if shoot is not None else node_proof.ShootReader(apis)

    # -- inputs -----------------------------------------------------------------------------------

    def base_configs(self) -> dict[str, str] | None:
        """The operator's base configs (ControllerDeployment values.configs); None when none are configured."""
        ns = self.settings.configmap_namespace
        if not ns:
            return None
        data = base_configs.read(self.apis, ns)
        if data is None:
            raise ConfigurationError(f"configmap {ns}/{c.CONFIGS_CONFIGMAP_NAME}", "base configs ConfigMap not found")
        return data

    def provider_config(self, extension: dict[str, Any]) -> ProviderConfig:
        return parse_provider_config((extension.get("spec") or {}).get("providerConfig"))

    def configs(self, pc: ProviderConfig, base: dict[str, str] | None,
                shoot: SplitConfigs | None = None) -> SplitConfigs:
        """The base configs merged with the shoot's (per name the shoot's wins), validated and split.

        ``shoot``: the shoot's configs as extension.shoot_config validated them (the garden's admission runs
        the same check); only the base configs the shoot does not replace are validated here.
        """
        if shoot is None:
            shoot = shoot_configs(pc)
        origin_base = f"configmap {self.settings.configmap_namespace}/{c.CONFIGS_CONFIGMAP_NAME}"
        base_only = {name: text for name, text in (base or {}).items() if name not in pc.configs}
        return with_base(shoot, validate_and_split(base_only, where=origin_base))

    def images(self, cluster: ClusterInfo) -> dict[str, str]:
        vector = imagevector.load(self.settings.images_file, self.settings.imagevector_overwrite)
        version = cluster.kubernetes_version or None
        return {
            "installer": imagevector.find_image(vector, c.INSTALLER_IMAGE, target_version=version).image(),
            "agent": imagevector.find_image(vector, c.AGENT_IMAGE, target_version=version).image(),
        }

    # -- components --------------------------------------------------------------------------------

    def installation(self, namespace: str, cluster: ClusterInfo, pc: ProviderConfig, split: SplitConfigs,
                     mode: str, rollout: tuple[str, ...] = (), webhook_values: dict[str, Any] | None = None,
                     config_plan: config_rollout.Plan | None = None) -> Installation:
        """The installation with these values; ``rollout`` tells apart rollouts of equal values (a new deletion).
        ``config_plan`` stages the dynamic configs (extension.config_rollout); without one they go out as they are."""
        values = InstallationValues(
            images=self.images(cluster), mode=mode, static_configs=split.static,
            dynamic_configs=config_plan.good if config_plan is not None else split.dynamic,
            config_rollout=config_plan.chart_values() if config_plan is not None else {},
            node_selector=pc.node_selector, worker_pools=pc.worker_pools, metrics_port=self.settings.metrics_port,
            metrics_allow=(cluster.pods_cidr,) if self.settings.metrics_allow_pod_network and cluster.pods_cidr else (),
            uninstall_max_unavailable=self.settings.uninstall_max_unavailable,
            kubernetes_version=cluster.kubernetes_version or None,
            frontend=pc.mode, pool_frontends=dict(pc.pool_modes))
        values = dataclasses.replace(values, digest=node_proof.rollout_digest(values.installer_inputs(), *rollout))
        # After the digest: the webhook (and its certificate renewals) is no rollout of the nodes.
        values = dataclasses.replace(values, webhook=webhook_values or {})
        return Installation(self.apis, namespace, values, helm=self.settings.helm, chart_dir=self.settings.chart_dir,
                            poll_interval=self.settings.poll_interval)

    def uninstallation(self, extension: dict[str, Any], cluster: ClusterInfo) -> Installation:
        """The installation in uninstall mode: no configs, only the same node selection as the install.

        Its digest names this deletion (uid and deletionTimestamp): records of an earlier uninstall never count.
        """
        try:
            pc = self.provider_config(extension)
        except ConfigurationError:
            pc = ProviderConfig()
        meta = extension["metadata"]
        return self.installation(meta["namespace"], cluster,
                                 ProviderConfig(node_selector=pc.node_selector, worker_pools=pc.worker_pools),
                                 SplitConfigs(), UNINSTALL,
                                 rollout=(str(meta.get("uid", "")), str(meta.get("deletionTimestamp", ""))))

    def installed(self, namespace: str) -> ManagedResourceComponent:
        """The installation as deployed, without values: enough to inspect and destroy it."""
        return ManagedResourceComponent(self.apis, namespace, c.MANAGED_RESOURCE_NAME,
                                        poll_interval=self.settings.poll_interval)

    def components(self, namespace: str) -> list[ManagedResourceComponent]:
        return [self.installed(namespace), self.monitoring(namespace)]

    def monitoring(self, namespace: str) -> Monitoring:
        return Monitoring(self.apis, namespace, metrics_port=self.settings.metrics_port,
                          poll_interval=self.settings.poll_interval)

    def destroy_all(self, namespace: str) -> None:
        for component in self.components(namespace):
            component.destroy()
        node_proof.delete_shoot_access(self.apis, namespace)
        webhook.chart_values(self.apis, namespace, enabled=False)  # its certificates go too

    # -- operations --------------------------------------------------------------------------------

    def reconcile(self, extension: dict[str, Any], cluster: ClusterInfo) -> ReconcileResult:
        ns = extension["metadata"]["namespace"]
        # Validate first even when hibernated: a bad config is reported early either way.
        # The shoot's part is the check the garden's admission runs (extension/shoot_config.py).
        shoot = check_shoot_config((extension.get("spec") or {}).get("providerConfig"),
                                   shoot_pools=list(cluster.worker_pools),
                                   kubernetes_version=cluster.kubernetes_version)
        pc = shoot.provider_config
        base = self.base_configs()  # the one read of the ConfigMap in this reconcile
        split = self.configs(pc, base, shoot.configs)  # and the one validation of the base configs
        warnings = (*shoot.pool_warnings, *split.notes)
        used = base_configs.digest(base) if base is not None else None
        if cluster.hibernated:
            log.info("shoot is hibernated, nothing deployed", extra={"namespace": ns})
            return ReconcileResult("Shoot is hibernated; nothing deployed", warnings, used)
        selection = node_proof.Selection(dict(pc.node_selector), tuple(pc.worker_pools))
        plan = config_rollout.plan(config_rollout.RolloutState.from_extension(extension), split.dynamic,
                                   now=time.time(), observe=lambda: self.shoot.nodes_and_records(ns),
                                   selection=selection, timeout=self.settings.config_rollout_timeout)
        installation = self.installation(ns, cluster, pc, split, INSTALL,
                                         webhook_values=webhook.chart_values(
                                             self.apis, ns, pc.webhook_enabled,
                                             CARotation(cluster.ca_rotation_phase, cluster.ca_rotation_started)),
                                         config_plan=plan)
        node_proof.ensure_shoot_access(self.apis, ns)  # the health check reads the nodes' records with it
        secret = installation.deploy()
        self.monitoring(ns).deploy()
        # After the deploy: what is recorded is what the shoot is given.
        status.patch_status(self.apis, ns, extension["metadata"]["name"],
                            {"state": {config_rollout.STATE_KEY: plan.state.to_status()}})
        objects = len(installation.render().objects)
        log.info("deployed managed resource", extra={"namespace": ns, "secret": secret, "objects": objects})
        if plan.stopped:  # the rest of the shoot's configuration is deployed; the refused configs are not
            raise ConfigurationError("providerConfig.configs", plan.stopped)
        if plan.waiting:
            raise WaitingError(plan.waiting, self.settings.poll_interval)
        detail = f"Deployed {objects} objects via secret {secret}" + (f"; {plan.note}" if plan.note else "")
        return ReconcileResult(detail, warnings, used)

    def restore(self, extension: dict[str, Any], cluster: ClusterInfo) -> ReconcileResult:
        return self.reconcile(extension, cluster)

    def force_delete(self, extension: dict[str, Any]) -> str:
        self.destroy_all(extension["metadata"]["namespace"])
        return "Force-deleted managed resources without waiting"

    def delete(self, extension: dict[str, Any], cluster: ClusterInfo, runtime_seconds: float) -> str:
        """Roll the installer into uninstall mode, wait for every selected node's proof, then delete.

        The ManagedResource's conditions and pod readiness are not proof (a restarted kubelet reports
        a pod Ready before its first probe); the nodes' records are (extension/node_proof.py). A node
        whose uninstall failed keeps the Extension in a retried error naming it, with the
        ManagedResource (and so the uninstalling DaemonSet) still in place.
        """
        ns = extension["metadata"]["namespace"]
        if cluster.force_deletion:
            return self.force_delete(extension)
        if cluster.hibernated or cluster.shoot_deleting:
            self.destroy_all(ns)
            return f"Shoot is {'hibernated' if cluster.hibernated else 'being deleted'}; " \
                   "deleted managed resources without waiting"
        installed = self.installed(ns)
        mr = installed.current()
        if mr is None:  # nothing (left) on the nodes: clean up leftovers and finish
            self.destroy_all(ns)
            return "Deleted managed resources"
        if (mr.get("metadata") or {}).get("deletionTimestamp"):
            installed.wait_cleanup()
        uninstallation = self.uninstallation(extension, cluster)
        node_proof.ensure_shoot_access(self.apis, ns)
        secret = uninstallation.deploy()
        unreachable = None
        try:
            # The nodes' records first: they name the nodes that are not done, or failed.
            try:
                proof = self.shoot.check(ns, noderecord.UNINSTALLED, uninstallation.values.digest,
                                         uninstallation.selection(), self.settings.poll_interval)
            except node_proof.ShootUnreachable as err:
                if runtime_seconds <= self.settings.uninstall_timeout:
                    raise
                # Still unreachable past the timeout: no record can be read, so gardener-resource-manager's
                # health of the uninstall rollout (below) decides alone instead of keeping the finalizer forever.
                unreachable = err
            # Necessary too: gardener-resource-manager applied this rollout (nothing else of it is failing).
            uninstallation.wait_healthy(secret, "uninstall rollout")
        except (node_proof.NodesNotDone, NotHealthy) as err:
            if runtime_seconds > self.settings.uninstall_timeout:
                raise UninstallTimeout(
                    f"uninstall not finished after {int(runtime_seconds)}s "
                    f"(timeout {int(self.settings.uninstall_timeout)}s): {err}; still waiting",
                    self.settings.poll_interval) from None
            raise
        if unreachable is not None:
            log.warning(f"uninstall timeout passed and {unreachable}; the uninstall rollout is healthy, "
                        "deleting managed resources without the nodes' records", extra={"namespace": ns})
        else:
            log.info("every selected node recorded its uninstall, deleting managed resources",
                     extra={"namespace": ns, "nodes": proof.nodes})
        self.destroy_all(ns)
        installed.wait_cleanup()
        if unreachable is not None:
            return ("Deleted managed resources after the uninstall timeout: the uninstall rollout is healthy, "
                    f"the nodes' records could not be read ({unreachable})")
        return "Uninstalled cri-resmgr and deleted managed resources"

    def migrate(self, extension: dict[str, Any]) -> str:
        """Keep the shoot's objects, drop our ManagedResources from this seed."""
        components = self.components(extension["metadata"]["namespace"])
        for component in components:
            component.destroy(keep_objects=True)
        for component in components:
            component.wait_cleanup()
        return "Migrated: managed resources removed with keepObjects, node workload untouched"
