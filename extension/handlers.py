"""kopf wiring: map Extension events and Gardener's operation annotations onto the actuator.

Handlers are thin: they re-read the Extension (the event body may be stale),
decide the operation like Gardener's extension reconciler, write
lastOperation/lastError/observedGeneration, and leave retries to kopf.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import kopf

from extension import constants as c
from extension import health, heartbeat, status, triggers
from extension.actuator import Actuator, UninstallTimeout
from extension.cluster import ClusterInfo, ClusterNotFound, cluster_digest, missing_cluster, read_cluster
from extension.errors import ConfigurationError, WaitingError
from extension.kube import Apis, is_not_found

log = logging.getLogger("extension.handlers")

# kopf's own bookkeeping lives in annotations under this prefix (the CRD prunes unknown status fields).
ANNOTATION_PREFIX = "cri-resmgr.extensions.gardener.cloud"
# Longest wait before a configuration error is checked again.
CONFIG_RETRY_MAX = 30.0


@dataclass
class OperatorSettings:
    ignore_operation_annotation: bool = False
    max_concurrent_reconciles: int = 10
    health_interval: float = 30.0
    heartbeat_interval: float = 30.0
    heartbeat_namespace: str | None = None
    retry_delay_min: float = 5.0
    retry_delay_max: float = 60.0
    peering_name: str | None = c.EXTENSION_NAME
    peering_priority: int | None = None
    peering_lifetime: int = 60


def backoff(retry: int, settings: OperatorSettings) -> float:
    return min(settings.retry_delay_max, settings.retry_delay_min * (2 ** min(retry, 16)))


class HashedSpecDiffBase(kopf.AnnotationsDiffBaseStorage):
    """Track a digest of spec instead of the spec itself.

    providerConfig may hold up to 1 MiB of configs, far over the 256 KiB
    annotation budget; the handlers re-read the object, so a digest suffices
    to notice that spec changed.
    """

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        essence = dict(super().build(body=body, extra_fields=extra_fields))
        spec = essence.pop("spec", None)
        digest = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()
        essence["spec"] = {"type": (spec or {}).get("type"), "sha256": digest}
        return essence


def kopf_settings(settings: OperatorSettings) -> kopf.OperatorSettings:
    ks = kopf.OperatorSettings()
    ks.persistence.finalizer = c.FINALIZER
    ks.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    ks.persistence.diffbase_storage = HashedSpecDiffBase(prefix=ANNOTATION_PREFIX, key="last-handled-configuration")
    ks.execution.max_workers = max(1, settings.max_concurrent_reconciles)
    # kopf would post a Kubernetes Event for every retry, including routine waits; the JSON logs
    # (and lastOperation/lastError) carry that information without flooding the seed with Events.
    ks.posting.enabled = False
    if settings.peering_name:
        ks.peering.name = settings.peering_name
        ks.peering.mandatory = True
        # Distinct priorities make exactly one replica active; equal ones would both work.
        ks.peering.lifetime = settings.peering_lifetime
        ks.peering.priority = (settings.peering_priority if settings.peering_priority is not None
                               else random.randint(1, 2**31 - 1))
    else:
        ks.peering.standalone = True
    return ks


class Handlers:
    """The operations behind the kopf handlers, callable without kopf."""

    def __init__(self, apis: Apis, actuator: Actuator, settings: OperatorSettings) -> None:
        self.apis = apis
        self.actuator = actuator
        self.settings = settings

    def _fresh(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.apis.custom.get_namespaced_custom_object(
                c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, namespace, c.EXTENSIONS_PLURAL, name)
        except Exception as err:
            if is_not_found(err):
                return None
            raise

    def _fail(self, ns: str, name: str, op_type: str, what: str, err: Exception, generation: int | None,
              delay: float) -> kopf.TemporaryError:
        codes = [status.ERR_CONFIGURATION_PROBLEM] if isinstance(err, ConfigurationError) else None
        description = f"{what}: {err}"
        status.patch_status(self.apis, ns, name, status.error_status(op_type, description, generation, codes))
        log.error(description, extra={"namespace": ns, "extension": name, "operation": op_type})
        return kopf.TemporaryError(description, delay=delay)

    def change(self, namespace: str, name: str, retry: int = 0) -> str | None:
        """Create/update/resume: reconcile, restore or migrate as Gardener's reconciler would."""
        ex = self._fresh(namespace, name)
        if ex is None or not triggers.needs_processing(
                ex, ignore_operation_annotation=self.settings.ignore_operation_annotation):
            return None
        try:
            cluster = read_cluster(self.apis, namespace)
        except ClusterNotFound as err:
            raise kopf.TemporaryError(str(err), delay=backoff(retry, self.settings)) from None
        if cluster.shoot_failed:
            log.info("Stop reconciling Extension of failed Shoot", extra={"namespace": namespace, "extension": name})
            return None
        op_type = status.compute_operation_type(ex)
        if op_type == status.MIGRATE:
            return self._migrate(ex, retry)
        if status.operation_annotation(ex) == c.OPERATION_RESTORE:
            return self._run(ex, cluster, op_type, retry, restore=True)
        return self._run(ex, cluster, op_type, retry, restore=False)

    def _run(self, ex: dict[str, Any], cluster: ClusterInfo, op_type: str, retry: int, *, restore: bool) -> str:
        ns, name = ex["metadata"]["namespace"], ex["metadata"]["name"]
        generation = ex["metadata"].get("generation")
        verb = "restore" if restore else "reconcile"
        if not restore and status.operation_annotation(ex) == c.OPERATION_RECONCILE:
            # Gardener: the reconcile annotation goes before reconciling starts.
            status.remove_operation_annotation(self.apis, ns, name)
        status.patch_status(self.apis, ns, name, status.processing_status(
            op_type, "Restoring Extension resource" if restore else "Reconciling Extension resource"))
        try:
            detail = self.actuator.restore(ex, cluster) if restore else self.actuator.reconcile(ex, cluster)
        except ConfigurationError as err:
            # kopf runs a changed spec only when the pending retry is due, so keep these short:
            # a fixed providerConfig (or base ConfigMap) is picked up within CONFIG_RETRY_MAX seconds.
            raise self._fail(ns, name, op_type, f"Unable to {verb} Extension resource", err, generation,
                             min(CONFIG_RETRY_MAX, backoff(retry, self.settings))) from None
        except Exception as err:
            raise self._fail(ns, name, op_type, f"Unable to {verb} Extension resource", err, generation,
                             backoff(retry, self.settings)) from None
        done = "Successfully restored Extension resource" if restore else "Successfully reconciled Extension resource"
        try:
            status.patch_status(self.apis, ns, name, status.succeeded_status(op_type, done, generation))
            if self.settings.ignore_operation_annotation:
                self._set_annotation(ns, name, triggers.RECONCILED_DIGEST_ANNOTATION, cluster.digest)
            if restore:
                # Gardener: the restore annotation goes only after success.
                status.remove_operation_annotation(self.apis, ns, name)
        except Exception as err:
            raise kopf.TemporaryError(f"recording success: {err}", delay=backoff(retry, self.settings)) from None
        log.info(f"{done}: {detail}", extra={"namespace": ns, "extension": name, "operation": op_type})
        return detail

    def _migrate(self, ex: dict[str, Any], retry: int) -> str:
        ns, name = ex["metadata"]["namespace"], ex["metadata"]["name"]
        generation = ex["metadata"].get("generation")
        status.patch_status(self.apis, ns, name,
                            status.processing_status(status.MIGRATE, "Migrate Extension resource."))
        try:
            detail = self.actuator.migrate(ex)
        except WaitingError as err:
            raise kopf.TemporaryError(str(err), delay=err.delay) from None
        except Exception as err:
            raise self._fail(ns, name, status.MIGRATE, "Error migrating Extension resource", err, generation,
                             backoff(retry, self.settings)) from None
        try:
            status.patch_status(self.apis, ns, name, status.succeeded_status(
                status.MIGRATE, "Successfully migrated Extension resource", generation))
            # Gardener: finalizer and then the migrate annotation go; here in one patch (see remove_finalizer).
            status.remove_finalizer(self.apis, ns, name, drop_operation_annotation=True)
        except Exception as err:
            raise kopf.TemporaryError(f"finishing migration: {err}", delay=backoff(retry, self.settings)) from None
        log.info(f"Successfully migrated Extension resource: {detail}", extra={"namespace": ns, "extension": name})
        return detail

    def _set_annotation(self, ns: str, name: str, key: str, value: str) -> None:
        self.apis.custom.patch_namespaced_custom_object(
            c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, ns, c.EXTENSIONS_PLURAL, name,
            {"metadata": {"annotations": {key: value}}})

    def cluster_changed(self, cluster_obj: dict[str, Any]) -> None:
        """--ignore-operation-annotation: note a changed Cluster on its Extensions, which triggers them."""
        ns = (cluster_obj.get("metadata") or {}).get("name")
        if not ns:
            return
        digest = cluster_digest(cluster_obj)
        try:
            items = self.apis.custom.list_namespaced_custom_object(
                c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, ns, c.EXTENSIONS_PLURAL)["items"]
        except Exception as err:
            if is_not_found(err):
                return
            raise
        for ex in items:
            ann = status.annotations_of(ex)
            if not triggers.is_ours(ex) or ann.get(triggers.RECONCILED_DIGEST_ANNOTATION) in (None, digest):
                # Never reconciled yet (the first reconcile reads the Cluster anyway) or up to date.
                continue
            if ann.get(triggers.CLUSTER_DIGEST_ANNOTATION) != digest:
                log.info("Cluster changed, reconciling", extra={"namespace": ns, "extension": ex["metadata"]["name"]})
                self._set_annotation(ns, ex["metadata"]["name"], triggers.CLUSTER_DIGEST_ANNOTATION, digest)

    def delete(self, namespace: str, name: str, runtime_seconds: float, retry: int = 0) -> str | None:
        ex = self._fresh(namespace, name)
        if ex is None or not triggers.holds_finalizer(ex):
            return None
        generation = ex["metadata"].get("generation")
        try:
            cluster = read_cluster(self.apis, namespace)
        except ClusterNotFound:
            cluster = missing_cluster(namespace)
        if cluster.shoot_failed:
            raise kopf.TemporaryError("Shoot has failed; Extension deletion waits for it",
                                      delay=self.settings.retry_delay_max)
        if retry == 0 or status.last_operation_of(ex).get("type") != status.DELETE:
            # Later attempts keep the waiting message instead of flapping back to this one.
            status.patch_status(self.apis, namespace, name,
                                status.processing_status(status.DELETE, "Deleting Extension resource."))
        try:
            detail = self.actuator.delete(ex, cluster, runtime_seconds)
        except WaitingError as err:
            status.patch_status(self.apis, namespace, name, status.processing_status(status.DELETE, str(err)))
            log.info(str(err), extra={"namespace": namespace, "extension": name})
            raise kopf.TemporaryError(str(err), delay=err.delay) from None
        except UninstallTimeout as err:
            raise self._fail(namespace, name, status.DELETE, "Error deleting Extension resource", err, generation,
                             err.delay) from None
        except Exception as err:
            raise self._fail(namespace, name, status.DELETE, "Error deleting Extension resource", err, generation,
                             backoff(retry, self.settings)) from None
        status.patch_status(self.apis, namespace, name, status.succeeded_status(
            status.DELETE, "Successfully deleted Extension resource", generation))
        log.info(f"Successfully deleted Extension resource: {detail}",
                 extra={"namespace": namespace, "extension": name})
        return detail

    def health_check(self, body: dict[str, Any]) -> dict[str, Any] | None:
        ns = body["metadata"]["namespace"]
        if not status.last_operation_of(body):
            return None  # never processed (e.g. wait-for-state): nothing to report yet
        cluster: ClusterInfo | None
        error = None
        try:
            cluster = read_cluster(self.apis, ns)
        except ClusterNotFound as err:
            cluster, error = None, str(err)
        except Exception as err:
            cluster, error = None, f"cannot read Cluster: {err}"
        if cluster is not None and cluster.shoot_failed:
            return None  # Gardener leaves Extensions of failed shoots alone, health included
        return health.check_and_report(self.apis, body, cluster, error)

    def renew_heartbeat(self) -> None:
        if self.settings.heartbeat_namespace:
            heartbeat.renew(self.apis, self.settings.heartbeat_namespace, c.EXTENSION_NAME,
                            int(self.settings.heartbeat_interval))


def build_registry(h: Handlers) -> kopf.OperatorRegistry:
    registry = kopf.OperatorRegistry()
    res = {"group": c.EXTENSIONS_GROUP, "version": c.EXTENSIONS_VERSION, "plural": c.EXTENSIONS_PLURAL,
           "registry": registry}
    # Type filtering happens in the `when` callbacks: kopf's field filters look at the
    # diff essence, which carries only a digest of spec.
    ignore = h.settings.ignore_operation_annotation

    def wants_change(body: Any, **_: Any) -> bool:
        return triggers.needs_processing(dict(body), ignore_operation_annotation=ignore)

    def wants_finalizer(body: Any, **_: Any) -> bool:
        return triggers.holds_finalizer(dict(body))

    def wants_health(body: Any, **_: Any) -> bool:
        return triggers.health_applies(dict(body))

    def on_change(namespace: str, name: str, retry: int, **_: Any) -> None:
        with _retry_on_api_errors(retry, h.settings):
            h.change(namespace, name, retry)

    # One operation function behind resume/create/update; it re-reads and re-decides,
    # so running twice for one event is a no-op.
    kopf.on.resume(**res, id="operation", when=wants_change)(on_change)
    kopf.on.create(**res, id="operation", when=wants_change)(on_change)
    kopf.on.update(**res, id="operation", when=wants_change)(on_change)

    @kopf.on.delete(**res, id="delete", when=wants_finalizer)
    def on_delete(namespace: str, name: str, retry: int, runtime: Any, **_: Any) -> None:
        with _retry_on_api_errors(retry, h.settings):
            h.delete(namespace, name, runtime.total_seconds(), retry)

    @kopf.timer(**res, id="health", interval=h.settings.health_interval, when=wants_health,
                initial_delay=min(5.0, h.settings.health_interval))
    def on_health(body: Any, **_: Any) -> None:
        h.health_check(dict(body))

    if ignore:
        # Gardener's library also watches Clusters in this mode (hibernation, versions, workers).
        @kopf.on.event(c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, c.CLUSTERS_PLURAL, registry=registry)
        def on_cluster(body: Any, type: str | None, **_: Any) -> None:  # noqa: A002 - kopf's name
            if type != "DELETED":
                h.cluster_changed(dict(body))

    @kopf.on.startup(registry=registry)
    async def start_heartbeat(memo: Any, **_: Any) -> None:
        if h.settings.heartbeat_namespace:
            memo.heartbeat = asyncio.create_task(_heartbeat_loop(h))

    @kopf.on.cleanup(registry=registry)
    async def stop_heartbeat(memo: Any, **_: Any) -> None:
        task = getattr(memo, "heartbeat", None)
        if task is not None:
            task.cancel()

    return registry


@contextlib.contextmanager
def _retry_on_api_errors(retry: int, settings: OperatorSettings) -> Iterator[None]:
    """Unexpected errors (API hiccups) retry with our backoff instead of kopf's fixed 60 s."""
    try:
        yield
    except (kopf.TemporaryError, kopf.PermanentError):
        raise
    except Exception as err:
        log.warning(f"retrying after error: {err}")
        raise kopf.TemporaryError(str(err), delay=backoff(retry, settings)) from err


async def _heartbeat_loop(h: Handlers) -> None:
    while True:
        try:
            await asyncio.to_thread(h.renew_heartbeat)
        except Exception as err:  # a missed beat is logged and retried next interval
            log.warning(f"heartbeat renewal failed: {err}")
        await asyncio.sleep(h.settings.heartbeat_interval)
