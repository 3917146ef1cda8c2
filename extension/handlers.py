"""kopf wiring: the handler registry, kopf's settings, the diff base, retries and the heartbeat.

Each handler is one call into ``extension.reconciler.Reconciler``, which decides the operation and
writes the status; here its RetryLater becomes kopf's TemporaryError, and unexpected errors (API
hiccups) retry with our backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Iterator
from typing import Any

import kopf

from extension import constants as c
from extension.errors import RetryLater
from extension.gardener import heartbeat, triggers
from extension.reconciler import OperatorSettings, Reconciler, backoff

log = logging.getLogger("extension.handlers")

# kopf's own bookkeeping lives in annotations under this prefix (the CRD prunes unknown status fields).
ANNOTATION_PREFIX = "cri-resmgr.extensions.gardener.cloud"


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
    # No kopf peering (a seed-global CRD): replicas coordinate by leader election on a Lease
    # (extension/leader_election.py), and only the leader runs kopf.
    ks.peering.standalone = True
    return ks


def build_registry(h: Reconciler) -> kopf.OperatorRegistry:
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

    # A changed base-configs ConfigMap is no event on any Extension: each one compares its record with it.
    @kopf.timer(**res, id="base-configs", interval=h.settings.base_configs_interval, when=wants_health,
                initial_delay=min(5.0, h.settings.base_configs_interval))
    def on_base_configs(body: Any, **_: Any) -> None:
        if not h.check_base_configs(dict(body)):
            h.check_config_rollout(dict(body))

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
    except RetryLater as err:
        raise kopf.TemporaryError(str(err), delay=err.delay) from None
    except Exception as err:
        log.warning(f"retrying after error: {err}")
        raise kopf.TemporaryError(str(err), delay=backoff(retry, settings)) from err


async def _heartbeat_loop(h: Reconciler) -> None:
    while True:
        try:
            await asyncio.to_thread(_renew_heartbeat, h)
        except Exception as err:  # a missed beat is logged and retried next interval
            log.warning(f"heartbeat renewal failed: {err}")
        await asyncio.sleep(h.settings.heartbeat_interval)


def _renew_heartbeat(h: Reconciler) -> None:
    if h.settings.heartbeat_namespace:
        heartbeat.renew(h.apis, h.settings.heartbeat_namespace, c.EXTENSION_NAME, int(h.settings.heartbeat_interval))
