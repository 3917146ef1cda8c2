"""The alerts the shoot Prometheus evaluates for cri-resmgr: a ``monitoring.coreos.com/v1`` PrometheusRule.

Gardener's contract for extensions (docs/extensions/logging-and-monitoring.md at v1.149.3, "PrometheusRule"):
a PrometheusRule labelled ``prometheus: shoot`` in the shoot namespace is loaded by the shoot Prometheus.
Gardener's own shoot components do the same: pkg/component/networking/vpn/shoot/shoot.go builds its rule with
monitoringutils.ConfigObjectMeta(name, namespace, shoot.Label), i.e. name ``shoot-<name>``, the shoot
namespace and the label ``prometheus: shoot``; their rule labels (service, severity, type, visibility) follow
pkg/component/observability/monitoring/prometheus/shoot/assets/prometheusrules/worker/kube-kubelet.yaml.

Series: ours come from the ScrapeConfig of extension.monitoring (job ``cri-resmgr``, one target per node's
agent, labelled ``node`` and ``pod``); installer readiness comes from the shoot's kube-state-metrics, which
watches the shoot's kube-system and whose allowlist keeps ``kube_pod_status_ready`` and ``kube_pod_info``
(pkg/component/observability/monitoring/kubestatemetrics/resources.go, shootMetricAllowlist).
docs/usage/alerts.md says what each alert means and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from extension import constants as c

PROMETHEUS_RULE_NAME = "shoot-cri-resmgr"
GROUP_NAME = "cri-resmgr.rules"
INSTALLER_POD_PREFIX = "cri-resmgr-installer-"  # the installer DaemonSet's pods (installer-daemonset.yaml)
# kubelet's PLEG relists pods and containers every second: a relay that kubelet uses sees these all the time.
KUBELET_LISTING = "ListPodSandbox|ListContainers"
NRI_CALLS = "nri/.+"  # the methods of the NRI plugin's requests (resmgr/nri/plugin.py)

_OURS = f'job="{c.SCRAPE_JOB_NAME}"'


def _new_or_increased(series: str, window: str) -> str:
    """Series of a counter that went up within ``window``. The relay creates a labelled counter at its first
    event, so the first error appears at 1 and increase() alone would not see it: a series present now and
    absent ``window`` ago counts as well."""
    return f"increase({series}[{window}]) > 0 or ({series} unless {series} offset {window})"


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str

    def rule(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.for_:
            rule["for"] = self.for_
        return rule | {
            "labels": {"service": "cri-resmgr", "severity": self.severity, "type": "shoot", "visibility": "all"},
            "annotations": {"summary": self.summary, "description": self.description},
        }


ALERTS: tuple[Alert, ...] = (
    Alert(
        "CriResmgrRelayDown",
        # The agent answers 503 when the relay's metrics socket does not answer: the relay is down.
        f"up{{{_OURS}}} == 0",
        "10m", "critical",
        "cri-resmgr on a node does not answer",
        "The relay on node {{ $labels.node }} has not answered its metrics for 10 minutes (agent pod "
        "{{ $labels.pod }}). The installer's supervisor moves kubelet back to containerd within a minute of the "
        "relay falling silent: the node runs its workloads without resource management.",
    ),
    Alert(
        "CriResmgrKubeletBypassesRelay",
        # kubelet's PLEG lists through the runtime every second; none of it on an answering relay means kubelet
        # talks to containerd directly (the supervisor's fallback, or its configuration was rewritten).
        f"sum by (node) (up{{{_OURS}}} == 1) unless on (node) "
        f'sum by (node) (rate(cri_resmgr_requests_total{{{_OURS}, method=~"{KUBELET_LISTING}"}}[10m]) > 0) '
        # NRI mode: kubelet talks to containerd by design; containerd's first call (Configure, Synchronize) leaves
        # an nri/ series for as long as the plugin runs (docs/usage/nri.md).
        f'unless on (node) sum by (node) (cri_resmgr_requests_total{{{_OURS}, method=~"{NRI_CALLS}"}})',
        "15m", "critical",
        "kubelet on a node does not use cri-resmgr",
        "cri-resmgr on node {{ $labels.node }} answers, but kubelet has sent it no ListPodSandbox or "
        "ListContainers call for 10 minutes: kubelet runs on containerd directly (the installer fell back), and "
        "new containers are not placed by the policy.",
    ),
    Alert(
        "CriResmgrInstallerNotReady",
        'kube_pod_status_ready{job="kube-state-metrics", namespace="kube-system", '
        f'pod=~"{INSTALLER_POD_PREFIX}.+", condition="true"}} == 0',
        "15m", "critical",
        "A cri-resmgr installer pod is not ready",
        "Installer pod {{ $labels.pod }} has not been ready for 15 minutes: its node has no container runtime "
        "that answers, or this rollout's install failed there. The node record (Lease "
        "kube-system/cri-resmgr-node-<node>) and the pod's log say why.",
    ),
    Alert(
        "CriResmgrConfigRefused",
        f"sum by (node, source) ({_new_or_increased(f'cri_resmgr_config_errors_total{{{_OURS}}}', '1h')})",
        "", "warning",
        "cri-resmgr refused a configuration",
        "cri-resmgr on node {{ $labels.node }} refused its {{ $labels.source }} configuration within the last "
        "hour and runs on the last good config (or policy none).",
    ),
    Alert(
        "CriResmgrPlacementsUnpinned",
        # A failed CreateContainer hook passes the request through unchanged: the container runs unpinned.
        "sum by (node) ("
        + _new_or_increased(f'cri_resmgr_policy_errors_total{{{_OURS}, method="CreateContainer"}}', "30m") + ")",
        "", "warning",
        "Containers started without a placement",
        "The policy on node {{ $labels.node }} failed for containers created within the last 30 minutes; they "
        "were created as kubelet asked, without the policy's CPU and memory placement.",
    ),
    Alert(
        "CriResmgrPlacementDrift",
        # Checked every --resync-period (30 s): a cpuset written behind the relay's back, at every check.
        f"max by (node) (cri_resmgr_placement_drift_containers{{{_OURS}}}) > 0",
        "30m", "warning",
        "Containers run on other CPUs than the policy decided",
        "On node {{ $labels.node }}, {{ $value }} container(s) have had a cgroup cpuset other than the policy's "
        "decision for 30 minutes: something writes cpusets behind cri-resmgr (another CPU manager, a "
        "script), or its updates do not take.",
    ),
    Alert(
        "CriResmgrRelayErrors",
        f"sum by (node) (rate(cri_resmgr_relay_errors_total{{{_OURS}}}[10m])) "
        f"/ sum by (node) (rate(cri_resmgr_requests_total{{{_OURS}}}[10m])) > 0.01",
        "15m", "warning",
        "cri-resmgr cannot handle CRI requests as intended",
        "More than 1% of the CRI requests relayed on node {{ $labels.node }} met a relay error (undecodable "
        "message, containerd unavailable, failed container update) for 15 minutes.",
    ),
)


def rule_groups() -> list[dict[str, Any]]:
    return [{"name": GROUP_NAME, "rules": [a.rule() for a in ALERTS]}]


def prometheus_rule(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": PROMETHEUS_RULE_NAME, "namespace": namespace, "labels": {"prometheus": "shoot"}},
        "spec": {"groups": rule_groups()},
    }
