"""The reconciler: decides the operation for an Extension as Gardener's extension reconciler does, runs it on the
actuator, and writes lastOperation, lastError and observedGeneration.

It knows nothing of kopf: an operation that must run again raises RetryLater, which the kopf wiring
(``extension.handlers``) turns into a retry. Every entry point re-reads the Extension (an event body may be
stale), so running one twice for one event is a no-op.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from extension import base_configs, config_rollout, node_proof
from extension import constants as c
from extension.actuator import Actuator, UninstallTimeout
from extension.errors import ConfigurationError, RetryLater, WaitingError
from extension.gardener import health, status, triggers
from extension.gardener.cluster import ClusterInfo, ClusterNotFound, cluster_digest, missing_cluster, read_cluster
from extension.gardener.kube import Apis, is_not_found
from extension.metrics import WAITING, ExtensionMetrics

log = logging.getLogger("extension.handlers")  # the name operators' log queries already use

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
    base_configs_interval: float = 10.0


def backoff(retry: int, settings: OperatorSettings) -> float:
    return min(settings.retry_delay_max, settings.retry_delay_min * (2 ** min(retry, 16)))


class Reconciler:
    """The operations behind the kopf handlers: change, delete, health check, Cluster change."""

    def __init__(self, apis: Apis, actuator: Actuator, settings: OperatorSettings,
                 metrics: ExtensionMetrics | None = None) -> None:
        self.apis = apis
        self.actuator = actuator
        self.settings = settings
        self.metrics = metrics or ExtensionMetrics()
        self.base_configs = base_configs.BaseConfigsDigest(
            apis, actuator.settings.configmap_namespace, max_age=settings.base_configs_interval / 2)
        # Extensions an operation of this process is working on (the periodic checks leave them alone).
        self._busy: set[tuple[str, str]] = set()
        self._busy_lock = threading.Lock()

    @contextlib.contextmanager
    def _working(self, namespace: str, name: str) -> Iterator[None]:
        with self._busy_lock:
            self._busy.add((namespace, name))
        try:
            yield
        finally:
            with self._busy_lock:
                self._busy.discard((namespace, name))

    def is_busy(self, namespace: str, name: str) -> bool:
        with self._busy_lock:
            return (namespace, name) in self._busy

    def _fresh(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.apis.custom.get_namespaced_custom_object(
                c.EXTENSIONS_GROUP, c.EXTENSIONS_VERSION, namespace, c.EXTENSIONS_PLURAL, name)
        except Exception as err:
            if is_not_found(err):
                return None
            raise

    def _fail(self, ns: str, name: str, op_type: str, what: str, err: Exception, generation: int | None,
              delay: float) -> RetryLater:
        codes = [status.ERR_CONFIGURATION_PROBLEM] if isinstance(err, ConfigurationError) else None
        description = f"{what}: {err}"
        status.patch_status(self.apis, ns, name, status.error_status(op_type, description, generation, codes))
        log.error(description, extra={"namespace": ns, "extension": name, "operation": op_type})
        return RetryLater(description, delay=delay)

    def change(self, namespace: str, name: str, retry: int = 0) -> str | None:
        """Create/update/resume: reconcile, restore or migrate as Gardener's reconciler would."""
        with self._working(namespace, name):
            return self._change(namespace, name, retry)

    def _change(self, namespace: str, name: str, retry: int) -> str | None:
        ex = self._fresh(namespace, name)
        if ex is None or not triggers.needs_processing(
                ex, ignore_operation_annotation=self.settings.ignore_operation_annotation):
            return None
        try:
            cluster = read_cluster(self.apis, namespace)
        except ClusterNotFound as err:
            raise RetryLater(str(err), delay=backoff(retry, self.settings)) from None
        if cluster.shoot_failed:
            log.info("Stop reconciling Extension of failed Shoot", extra={"namespace": namespace, "extension": name})
            return None
        op_type = status.compute_operation_type(ex)
        if op_type == status.MIGRATE:
            return self._migrate(ex, retry)
        restore = status.operation_annotation(ex) == c.OPERATION_RESTORE
        with self.metrics.operation(status.RESTORE if restore else status.RECONCILE) as outcome:
            return self._run(ex, cluster, op_type, retry, restore=restore, outcome=outcome)

    def _run(self, ex: dict[str, Any], cluster: ClusterInfo, op_type: str, retry: int, *, restore: bool,
             outcome: dict[str, str] | None = None) -> str:
        ns, name = ex["metadata"]["namespace"], ex["metadata"]["name"]
        generation = ex["metadata"].get("generation")
        verb = "restore" if restore else "reconcile"
        if not restore and status.operation_annotation(ex) == c.OPERATION_RECONCILE:
            # Gardener: the reconcile annotation goes before reconciling starts.
            status.remove_operation_annotation(self.apis, ns, name)
        status.patch_status(self.apis, ns, name, status.processing_status(
            op_type, "Restoring Extension resource" if restore else "Reconciling Extension resource"))
        try:
            result = self.actuator.restore(ex, cluster) if restore else self.actuator.reconcile(ex, cluster)
        except WaitingError as err:
            # Deployed, and progressing (a staged config rollout waits for its canaries): still Processing.
            if outcome is not None:
                outcome["result"] = WAITING
            status.patch_status(self.apis, ns, name, status.processing_status(op_type, str(err)))
            log.info(str(err), extra={"namespace": ns, "extension": name, "operation": op_type})
            raise RetryLater(str(err), delay=err.delay) from None
        except ConfigurationError as err:
            # kopf runs a changed spec only when the pending retry is due, so keep these short:
            # a fixed providerConfig (or base ConfigMap) is picked up within CONFIG_RETRY_MAX seconds.
            raise self._fail(ns, name, op_type, f"Unable to {verb} Extension resource", err, generation,
                             min(CONFIG_RETRY_MAX, backoff(retry, self.settings))) from None
        except Exception as err:
            raise self._fail(ns, name, op_type, f"Unable to {verb} Extension resource", err, generation,
                             backoff(retry, self.settings)) from None
        done = "Successfully restored Extension resource" if restore else "Successfully reconciled Extension resource"
        for w in result.warnings:  # what the shoot owner should fix; never a failed reconcile (it blocks the shoot)
            log.warning(w, extra={"namespace": ns, "extension": name})
        description = "; ".join([done, *(f"warning: {w}" for w in result.warnings)])
        try:
            status.patch_status(self.apis, ns, name, status.succeeded_status(op_type, description, generation))
            if self.settings.ignore_operation_annotation:
                self._set_annotation(ns, name, triggers.RECONCILED_DIGEST_ANNOTATION, cluster.digest)
            # The digest of exactly the base configs this reconcile used (the periodic check compares with it).
            base_configs.record(self.apis, ns, name, self.base_configs.observe(result.base_configs_digest))
            if restore:
                # Gardener: the restore annotation goes only after success.
                status.remove_operation_annotation(self.apis, ns, name)
        except Exception as err:
            raise RetryLater(f"recording success: {err}", delay=backoff(retry, self.settings)) from None
        log.info(f"{done}: {result.detail}", extra={"namespace": ns, "extension": name, "operation": op_type})
        return result.detail

    def _migrate(self, ex: dict[str, Any], retry: int) -> str:
        with self.metrics.operation(status.MIGRATE) as outcome:
            return self._migrate_attempt(ex, retry, outcome)

    def _migrate_attempt(self, ex: dict[str, Any], retry: int, outcome: dict[str, str]) -> str:
        ns, name = ex["metadata"]["namespace"], ex["metadata"]["name"]
        generation = ex["metadata"].get("generation")
        status.patch_status(self.apis, ns, name,
                            status.processing_status(status.MIGRATE, "Migrate Extension resource."))
        try:
            detail = self.actuator.migrate(ex)
        except WaitingError as err:
            outcome["result"] = WAITING
            raise RetryLater(str(err), delay=err.delay) from None
        except Exception as err:
            raise self._fail(ns, name, status.MIGRATE, "Error migrating Extension resource", err, generation,
                             backoff(retry, self.settings)) from None
        try:
            status.patch_status(self.apis, ns, name, status.succeeded_status(
                status.MIGRATE, "Successfully migrated Extension resource", generation))
            # Gardener: finalizer and then the migrate annotation go; here in one patch (see remove_finalizer).
            status.remove_finalizer(self.apis, ns, name, drop_operation_annotation=True)
        except Exception as err:
            raise RetryLater(f"finishing migration: {err}", delay=backoff(retry, self.settings)) from None
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

    def check_base_configs(self, body: dict[str, Any]) -> bool:
        """Periodic, per Extension: request a reconcile when the base configs changed since its last one."""
        meta = body.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        current = self.base_configs.cached()
        if base_configs.outdated_reason(body, current) is None or self.is_busy(ns, name):
            return False
        ex = self._fresh(ns, name)  # the event body may be stale: judge the live object
        reason = base_configs.outdated_reason(ex, current) if ex is not None else None
        if reason is None or self.is_busy(ns, name):
            return False
        return base_configs.request_reconcile(self.apis, ex, reason)

    def check_config_rollout(self, body: dict[str, Any]) -> bool:
        """Periodic, per Extension: request a reconcile while a config rollout waits for its canaries, so that it is
        judged again (promoted or stopped) as Gardener's reconciler requeues a wait. kopf's retry of the waiting
        reconcile was seen lost on the landscape when an operation annotation had started it (a base configs
        change): the canaries applied, and nothing promoted the candidate."""
        if not self._rollout_waits(body):
            return False
        meta = body.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        ex = self._fresh(ns, name)  # the event body may be stale: judge the live object
        if ex is None or not self._rollout_waits(ex) or self.is_busy(ns, name):
            return False
        state = config_rollout.RolloutState.from_extension(ex)
        return base_configs.request_reconcile(self.apis, ex, f"config rollout {state.attempt if state else ''} "
                                                             "waits for its canaries")

    @staticmethod
    def _rollout_waits(body: dict[str, Any]) -> bool:
        state = config_rollout.RolloutState.from_extension(body)
        return (state is not None and bool(state.candidate) and not state.stopped
                and status.last_operation_of(body).get("state") == status.PROCESSING
                and not status.operation_annotation(body))

    def delete(self, namespace: str, name: str, runtime_seconds: float, retry: int = 0) -> str | None:
        with self._working(namespace, name):
            return self._delete(namespace, name, runtime_seconds, retry)

    def _delete(self, namespace: str, name: str, runtime_seconds: float, retry: int) -> str | None:
        ex = self._fresh(namespace, name)
        if ex is None or not triggers.holds_finalizer(ex):
            return None
        try:
            cluster = read_cluster(self.apis, namespace)
        except ClusterNotFound:
            cluster = missing_cluster(namespace)
        if cluster.shoot_failed:
            raise RetryLater("Shoot has failed; Extension deletion waits for it",
                                      delay=self.settings.retry_delay_max)
        with self.metrics.operation(status.DELETE) as outcome:
            return self._delete_attempt(ex, cluster, runtime_seconds, retry, outcome)

    def _delete_attempt(self, ex: dict[str, Any], cluster: ClusterInfo, runtime_seconds: float, retry: int,
                        outcome: dict[str, str]) -> str:
        namespace, name = ex["metadata"]["namespace"], ex["metadata"]["name"]
        generation = ex["metadata"].get("generation")
        if retry == 0 or status.last_operation_of(ex).get("type") != status.DELETE:
            # Later attempts keep the waiting message instead of flapping back to this one.
            status.patch_status(self.apis, namespace, name,
                                status.processing_status(status.DELETE, "Deleting Extension resource."))
        try:
            detail = self.actuator.delete(ex, cluster, runtime_seconds)
        except WaitingError as err:
            outcome["result"] = WAITING
            status.patch_status(self.apis, namespace, name, status.processing_status(status.DELETE, str(err)))
            log.info(str(err), extra={"namespace": namespace, "extension": name})
            raise RetryLater(str(err), delay=err.delay) from None
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
        condition = health.check_and_report(self.apis, body, cluster, error,
                                            node_check=lambda mr: node_proof.health(self.actuator.shoot, ns, mr))
        self.metrics.health_checked(str(condition.get("status")))
        return condition
