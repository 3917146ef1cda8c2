"""When an Extension needs processing: operation annotations, generations, migration, Cluster changes."""

from __future__ import annotations

import pytest
from unit.extension.gardener.bodies import ext

from extension.gardener import triggers


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
    assert triggers.health_applies(ext(last=("Reconcile", "Succeeded")))


@pytest.mark.parametrize("body", [
    ext("migrate", last=("Reconcile", "Succeeded")),  # migration requested, not started
    ext(last=("Migrate", "Processing")),
    ext(last=("Migrate", "Error")),
    ext(last=("Migrate", "Succeeded")),
    ext("restore", last=("Migrate", "Succeeded")),  # until the restore has run
])
def test_no_health_check_while_a_migration_is_pending_or_done(body):
    # gardener extensions/pkg/controller/healthcheck/reconciler.go isInMigration
    assert not triggers.health_applies(body)


def test_cluster_change_triggers_only_in_ignore_mode():
    body = ext(last=("Reconcile", "Succeeded"))
    body["metadata"]["annotations"].update({triggers.CLUSTER_DIGEST_ANNOTATION: "b",
                                            triggers.RECONCILED_DIGEST_ANNOTATION: "a"})
    assert triggers.needs_processing(body, ignore_operation_annotation=True)
    assert not triggers.needs_processing(body)
    body["metadata"]["annotations"][triggers.RECONCILED_DIGEST_ANNOTATION] = "b"
    assert not triggers.needs_processing(body, ignore_operation_annotation=True)


@pytest.mark.parametrize("cls,ours", [(None, True), ("shoot", True), ("seed", False), ("garden", False)])
def test_only_extensions_of_class_shoot_or_unset_are_ours(cls, ours):
    # gardener pkg/controllerutils/predicate/predicate.go HasClass(): unset means shoot
    body = ext("reconcile")
    if cls is not None:
        body["spec"]["class"] = cls
    assert triggers.is_ours(body) is ours
    assert triggers.needs_processing(body) is ours
    assert triggers.holds_finalizer(body) is ours
    assert triggers.health_applies(body) is ours
