"""Seed-side scrape config for cri-resmgr's metrics, deployed as a seed-class ManagedResource.

Prometheus in the shoot namespace reaches the metrics Service in the shoot
through the shoot's kube-apiserver proxy, as the Go extension configured it.
"""

from __future__ import annotations

import yaml

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
