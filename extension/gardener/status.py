"""Gardener's status contract for Extension resources.

lastOperation (type, state, progress, description, lastUpdateTime), lastError
and observedGeneration, written through the status subresource. Nothing else
of ours is ever written under status.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from extension import constants as c
from extension.gardener.kube import Apis, is_conflict, is_not_found

# LastOperationType / LastOperationState values.
CREATE, RECONCILE, DELETE, MIGRATE, RESTORE = "Create", "Reconcile", "Delete", "Migrate", "Restore"
PROCESSING, SUCCEEDED, ERROR = "Processing", "Succeeded", "Error"
ERR_CONFIGURATION_PROBLEM = "ERR_CONFIGURATION_PROBLEM"


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def annotations_of(body: dict[str, Any]) -> dict[str, str]:
    return (body.get("metadata") or {}).get("annotations") or {}


def operation_annotation(body: dict[str, Any]) -> str:
    return annotations_of(body).get(c.OPERATION_ANNOTATION, "")


def last_operation_of(body: dict[str, Any]) -> dict[str, Any]:
    return (body.get("status") or {}).get("lastOperation") or {}


def compute_operation_type(body: dict[str, Any]) -> str:
    """Gardener's ComputeOperationType for an extension object."""
    op = operation_annotation(body)
    last = last_operation_of(body)
    if op == c.OPERATION_MIGRATE:
        return MIGRATE
    if op == c.OPERATION_RESTORE:
        return RESTORE
    if (body.get("metadata") or {}).get("deletionTimestamp"):
        return DELETE
    if not last:
        return CREATE
    if last.get("state") != SUCCEEDED and last.get("type") in (CREATE, MIGRATE, RESTORE):
        return last["type"]
    return RECONCILE


def is_migrated(body: dict[str, Any]) -> bool:
    last = last_operation_of(body)
    return last.get("type") == MIGRATE and last.get("state") == SUCCEEDED


def in_migration(body: dict[str, Any]) -> bool:
    """A migration is pending or done: the migrate annotation, or a last operation of type Migrate in any state
    (gardener v1.149.3 extensions/pkg/controller/healthcheck/reconciler.go isInMigration)."""
    return operation_annotation(body) == c.OPERATION_MIGRATE or last_operation_of(body).get("type") == MIGRATE


def should_skip_migrated(body: dict[str, Any]) -> bool:
    """A migrated object is left alone unless it is migrated again or restored."""
    return is_migrated(body) and compute_operation_type(body) not in (MIGRATE, RESTORE)


def last_operation(op_type: str, state: str, progress: int, description: str) -> dict[str, Any]:
    return {"type": op_type, "state": state, "progress": progress, "description": description,
            "lastUpdateTime": now()}


def processing_status(op_type: str, description: str) -> dict[str, Any]:
    return {"lastOperation": last_operation(op_type, PROCESSING, 1, description)}


def succeeded_status(op_type: str, description: str, generation: int | None) -> dict[str, Any]:
    status: dict[str, Any] = {"lastOperation": last_operation(op_type, SUCCEEDED, 100, description),
                              "lastError": None}
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def error_status(op_type: str, description: str, generation: int | None,
                 codes: list[str] | None = None) -> dict[str, Any]:
    last_error: dict[str, Any] = {"description": description, "lastUpdateTime": now()}
    if codes:
        last_error["codes"] = codes
    status: dict[str, Any] = {"lastOperation": last_operation(op_type, ERROR, 50, description),
                              "lastError": last_error}
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def patch_status(apis: Apis, namespace: str, name: str, status: dict[str, Any]) -> None:
    """Merge-patch the status subresource; a vanished object is not an error."""
    try:
        apis.custom.patch_namespaced_custom_object_status(
            c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, namespace, c.EXTENSIONS_PLURAL, name,
            {"status": status})
    except Exception as err:
        if not is_not_found(err):
            raise


def remove_operation_annotation(apis: Apis, namespace: str, name: str) -> None:
    try:
        apis.custom.patch_namespaced_custom_object(
            c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, namespace, c.EXTENSIONS_PLURAL, name,
            {"metadata": {"annotations": {c.OPERATION_ANNOTATION: None}}})
    except Exception as err:
        if not is_not_found(err):
            raise


def remove_finalizer(apis: Apis, namespace: str, name: str, finalizer: str = c.FINALIZER, *,
                     drop_operation_annotation: bool = False) -> None:
    """Remove our finalizer (and optionally the operation annotation) in one guarded patch.

    One patch matters after a migration: kopf must never see the object without our finalizer
    while the migrate annotation is still there, or it would put the finalizer back.
    """
    for _ in range(5):
        try:
            obj = apis.custom.get_namespaced_custom_object(
                c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, namespace, c.EXTENSIONS_PLURAL, name)
        except Exception as err:
            if is_not_found(err):
                return
            raise
        meta = obj.get("metadata") or {}
        finalizers = meta.get("finalizers") or []
        has_annotation = c.OPERATION_ANNOTATION in (meta.get("annotations") or {})
        if finalizer not in finalizers and not (drop_operation_annotation and has_annotation):
            return
        patch: dict[str, Any] = {"finalizers": [f for f in finalizers if f != finalizer],
                                 "resourceVersion": meta.get("resourceVersion")}
        if drop_operation_annotation and has_annotation:
            patch["annotations"] = {c.OPERATION_ANNOTATION: None}
        try:
            apis.custom.patch_namespaced_custom_object(
                c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, namespace, c.EXTENSIONS_PLURAL, name,
                {"metadata": patch})
            return
        except Exception as err:
            if is_not_found(err):
                return
            if not is_conflict(err):
                raise
    raise RuntimeError(f"could not remove finalizer {finalizer} from {namespace}/{name}: too many conflicts")
