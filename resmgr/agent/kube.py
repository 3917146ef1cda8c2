"""Kubernetes API access for the agent: client setup and list+watch loops over plain dicts."""

from __future__ import annotations

import json
import logging
import threading
import warnings
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("resmgr.agent.kube")

ADJUSTMENT_GROUP = "criresmgr.intel.com"
ADJUSTMENT_VERSION = "v1alpha1"
ADJUSTMENT_PLURAL = "adjustments"
WATCH_TIMEOUT_S = 300
OPTIONAL_RETRY_S = 60.0


class KubeConfigError(RuntimeError):
    """Neither --kubeconfig nor the in-cluster service account works; the message says why."""


def load_api_client(kubeconfig: str | None) -> client.ApiClient:
    """An ApiClient from ``kubeconfig``, or the in-cluster service account when it is None."""
    # A kubeconfig with insecure-skip-tls-verify would warn on every request; once is enough.
    warnings.filterwarnings("once", category=urllib3.exceptions.InsecureRequestWarning)
    try:
        if kubeconfig:
            return config.new_client_from_config(config_file=kubeconfig)
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(cfg)
    except Exception as exc:  # ConfigException, YAML errors, missing files/keys: all mean "cannot configure"
        where = f"kubeconfig {kubeconfig}" if kubeconfig else "the in-cluster service account (or pass --kubeconfig)"
        raise KubeConfigError(f"cannot configure the Kubernetes client from {where}: {exc}") from None


def list_dicts(list_fn: Callable[..., Any], **kwargs: Any) -> tuple[list[dict[str, Any]], str]:
    """Call a list API and return (items as dicts, resourceVersion of the list)."""
    resp = list_fn(_preload_content=False, **kwargs)
    data = json.loads(resp.data)
    return list(data.get("items") or []), str((data.get("metadata") or {}).get("resourceVersion", ""))


class ListWatcher:
    """List, then watch from the list's resourceVersion; relist on expiry or error, with backoff.

    ``on_list(items)`` replaces the whole view; ``on_event(type, obj)`` applies one change.
    With ``optional``, a resource type the API server does not know (HTTP 404, e.g. a CRD
    that is not installed) counts as synced and empty, and is looked for again periodically.
    """

    def __init__(self, what: str, list_fn: Callable[..., Any], on_list: Callable[[list[dict[str, Any]]], None],
                 on_event: Callable[[str, dict[str, Any]], None], stop: threading.Event, *,
                 optional: bool = False, **kwargs: Any) -> None:
        self.what = what
        self.list_fn = list_fn
        self.on_list = on_list
        self.on_event = on_event
        self.kwargs = kwargs
        self.optional = optional
        self.stop = stop
        self.synced = threading.Event()
        self.last_error = ""
        self._thread = threading.Thread(target=self._run, name=f"watch-{what}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        backoff = 0.5
        while not self.stop.is_set():
            try:
                items, rv = list_dicts(self.list_fn, **self.kwargs)
                self.on_list(items)
                self.synced.set()
                self.last_error = ""
                backoff = 0.5
                self._watch(rv)
            except ApiException as exc:
                if exc.status == 404 and self.optional:
                    if not self.synced.is_set() or self.last_error != "not served":
                        log.warning("%s are not served by the API server (is the CRD installed?); "
                                    "continuing without them and checking again every %ds", self.what,
                                    int(OPTIONAL_RETRY_S))
                    self.on_list([])
                    self.last_error = "not served"
                    self.synced.set()
                    self.stop.wait(OPTIONAL_RETRY_S)
                    continue
                self._failed(f"HTTP {exc.status}: {exc.reason}")
            except Exception as exc:  # network trouble: relist after a pause
                self._failed(str(exc) or type(exc).__name__)
            else:
                continue
            self.stop.wait(backoff)
            backoff = min(30.0, backoff * 2)

    def _failed(self, error: str) -> None:
        if error != self.last_error:
            log.warning("watching %s failed: %s; relisting", self.what, error)
        self.last_error = error

    def _watch(self, rv: str) -> None:
        w = watch.Watch()
        while not self.stop.is_set():
            for event in w.stream(self.list_fn, resource_version=rv, timeout_seconds=WATCH_TIMEOUT_S,
                                  allow_watch_bookmarks=True, **self.kwargs):
                kind = event["type"]
                obj = event["raw_object"]
                if kind == "ERROR":
                    if obj.get("code") == 410:  # resourceVersion too old: start over with a list
                        log.info("watch of %s expired; relisting", self.what)
                        return
                    raise RuntimeError(f"watch error: {obj.get('message', obj)}")
                rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                if kind != "BOOKMARK":
                    self.on_event(kind, obj)
                if self.stop.is_set():
                    w.stop()
                    return
