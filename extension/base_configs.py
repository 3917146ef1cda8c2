"""Propagating a change of the operator's base configs to every Extension of our type.

The base configs are the ConfigMap gardener-extension-cri-resmgr-configs (the ControllerDeployment's
``values.configs``), read afresh, once, by every reconcile. A change of it alone is no event on any Extension,
so each successful reconcile records the digest of the base configs it used on the Extension,
and a periodic check per Extension compares that record with the ConfigMap's current digest. An
Extension that is behind gets Gardener's ``gardener.cloud/operation: reconcile`` annotation, exactly as
gardenlet would set it, and the normal reconcile path does the rest.

Level-based, not edge-based: a change made while the operator was down (or restarting) is still seen,
and no pod restart is needed. Extensions being processed are skipped (as the Go extension did); their
record then still names the old digest, so they are triggered once that operation has finished.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from extension import constants as c
from extension.gardener import status
from extension.gardener.kube import Apis, is_conflict, is_not_found

log = logging.getLogger("extension.base_configs")

# The digest of the base configs the last successful reconcile started from. (Not under kopf's
# annotation prefix, which kopf leaves out of its diffs; nothing reacts to this key anyway.)
RECONCILED_ANNOTATION = "base-configs.cri-resmgr.extensions.gardener.cloud/reconciled"


def digest(data: dict[str, str] | None) -> str:
    """A short digest of the ConfigMap's data (key order does not matter)."""
    return hashlib.sha256(json.dumps(data or {}, sort_keys=True).encode()).hexdigest()[:16]


def read(apis: Apis, namespace: str) -> dict[str, str] | None:
    """The base configs ConfigMap's data, or None when it does not exist."""
    try:
        cm = apis.core.read_namespaced_config_map(c.CONFIGS_CONFIGMAP_NAME, namespace)
    except Exception as err:
        if is_not_found(err):
            return None
        raise
    return dict(cm.data or {})


class BaseConfigsDigest:
    """The digest of the base configs ConfigMap, read at most once per ``max_age`` seconds for the checks.

    A reconcile reads the ConfigMap itself and hands the digest of what it used to ``observe()``, which
    refreshes the cached value, so the periodic check never compares a reconcile's record with an older
    digest than the one recorded.
    """

    def __init__(self, apis: Apis, namespace: str | None, *, max_age: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.apis = apis
        self.namespace = namespace
        self.max_age = max_age
        self.clock = clock
        self._lock = threading.Lock()
        self._value: str | None = None
        self._read_at: float | None = None

    def fresh(self) -> str | None:
        """The current digest, or None when no base configs are configured or the ConfigMap is missing."""
        if not self.namespace:
            return None
        data = read(self.apis, self.namespace)
        # A missing ConfigMap: the reconcile reports it; nothing to compare with.
        return self.observe(digest(data) if data is not None else None)

    def observe(self, value: str | None) -> str | None:
        """Take a digest read just now (by a reconcile) as the current one."""
        with self._lock:
            self._value, self._read_at = value, self.clock()
        return value

    def cached(self) -> str | None:
        with self._lock:
            if self._read_at is not None and self.clock() - self._read_at < self.max_age:
                return self._value
        return self.fresh()


def outdated_reason(body: dict[str, Any], current: str | None) -> str | None:
    """Why this Extension should be reconciled for new base configs, or None when it should not (yet).

    Only Extensions whose last successful reconcile recorded a digest are compared: one that was never
    reconciled by this operator gets the current base configs at its first reconcile anyway.
    """
    recorded = status.annotations_of(body).get(RECONCILED_ANNOTATION)
    if current is None or recorded is None or recorded == current:
        return None
    if (body.get("metadata") or {}).get("deletionTimestamp"):
        return None
    if status.operation_annotation(body):
        return None  # an operation (reconcile, migrate, restore, wait-for-state) is already pending
    last = status.last_operation_of(body)
    if last.get("state") == status.PROCESSING:
        return None  # being processed: never raced; checked again after it finished
    if status.is_migrated(body):
        return None
    return f"base configs changed ({recorded} -> {current})"


def request_reconcile(apis: Apis, body: dict[str, Any], reason: str) -> bool:
    """Set gardener.cloud/operation=reconcile, guarded by the resourceVersion that was judged.

    Returns False when the Extension changed meanwhile (it is judged again at the next check).
    """
    meta = body.get("metadata") or {}
    try:
        apis.custom.patch_namespaced_custom_object(
            c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, meta["namespace"], c.EXTENSIONS_PLURAL, meta["name"],
            {"metadata": {"resourceVersion": meta.get("resourceVersion"),
                          "annotations": {c.OPERATION_ANNOTATION: c.OPERATION_RECONCILE}}})
    except Exception as err:
        if is_conflict(err) or is_not_found(err):
            return False
        raise
    log.info(f"requested reconcile: {reason}", extra={"namespace": meta["namespace"], "extension": meta["name"]})
    return True


def record(apis: Apis, namespace: str, name: str, value: str | None) -> None:
    """Note on the Extension which base configs its successful reconcile used."""
    if value is None:
        return
    apis.custom.patch_namespaced_custom_object(
        c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, namespace, c.EXTENSIONS_PLURAL, name,
        {"metadata": {"annotations": {RECONCILED_ANNOTATION: value}}})
