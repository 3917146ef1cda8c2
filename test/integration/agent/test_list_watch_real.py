"""The agent's list+watch loop against the real API server: changes arrive; a missing CRD does not block."""

from __future__ import annotations

import threading

import pytest
from integration.agent.conftest import NAMESPACE, delete_config_map, put_config_map, wait_for
from kubernetes import client

from resmgr.agent.kube import ListWatcher

pytestmark = pytest.mark.integration


def test_configmap_changes_arrive_and_missing_crd_counts_as_empty(seed_api):
    api = seed_api.api_client()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    seen: list[tuple[str, str]] = []
    lists: list[list] = []
    stop = threading.Event()
    cms = ListWatcher("configmaps", core.list_namespaced_config_map, lists.append,
                      lambda kind, obj: seen.append((kind, obj["metadata"]["name"])), stop, namespace=NAMESPACE)
    missing = ListWatcher("widgets", custom.list_namespaced_custom_object, lists.append, lambda *_: None, stop,
                          optional=True, group="nothing.example.com", version="v1", namespace=NAMESPACE,
                          plural="widgets")
    required = ListWatcher("gadgets", custom.list_namespaced_custom_object, lists.append, lambda *_: None, stop,
                           group="nothing.example.com", version="v1", namespace=NAMESPACE, plural="gadgets")
    for w in (cms, missing, required):
        w.start()
    try:
        assert cms.synced.wait(60) and missing.synced.wait(60)
        put_config_map(core, "cri-resmgr-config.watch-test", {"policy": "Active: none\n"})
        put_config_map(core, "cri-resmgr-config.watch-test", {"policy": "Active: static\n"})
        delete_config_map(core, "cri-resmgr-config.watch-test")
        wait_for(lambda: [k for k, n in seen if n == "cri-resmgr-config.watch-test"] == ["ADDED", "MODIFIED",
                                                                                      "DELETED"], "watch events")
        assert missing.last_error == "not served"
        # Without `optional`, a missing resource is an error that keeps it unsynced.
        wait_for(lambda: "404" in required.last_error, "required watcher reports the 404")
        assert not required.synced.is_set()
    finally:
        stop.set()
