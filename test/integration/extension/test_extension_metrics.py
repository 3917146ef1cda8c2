"""The controller's own metrics (extension/metrics.py), read over HTTP from a running operator."""

from __future__ import annotations

import urllib.request

import pytest
from extension_operator_process import wait_for
from fixtures.seed_api import default_shoot
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.integration

PREFIX = "gardener_extension_cri_resmgr"


def samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(url: str, name: str, **labels: str) -> float:
    """The sample's value; -1 while the operator does not answer yet (it serves metrics as it starts)."""
    try:
        return samples(url).get((name, tuple(sorted(labels.items()))), 0.0)
    except OSError:
        return -1.0


def test_operations_health_checks_and_leadership_are_counted(seed, operator):
    url = operator.metrics_url
    # No leader election here: this process works from the start.
    wait_for(lambda: value(url, f"{PREFIX}_leader") == 1, "leader gauge 1", operator=operator)
    ns = seed.new_namespace(operator.prefix)
    seed.seed_api.create_cluster(ns, shoot=default_shoot(ns))
    before = value(url, f"{PREFIX}_operations_total", operation="Reconcile", result="succeeded")
    seed.create_extension(ns, None)
    wait_for(lambda: value(url, f"{PREFIX}_operations_total", operation="Reconcile", result="succeeded") > before,
             "a succeeded Reconcile counted", operator=operator)
    assert value(url, f"{PREFIX}_operation_duration_seconds_count", operation="Reconcile") >= 1
    # A bad providerConfig is an error attempt (and retried, so counted again).
    errors = value(url, f"{PREFIX}_operations_total", operation="Reconcile", result="error")
    bad = seed.new_namespace(operator.prefix)
    seed.seed_api.create_cluster(bad, shoot=default_shoot(bad))
    seed.create_extension(bad, {"workerPools": "not-a-list"})
    wait_for(lambda: value(url, f"{PREFIX}_operations_total", operation="Reconcile", result="error") > errors,
             "a failed Reconcile counted", operator=operator)
    seed.set_mr_conditions(ns)
    wait_for(lambda: value(url, f"{PREFIX}_health_checks_total", status="True") > 0, "a healthy check counted",
             operator=operator)
