"""Gardener's operation type and the status documents (lastOperation, lastError, observedGeneration)."""

from __future__ import annotations

import pytest
from unit.extension.gardener.bodies import ext

from extension.gardener import status


@pytest.mark.parametrize("body,expected", [
    (ext(), "Create"),
    (ext(last=("Create", "Error")), "Create"),
    (ext(last=("Create", "Succeeded")), "Reconcile"),
    (ext(last=("Reconcile", "Error")), "Reconcile"),
    (ext("migrate", last=("Reconcile", "Succeeded")), "Migrate"),
    (ext(last=("Migrate", "Processing")), "Migrate"),
    (ext("restore", last=("Migrate", "Succeeded")), "Restore"),
    (ext(last=("Restore", "Error")), "Restore"),
    (ext(deleting=True, last=("Reconcile", "Succeeded")), "Delete"),
])
def test_operation_type(body, expected):
    assert status.compute_operation_type(body) == expected


def test_status_documents():
    ok = status.succeeded_status("Reconcile", "done", 3)
    assert ok["lastOperation"]["state"] == "Succeeded" and ok["lastOperation"]["progress"] == 100
    assert ok["lastError"] is None and ok["observedGeneration"] == 3
    err = status.error_status("Create", "bad", 1, ["ERR_CONFIGURATION_PROBLEM"])
    assert err["lastOperation"]["state"] == "Error"
    assert err["lastError"]["description"] == "bad" and err["lastError"]["codes"] == ["ERR_CONFIGURATION_PROBLEM"]
    assert status.processing_status("Delete", "x")["lastOperation"]["state"] == "Processing"
