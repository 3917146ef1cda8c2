"""Seed-side leftovers of the Go gardener-extension-cri-resmgr (intel/gardener-extension-cri-resmgr).

The Go extension shipped its scrape config as the seed-class ManagedResource ``extension-monitoring-cri-resmgr``
in the shoot namespace (Gardener's ``managedresources.CreateForSeed``: secret ``managedresource-<name>``, with a
content hash in newer Gardener versions). Its shoot-side ManagedResource had the name ours has
(``extension-runtime-cri-resmgr``), so that one is simply taken over by the first deploy; the monitoring one
would be left orphaned, scraping next to ours. The node side of the takeover is ``installer/go_adoption.py``.
"""

from __future__ import annotations

import logging

from extension.gardener import managed_resources
from extension.gardener.kube import Apis

log = logging.getLogger("extension.go_migration")

GO_MONITORING_MANAGED_RESOURCE = "extension-monitoring-cri-resmgr"


def remove_go_monitoring(apis: Apis, namespace: str) -> bool:
    """Delete the Go extension's monitoring ManagedResource and the secrets it references; True if there was one.

    Its class is seed and keepObjects false, so gardener-resource-manager also removes the old scrape ConfigMap.
    """
    if not managed_resources.exists(apis, namespace, GO_MONITORING_MANAGED_RESOURCE):
        return False
    managed_resources.delete(apis, namespace, GO_MONITORING_MANAGED_RESOURCE)
    log.info("deleted the Go extension's monitoring managed resource",
             extra={"namespace": namespace, "resource": GO_MONITORING_MANAGED_RESOURCE})
    return True
