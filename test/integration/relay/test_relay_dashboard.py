"""Every metric the extension's shoot dashboard queries is one the real cri-resmgr serves on /metrics."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from extension.dashboard import DASHBOARD_KEY, dashboard_configmap, metric_names

pytestmark = pytest.mark.integration

# Sample names prometheus_client exposes per metric type (the family name is the metric's base name).
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
            "gauge": ("",), "summary": ("", "_sum", "_count", "_created"), "info": ("_info",)}


def exposed_sample_names(text: str) -> set[str]:
    """Names a query can use: from each family's TYPE, so a labelled metric with no samples yet counts too."""
    return {family.name + suffix for family in text_string_to_metric_families(text)
            for suffix in SUFFIXES.get(family.type, ("",))}


def test_dashboard_queries_only_metrics_the_relay_exposes(relay):
    exposed = exposed_sample_names(relay.metrics_text())
    assert "cri_resmgr_requests_total" in exposed  # the parsing itself works on this exposition

    doc = json.loads(dashboard_configmap("shoot--p--s")["data"][DASHBOARD_KEY])
    used = metric_names(doc)
    assert used, "the dashboard queries no metric"
    assert used <= exposed, f"not served by cri-resmgr: {sorted(used - exposed)}"
    # latency, errors and policy decisions each have a panel
    titles = " ".join(p["title"].lower() for p in doc["panels"])
    for topic in ("latency", "error", "policy"):
        assert topic in titles
