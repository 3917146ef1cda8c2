"""The monitoring component: a prometheus-operator ScrapeConfig for the shoot's Prometheus, our alerts
(extension.alerts) and the shoot dashboard, as the seed-class ManagedResource of the shoot namespace.

Gardener's convention for components running in the shoot (docs/extensions/logging-and-monitoring.md):
a ``monitoring.coreos.com/v1alpha1`` ScrapeConfig labelled ``prometheus: shoot`` in the shoot namespace; the
shoot Prometheus scrapes through the shoot's kube-apiserver proxy with the ``shoot-access-prometheus-shoot``
token, as Gardener's ClusterComponentScrapeConfigSpec does. It replaces the legacy scrape ConfigMap
(``extensions.gardener.cloud/configuration: monitoring``), which current Gardener no longer reads.
Deploying it also removes the Go extension's monitoring ManagedResource (``extension.go_migration``).
"""

from __future__ import annotations

from typing import Any

import yaml

from extension import constants as c
from extension.alerts import prometheus_rule
from extension.component import ManagedResourceComponent
from extension.dashboard import dashboard_configmap
from extension.gardener import managed_resources
from extension.gardener.kube import Apis
from extension.go_migration import remove_go_monitoring

SCRAPE_CONFIG_NAME = "shoot-cri-resmgr"
METRICS_SERVICE = "cri-resmgr-metrics"
# Gardener's shoot-access secret for the shoot Prometheus (prometheus/shoot.AccessSecretName) and its key.
ACCESS_SECRET = {"name": "shoot-access-prometheus-shoot", "key": "token"}
JOB_NAME = c.SCRAPE_JOB_NAME


def scrape_config(namespace: str, metrics_port: int = 8891) -> dict[str, Any]:
    """The ScrapeConfig: endpoints of the cri-resmgr-metrics Service in the shoot's kube-system, i.e. the
    cri-resmgr-agent pods, scraped through the API server's pod proxy. Each agent answers with its node's
    relay exposition (read from the relay's unix socket); the proxied request reaches the agent from
    vpn-shoot's pod IP, the only pods the NetworkPolicy cri-resmgr-agent-metrics admits."""
    # Gardener's own helper skips verification too: Prometheus is not given the shoot's CA bundle.
    tls = {"insecureSkipVerify": True}
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "ScrapeConfig",
        "metadata": {"name": SCRAPE_CONFIG_NAME, "namespace": namespace, "labels": {"prometheus": "shoot"}},
        "spec": {
            "honorLabels": False,
            "scheme": "HTTPS",
            "scrapeInterval": "1m",
            "scrapeTimeout": "10s",
            "tlsConfig": tls,
            "authorization": {"credentials": ACCESS_SECRET},
            "kubernetesSDConfigs": [{
                "role": "Endpoints",
                "apiServer": "https://kube-apiserver",
                "namespaces": {"names": ["kube-system"]},
                "authorization": {"credentials": ACCESS_SECRET},
                "tlsConfig": tls,
            }],
            "relabelings": [
                {"action": "replace", "replacement": JOB_NAME, "targetLabel": "job"},
                {"targetLabel": "type", "replacement": "shoot"},
                {"sourceLabels": ["__meta_kubernetes_service_name", "__meta_kubernetes_endpoint_port_name"],
                 "action": "keep", "regex": f"{METRICS_SERVICE};metrics"},
                {"sourceLabels": ["__meta_kubernetes_pod_name"], "targetLabel": "pod"},
                {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"},
                {"targetLabel": "__address__", "replacement": "kube-apiserver:443"},
                {"sourceLabels": ["__meta_kubernetes_pod_name"], "regex": "(.+)", "targetLabel": "__metrics_path__",
                 "replacement": f"/api/v1/namespaces/kube-system/pods/${{1}}:{metrics_port}/proxy/metrics"},
            ],
            # Only the relay's own series; the Python process metrics stay out of the shoot Prometheus.
            "metricRelabelings": [
                {"sourceLabels": ["__name__"], "action": "keep", "regex": "^cri_resmgr_.+$"},
            ],
        },
    }


def objects(namespace: str, metrics_port: int = 8891) -> list[dict[str, Any]]:
    return [scrape_config(namespace, metrics_port), prometheus_rule(namespace), dashboard_configmap(namespace)]


class Monitoring(ManagedResourceComponent):
    """The monitoring component: ScrapeConfig, PrometheusRule and dashboard as the seed-class ManagedResource of
    the shoot namespace."""

    def __init__(self, apis: Apis, namespace: str, *, metrics_port: int, poll_interval: float) -> None:
        super().__init__(apis, namespace, c.MONITORING_MANAGED_RESOURCE_NAME, poll_interval=poll_interval)
        self.metrics_port = metrics_port

    def spec(self) -> managed_resources.ManagedResourceSpec:
        data = {"monitoring.yaml": yaml.safe_dump_all(objects(self.namespace, self.metrics_port),
                                                      sort_keys=False).encode()}
        return managed_resources.for_seed(self.namespace, self.name, data)

    def deploy(self) -> str:
        secret = super().deploy()
        # Ours now scrapes the relays; the Go extension's would be left orphaned next to it.
        remove_go_monitoring(self.apis, self.namespace)
        return secret
