"""One operation attempt is counted once, with the result its caller reached."""

from __future__ import annotations

import pytest

from extension.metrics import WAITING, ExtensionMetrics


def count(m: ExtensionMetrics, operation: str, result: str) -> float:
    return m.registry.get_sample_value("gardener_extension_cri_resmgr_operations_total",
                                       {"operation": operation, "result": result}) or 0.0


def test_results_of_attempts():
    m = ExtensionMetrics()
    with m.operation("Reconcile"):
        pass
    with pytest.raises(RuntimeError), m.operation("Reconcile"):
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError), m.operation("Delete") as outcome:
        outcome["result"] = WAITING
        raise RuntimeError("retry later")
    assert (count(m, "Reconcile", "succeeded"), count(m, "Reconcile", "error")) == (1, 1)
    assert (count(m, "Delete", "waiting"), count(m, "Delete", "error")) == (1, 0)
    assert m.registry.get_sample_value("gardener_extension_cri_resmgr_operation_duration_seconds_count",
                                       {"operation": "Reconcile"}) == 2
    # Two operators in one process keep separate counts.
    assert count(ExtensionMetrics(), "Reconcile", "succeeded") == 0
