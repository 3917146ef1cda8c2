"""Gardener's operation type, trigger rules, status documents and health mapping."""

from __future__ import annotations

import pytest

from extension.gardener import health, status, triggers
from extension.gardener.managed_resources import data_checksum, reference_annotation_key, secret_name_for


def ext(annotation=None, last=None, generation=1, observed=1, deleting=False, ext_type="cri-resmgr-extension"):
    meta = {"name": "x", "namespace": "ns", "generation": generation, "annotations": {}}
    if annotation:
        meta["annotations"]["gardener.cloud/operation"] = annotation
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    st = {"observedGeneration": observed}
    if last:
        st["lastOperation"] = {"type": last[0], "state": last[1]}
    return {"metadata": meta, "spec": {"type": ext_type}, "status": st}


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


@pytest.mark.parametrize("body,default,ignoring", [
    (ext("reconcile", last=("Reconcile", "Succeeded")), True, True),
    (ext(last=("Reconcile", "Succeeded")), False, False),
    (ext(last=("Reconcile", "Error")), True, True),
    (ext(), True, True),  # never reconciled
    (ext(last=("Reconcile", "Succeeded"), generation=2, observed=1), True, True),
    (ext("wait-for-state"), False, False),
    (ext("migrate", last=("Reconcile", "Succeeded")), True, True),
    (ext("restore", last=("Migrate", "Succeeded")), True, True),
    (ext("reconcile", last=("Migrate", "Succeeded")), False, False),  # migrated: left alone
    (ext("reconcile", ext_type="other"), False, False),
    (ext("reconcile", deleting=True), False, False),
])
def test_needs_processing(body, default, ignoring):
    assert triggers.needs_processing(body) is default
    assert triggers.needs_processing(body, ignore_operation_annotation=True) is ignoring


def test_finalizer_and_health_rules():
    assert triggers.holds_finalizer(ext(last=("Reconcile", "Succeeded")))
    assert not triggers.holds_finalizer(ext(last=("Migrate", "Succeeded")))
    assert triggers.holds_finalizer(ext("restore", last=("Migrate", "Succeeded")))
    assert not triggers.health_applies(ext(deleting=True))


def test_status_documents():
    ok = status.succeeded_status("Reconcile", "done", 3)
    assert ok["lastOperation"]["state"] == "Succeeded" and ok["lastOperation"]["progress"] == 100
    assert ok["lastError"] is None and ok["observedGeneration"] == 3
    err = status.error_status("Create", "bad", 1, ["ERR_CONFIGURATION_PROBLEM"])
    assert err["lastOperation"]["state"] == "Error"
    assert err["lastError"]["description"] == "bad" and err["lastError"]["codes"] == ["ERR_CONFIGURATION_PROBLEM"]
    assert status.processing_status("Delete", "x")["lastOperation"]["state"] == "Processing"


def mr(applied="True", healthy="True", progressing="False", generation=1, observed=1, refs=("s1",)):
    conds = [{"type": t, "status": s, "message": f"{t} {s}"} for t, s in
             (("ResourcesApplied", applied), ("ResourcesHealthy", healthy), ("ResourcesProgressing", progressing))
             if s is not None]
    return {"metadata": {"generation": generation}, "spec": {"secretRefs": [{"name": r} for r in refs]},
            "status": {"observedGeneration": observed, "conditions": conds}}


@pytest.mark.parametrize("obj,hibernated,expected", [
    (mr(), False, ("True", "HealthCheckSuccessful")),
    (mr(), True, ("True", "HealthCheckSuccessful")),
    (None, True, ("True", "HealthCheckSuccessful")),
    (None, False, ("Unknown", "ConditionCheckError")),
    (mr(healthy="False"), False, ("False", "HealthCheckUnsuccessful")),
    (mr(applied="False"), False, ("False", "HealthCheckUnsuccessful")),
    (mr(healthy=None), False, ("False", "HealthCheckUnsuccessful")),
    (mr(progressing="True"), False, ("Progressing", "HealthCheckProgressing")),
    (mr(generation=2), False, ("Progressing", "HealthCheckProgressing")),
])
def test_health_mapping(obj, hibernated, expected):
    st, reason, message = health.assess(obj, hibernated=hibernated)
    assert (st, reason) == expected
    if hibernated:
        assert message == "Shoot is hibernated"


def test_is_healthy_checks_the_secret():
    assert health.is_healthy(mr(), secret_name="s1")
    assert not health.is_healthy(mr(), secret_name="s2")
    assert not health.is_healthy(mr(progressing="True"))


def test_condition_transition_time_moves_only_on_status_change():
    first = health.updated_condition(None, "True", "HealthCheckSuccessful", "ok")
    old = dict(first, lastTransitionTime="2000-01-01T00:00:00Z")
    same = health.updated_condition(old, "True", "HealthCheckSuccessful", "ok")
    assert same["lastTransitionTime"] == "2000-01-01T00:00:00Z"
    changed = health.updated_condition(old, "False", "HealthCheckUnsuccessful", "bad")
    assert changed["lastTransitionTime"] != "2000-01-01T00:00:00Z"
    merged = health.merge_conditions([{"type": "Other"}, old], changed)
    assert [c["type"] for c in merged] == ["Other", "SystemComponentsHealthy"]


def test_secret_naming_is_content_addressed():
    a = {"k": b"one"}
    assert secret_name_for("mr", a) == secret_name_for("mr", dict(a))
    assert secret_name_for("mr", a) != secret_name_for("mr", {"k": b"two"})
    assert secret_name_for("mr", a).startswith("managedresource-mr-") and len(data_checksum(a)) == 64
    assert reference_annotation_key("x").startswith("reference.resources.gardener.cloud/secret-")


def test_cluster_change_triggers_only_in_ignore_mode():
    body = ext(last=("Reconcile", "Succeeded"))
    body["metadata"]["annotations"].update({triggers.CLUSTER_DIGEST_ANNOTATION: "b",
                                            triggers.RECONCILED_DIGEST_ANNOTATION: "a"})
    assert triggers.needs_processing(body, ignore_operation_annotation=True)
    assert not triggers.needs_processing(body)
    body["metadata"]["annotations"][triggers.RECONCILED_DIGEST_ANNOTATION] = "b"
    assert not triggers.needs_processing(body, ignore_operation_annotation=True)


def test_cluster_digest_follows_what_matters():
    from fixtures.seed_api import default_shoot

    from extension.gardener.cluster import cluster_info_from

    base = {"metadata": {"name": "ns"}, "spec": {"shoot": default_shoot("ns")}}
    info = cluster_info_from(base)
    assert info.kubernetes_version == "1.31.1" and info.worker_pools == ("worker",) and not info.hibernated
    hibernated = {"metadata": {"name": "ns"}, "spec": {"shoot": default_shoot("ns", hibernated=True)}}
    assert cluster_info_from(hibernated).hibernated
    assert cluster_info_from(hibernated).digest != info.digest
    assert cluster_info_from(dict(base)).digest == info.digest
