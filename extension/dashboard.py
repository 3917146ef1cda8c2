"""The Plutono dashboard for cri-resmgr's relay metrics, shipped as Gardener's shoot dashboard ConfigMap.

Gardener's shoot Plutono loads every ConfigMap in the shoot namespace labelled
``dashboard.monitoring.gardener.cloud/shoot: "true"`` (docs/extensions/logging-and-monitoring.md).
Every query uses only metrics that ``resmgr/relay/metrics.py`` exposes (a test holds the names to the
relay's real /metrics); the shoot Prometheus gets them through the ScrapeConfig of ``extension.monitoring``.
"""

from __future__ import annotations

import json
import re
from typing import Any

DASHBOARD_CONFIGMAP_NAME = "extension-cri-resmgr-dashboards"
DASHBOARD_LABEL = "dashboard.monitoring.gardener.cloud/shoot"
DASHBOARD_KEY = "cri-resmgr.json"
_METRIC = re.compile(r"\bcri_resmgr_[a-z0-9_]+")

# (title, unit, query, legend): one time series panel each.
PANELS: tuple[tuple[str, str, str, str], ...] = (
    ("CRI requests per second by method", "reqps",
     "sum by (method) (rate(cri_resmgr_requests_total[5m]))", "{{method}}"),
    ("CRI request latency through the relay, p99", "s",
     "histogram_quantile(0.99, sum by (method, le) (rate(cri_resmgr_request_duration_seconds_bucket[5m])))",
     "{{method}}"),
    ("CRI request latency through the relay, p50", "s",
     "histogram_quantile(0.5, sum by (method, le) (rate(cri_resmgr_request_duration_seconds_bucket[5m])))",
     "{{method}}"),
    ("CRI error responses by method and code", "reqps",
     'sum by (method, code) (rate(cri_resmgr_requests_total{code!="OK"}[5m]))', "{{method}} {{code}}"),
    ("Relay errors by kind", "ops",
     "sum by (method, kind) (rate(cri_resmgr_relay_errors_total[5m]))", "{{method}} {{kind}}"),
    ("Policy errors (request passed through unchanged)", "ops",
     "sum by (method, phase) (rate(cri_resmgr_policy_errors_total[5m]))", "{{method}} {{phase}}"),
    ("Policy decisions applied to running containers (UpdateContainerResources)", "ops",
     "sum by (result) (rate(cri_resmgr_container_updates_total[5m]))", "{{result}}"),
    ("Containers per pool (or balloon)", "short",
     "sum by (node, policy, pool) (cri_resmgr_pool_containers)", "{{node}} {{policy}} {{pool}}"),
    ("CPUs per pool (or balloon)", "short",
     "sum by (node, policy, pool) (cri_resmgr_pool_cpus)", "{{node}} {{policy}} {{pool}}"),
    ("CPU requests per pool (or balloon)", "short",
     "sum by (node, policy, pool) (cri_resmgr_pool_requested_cpus)", "{{node}} {{policy}} {{pool}}"),
    ("Configs refused (relay kept the last good one)", "short",
     "sum by (node, source) (increase(cri_resmgr_config_errors_total[1h]))", "{{node}} {{source}}"),
    ("Refused /metrics connections", "short",
     "sum by (node, reason) (increase(cri_resmgr_metrics_refused_total[1h]))", "{{node}} {{reason}}"),
)


def _panel(index: int, title: str, unit: str, query: str, legend: str) -> dict[str, Any]:
    return {
        "id": index + 1, "type": "timeseries", "title": title, "datasource": "prometheus",
        "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": "A", "expr": query, "legendFormat": legend}],
    }


def dashboard() -> dict[str, Any]:
    """The dashboard JSON document (Grafana 7 / Plutono schema)."""
    return {
        "title": "cri-resmgr relay", "uid": "cri-resmgr-relay", "editable": False, "schemaVersion": 27,
        "tags": ["cri-resmgr", "extension"], "time": {"from": "now-3h", "to": "now"}, "refresh": "1m",
        "panels": [_panel(i, *p) for i, p in enumerate(PANELS)],
    }


def metric_names(doc: dict[str, Any] | None = None) -> set[str]:
    """Every metric (sample) name the dashboard's queries use."""
    doc = doc or dashboard()
    return {name for panel in doc["panels"] for t in panel["targets"] for name in _METRIC.findall(t["expr"])}


def dashboard_configmap(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": DASHBOARD_CONFIGMAP_NAME, "namespace": namespace, "labels": {DASHBOARD_LABEL: "true"}},
        "data": {DASHBOARD_KEY: json.dumps(dashboard(), indent=2, sort_keys=True)},
    }
