"""The monitoring component: seed-side scrape config for cri-resmgr's metrics, as a seed-class ManagedResource.

Prometheus in the shoot namespace reaches the metrics Service in the shoot
through the shoot's kube-apiserver proxy, as the Go extension configured it.
"""

from __future__ import annotations

import yaml

from extension import constants as c
from extension.component import ManagedResourceComponent
from extension.gardener import managed_resources
from extension.gardener.kube import Apis

SCRAPE_CONFIGMAP_NAME = "extension-cri-resmgr-monitoring-scrape-config"
METRICS_SERVICE = "cri-resmgr-metrics"


def scrape_config(metrics_port: int = 8891) -> list[dict]:
    token = "/var/run/secrets/gardener.cloud/shoot/token/token"
    ca = "/etc/prometheus/seed/ca.crt"
    return [{
        "job_name": "cri-resmgr",
        "honor_timestamps": True,
        "scrape_interval": "1m",
        "scrape_timeout": "10s",
        "metrics_path": "/metrics",
        "scheme": "https",
        "authorization": {"type": "Bearer", "credentials_file": token},
        "tls_config": {"ca_file": ca, "insecure_skip_verify": False},
        "kubernetes_sd_configs": [{
            "role": "endpoints",
            "api_server": "https://kube-apiserver:443",
            "namespaces": {"names": ["kube-system"]},
            "authorization": {"type": "Bearer", "credentials_file": token},
            "tls_config": {"ca_file": ca, "insecure_skip_verify": False},
        }],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_service_name", "__meta_kubernetes_endpoint_port_name"],
             "action": "keep", "regex": f"{METRICS_SERVICE};metrics"},
            {"source_labels": ["__meta_kubernetes_pod_node_name"], "target_label": "node"},
            {"target_label": "__address__", "replacement": "kube-apiserver:443"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "regex": "(.+)",
             "target_label": "__metrics_path__",
             "replacement": f"/api/v1/namespaces/kube-system/pods/${{1}}:{metrics_port}/proxy/metrics"},
            {"target_label": "type", "replacement": "shoot"},
        ],
    }]


def scrape_configmap(namespace: str, metrics_port: int = 8891) -> str:
    """The ConfigMap (as YAML) that the seed's monitoring stack picks up by label."""
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": SCRAPE_CONFIGMAP_NAME,
            "namespace": namespace,
            "labels": {"extensions.gardener.cloud/configuration": "monitoring"},
        },
        "data": {"scrape_config": yaml.safe_dump(scrape_config(metrics_port), sort_keys=False)},
    }
    return yaml.safe_dump(cm, sort_keys=False)


class Monitoring(ManagedResourceComponent):
    """The monitoring component: the scrape config as the seed-class ManagedResource of the shoot namespace."""

    def __init__(self, apis: Apis, namespace: str, *, metrics_port: int, poll_interval: float) -> None:
        super().__init__(apis, namespace, c.MONITORING_MANAGED_RESOURCE_NAME, poll_interval=poll_interval)
        self.metrics_port = metrics_port

    def spec(self) -> managed_resources.ManagedResourceSpec:
        data = {"scrape-config.yaml": scrape_configmap(self.namespace, self.metrics_port).encode()}
        return managed_resources.for_seed(self.namespace, self.name, data)
