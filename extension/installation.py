"""The installation component: the internal chart (installer and agent DaemonSets, ConfigMaps, RBAC) for the shoot.

Its values say which images run, in which mode the installer runs (install or uninstall), which
configs go onto the nodes and which nodes are selected; ``deploy()`` renders the chart with helm
and writes it as the shoot-class ManagedResource ``extension-runtime-cri-resmgr``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import noderecord
from extension import chart_render, node_proof
from extension import constants as c
from extension.component import ManagedResourceComponent
from extension.gardener import managed_resources
from extension.gardener.kube import Apis
from extension.provider_config import AUTO, NRI, RELAY

INSTALL, UNINSTALL = "install", "uninstall"
# The installer DaemonSets of an install, one per mode that some nodes are in (providerConfig mode/modes):
# name, and the installer's mode on those nodes (installer/cli.py). The relay's keeps its old name.
INSTALLERS = ((RELAY, "cri-resmgr-installer", INSTALL), (NRI, "cri-resmgr-installer-nri", NRI),
              (AUTO, "cri-resmgr-installer-auto", AUTO))
# The node label the nri and auto installers set once the node is ready for the NRI plugin (the relay gone,
# containerd's NRI on); the plugin DaemonSet selects on it (installer/node_label.py writes it).
FRONTEND_LABEL = "cri-resmgr.gardener.cloud/frontend"


def pool_constraint(default: str, pool_modes: dict[str, str], wanted: set[str]) -> tuple[str, list[str]] | None:
    """The node affinity on the worker pool label that picks the nodes whose mode is in ``wanted``:
    ("", []) every selected node, ("In"|"NotIn", pools), or None when no node is in such a mode."""
    if default in wanted:
        others = sorted(p for p, m in pool_modes.items() if m not in wanted)
        return ("NotIn", others) if others else ("", [])
    mine = sorted(p for p, m in pool_modes.items() if m in wanted)
    return ("In", mine) if mine else None


@dataclass(frozen=True)
class InstallationValues:
    """What the internal chart is rendered with."""

    images: dict[str, str]
    mode: str = INSTALL
    static_configs: dict[str, str] = field(default_factory=dict)
    dynamic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    worker_pools: tuple[str, ...] = ()
    metrics_port: int = 8891
    # Networks besides the node itself that may read cri-resmgr's /metrics (its --metrics-allow).
    metrics_allow: tuple[str, ...] = ()
    kubernetes_version: str | None = None
    # The chart's webhook section (extension.webhook.chart_values); empty: disabled.
    webhook: dict[str, Any] = field(default_factory=dict)
    # A staged config rollout (extension.config_rollout.Plan.chart_values): candidate configs and cri-resmgr-rollout.
    config_rollout: dict[str, Any] = field(default_factory=dict)
    # Identifies the rollout in each node's record (extension/node_proof.py); empty: no proof expected.
    digest: str = ""
    uninstall_max_unavailable: str | int = "50%"
    # providerConfig mode and modes: relay, nri or auto, for the shoot and per worker pool.
    frontend: str = RELAY
    pool_frontends: dict[str, str] = field(default_factory=dict)

    def installer_inputs(self) -> dict[str, Any]:
        """What the installer applies on a node; its digest names the rollout in the node records. Dynamic configs
        (the agent's) and the roll's pace stay out: a change of those must not re-roll every node's installer."""
        inputs: dict[str, Any] = {
            "image": self.images.get("installer"), "mode": self.mode, "static": self.static_configs,
            "nodeSelector": self.node_selector, "workerPools": list(self.worker_pools),
            "metrics": {"port": self.metrics_port, "allow": list(self.metrics_allow)}}
        if self.frontend != RELAY or any(m != RELAY for m in self.pool_frontends.values()):
            # Only when a node leaves the relay: an all-relay shoot keeps its digest, so upgrading the
            # extension does not re-roll its nodes.
            inputs["frontend"] = {"default": self.frontend, "pools": dict(sorted(self.pool_frontends.items()))}
        return inputs

    def installers(self) -> list[dict[str, Any]]:
        """The installer DaemonSets: in uninstall mode one on every selected node, else one per mode in use."""
        if self.mode == UNINSTALL:
            return [{"name": "cri-resmgr-installer", "mode": UNINSTALL, "poolOperator": "", "pools": []}]
        result = []
        for frontend, name, mode in INSTALLERS:
            constraint = pool_constraint(self.frontend, self.pool_frontends, {frontend})
            if constraint is not None:
                result.append({"name": name, "mode": mode, "poolOperator": constraint[0], "pools": constraint[1]})
        return result

    def nri_plugin(self) -> dict[str, Any]:
        """The chart's nriPlugin section: the cri-resmgr --frontend nri DaemonSet on the nodes of the nri and
        auto pools that their installer labelled ready for it."""
        constraint = pool_constraint(self.frontend, self.pool_frontends, {NRI, AUTO})
        if self.mode == UNINSTALL or constraint is None:
            return {"enabled": False}
        return {"enabled": True, "poolOperator": constraint[0], "pools": constraint[1],
                "frontendLabel": FRONTEND_LABEL, "extraArgs": self.plugin_extra_args()}

    def plugin_extra_args(self) -> list[str]:
        """EXTRA_OPTIONS as the plugin's arguments (split and checked as the installer does for the relay's
        unit), then --metrics-allow."""
        from resmgr.config.extra_options import parse_extra_options

        args = parse_extra_options(self.static_configs.get("EXTRA_OPTIONS", ""))
        if self.metrics_allow:
            args.append(f"--metrics-allow={','.join(self.metrics_allow)}")
        return args

    def chart_values(self) -> dict[str, Any]:
        return {
            "images": self.images,
            "installer": {"mode": self.mode, "digest": self.digest,
                          "uninstallMaxUnavailable": self.uninstall_max_unavailable},
            "configs": {"static": self.static_configs, "dynamic": self.dynamic_configs,
                        "candidate": self.config_rollout.get("candidate") or {},
                        "rollout": self.config_rollout.get("rollout") or {}},
            "nodeSelector": self.node_selector,
            "workerPools": list(self.worker_pools),
            "metrics": {"port": self.metrics_port, "allow": list(self.metrics_allow)},
            "webhook": self.webhook or {"enabled": False},
            "installers": self.installers(),
            "nriPlugin": self.nri_plugin(),
        }


@dataclass(frozen=True)
class Rendered:
    manifests: str
    objects: list[dict[str, Any]]


class Installation(ManagedResourceComponent):
    def __init__(self, apis: Apis, namespace: str, values: InstallationValues, *, helm: str, chart_dir: Path,
                 poll_interval: float) -> None:
        super().__init__(apis, namespace, c.MANAGED_RESOURCE_NAME, poll_interval=poll_interval)
        self.values = values
        self.helm = helm
        self.chart_dir = chart_dir
        self._rendered: Rendered | None = None

    def render(self) -> Rendered:
        """``helm template`` of the chart with these values (once); raises ConfigurationError if it is too big."""
        if self._rendered is None:
            text = chart_render.helm_template(self.helm, self.chart_dir, c.INSTALLATION_RELEASE_NAME,
                                              c.SHOOT_SYSTEM_NAMESPACE, self.values.chart_values(),
                                              kube_version=self.values.kubernetes_version)
            objects = chart_render.split_manifests(text)
            chart_render.check_size(text)
            self._rendered = Rendered(manifests=text, objects=objects)
        return self._rendered

    def spec(self) -> managed_resources.ManagedResourceSpec:
        data = {c.SECRET_DATA_KEY: self.render().manifests.encode()}
        return managed_resources.for_shoot(self.namespace, self.name, data, self.proof_annotations())

    def selection(self) -> node_proof.Selection:
        return node_proof.Selection(dict(self.values.node_selector), tuple(self.values.worker_pools))

    def proof_annotations(self) -> dict[str, str]:
        """What every selected node's record must say, for the health check (the MR carries it)."""
        if not self.values.digest:
            return {}
        state = noderecord.UNINSTALLED if self.values.mode == UNINSTALL else noderecord.INSTALLED
        return {node_proof.EXPECTED_STATE_ANNOTATION: state, node_proof.EXPECTED_DIGEST_ANNOTATION: self.values.digest,
                node_proof.EXPECTED_SELECTION_ANNOTATION: self.selection().to_annotation()}
