"""Which Extension events lead to work, as Gardener's extension library decides.

Default mode: an operation annotation (reconcile/restore/migrate), a last
operation that did not succeed, or a changed generation. With
--ignore-operation-annotation: a changed generation (or a pending operation).
``wait-for-state`` means: do nothing. A migrated object is left alone unless
it is migrated again or restored.
"""

from __future__ import annotations

from typing import Any

from extension import constants as c
from extension.gardener.status import (
    SUCCEEDED,
    annotations_of,
    in_migration,
    last_operation_of,
    operation_annotation,
    should_skip_migrated,
)

# With --ignore-operation-annotation, Cluster changes are noted on the Extension (the
# digest seen) and compared with the digest of the last successful reconcile.
# (Not under kopf's own annotation prefix: kopf leaves those out of the diff it reacts to.)
CLUSTER_DIGEST_ANNOTATION = "cluster.cri-resmgr.extensions.gardener.cloud/seen"
RECONCILED_DIGEST_ANNOTATION = "cluster.cri-resmgr.extensions.gardener.cloud/reconciled"


def cluster_changed(body: dict[str, Any]) -> bool:
    ann = annotations_of(body)
    seen = ann.get(CLUSTER_DIGEST_ANNOTATION)
    return bool(seen) and seen != ann.get(RECONCILED_DIGEST_ANNOTATION)


# The Extension classes this extension serves: shoot, the default when spec.class is unset (gardener v1.149.3
# pkg/controllerutils/predicate/predicate.go HasClass with no classes; GetExtensionClassOrDefault in
# pkg/api/extensions/v1alpha1/helper/extension.go). Extensions of class seed or garden are not ours.
EXTENSION_CLASSES = ("shoot",)


def is_ours(body: dict[str, Any]) -> bool:
    spec = body.get("spec") or {}
    cls = spec.get("class")
    return spec.get("type") == c.EXTENSION_TYPE and (cls is None or cls in EXTENSION_CLASSES)


def generation_changed(body: dict[str, Any]) -> bool:
    meta = body.get("metadata") or {}
    return meta.get("generation") != (body.get("status") or {}).get("observedGeneration")


def needs_processing(body: dict[str, Any], *, ignore_operation_annotation: bool = False) -> bool:
    """Should a create/update/resume event of this (live) Extension run an operation?"""
    if not is_ours(body) or (body.get("metadata") or {}).get("deletionTimestamp"):
        return False
    op = operation_annotation(body)
    if op == c.OPERATION_WAIT_FOR_STATE:
        return False
    if should_skip_migrated(body):
        return False
    last_ok = last_operation_of(body).get("state") == SUCCEEDED
    if op in (c.OPERATION_MIGRATE, c.OPERATION_RESTORE):
        return True
    if ignore_operation_annotation:
        return generation_changed(body) or not last_ok or op == c.OPERATION_RECONCILE or cluster_changed(body)
    return op == c.OPERATION_RECONCILE or not last_ok or generation_changed(body)


def holds_finalizer(body: dict[str, Any]) -> bool:
    """Our finalizer stays on every Extension of our type except migrated ones."""
    return is_ours(body) and not should_skip_migrated(body)


def health_applies(body: dict[str, Any]) -> bool:
    """Gardener's health reconciler skips Extensions being deleted or in migration (pending or done)."""
    meta = body.get("metadata") or {}
    return is_ours(body) and not meta.get("deletionTimestamp") and not in_migration(body)
