"""The Go extension's seed-side leftover is removed by reconcile (real kube-apiserver, real operator process).

The ManagedResource is written as intel/gardener-extension-cri-resmgr wrote it: Gardener's
managedresources.CreateForSeed with the name extension-monitoring-cri-resmgr, class seed, its secret
managedresource-extension-monitoring-cri-resmgr holding the legacy scrape ConfigMap.
"""

from __future__ import annotations

import pytest
from extension_operator_process import wait_for
from fixtures.seed_api import default_shoot
from kubernetes import client

pytestmark = pytest.mark.integration

GO_MR = "extension-monitoring-cri-resmgr"
GO_SECRET = f"managedresource-{GO_MR}"
LEGACY_SCRAPE_CONFIGMAP = """apiVersion: v1
kind: ConfigMap
metadata:
  name: extension-cri-resmgr-monitoring-scrape-config
  namespace: {ns}
  labels:
    extensions.gardener.cloud/configuration: monitoring
data:
  scrape_config: |
    - job_name: cri-rm
"""


def create_go_monitoring(seed, ns: str) -> None:
    seed.core.create_namespaced_secret(ns, client.V1Secret(
        metadata=client.V1ObjectMeta(name=GO_SECRET), type="Opaque",
        string_data={"data": LEGACY_SCRAPE_CONFIGMAP.format(ns=ns)}))
    seed.custom.create_namespaced_custom_object("resources.gardener.cloud", "v1alpha1", ns, "managedresources", {
        "apiVersion": "resources.gardener.cloud/v1alpha1", "kind": "ManagedResource",
        "metadata": {"name": GO_MR, "namespace": ns},
        "spec": {"class": "seed", "keepObjects": False, "secretRefs": [{"name": GO_SECRET}]}})


def secret_exists(seed, ns: str, name: str) -> bool:
    return any(s.metadata.name == name for s in seed.core.list_namespaced_secret(ns).items)


def test_reconcile_deletes_the_go_extensions_monitoring_managed_resource(seed, operator):
    ns = seed.new_namespace(operator.prefix)
    seed.seed_api.create_cluster(ns, shoot=default_shoot(ns))
    create_go_monitoring(seed, ns)
    assert seed.managed_resource(ns, GO_MR) is not None and secret_exists(seed, ns, GO_SECRET)

    seed.create_extension(ns)
    wait_for(lambda: (((seed.extension(ns) or {}).get("status") or {}).get("lastOperation") or {}).get("state")
             == "Succeeded", "Extension Succeeded", operator=operator)
    assert seed.managed_resource(ns, GO_MR) is None
    assert not secret_exists(seed, ns, GO_SECRET)
    # Ours took its place; and the Go extension's shoot-side ManagedResource name is ours already.
    assert seed.managed_resource(ns, "extension-cri-resmgr-monitoring")["spec"]["class"] == "seed"
    assert seed.managed_resource(ns, "extension-runtime-cri-resmgr") is not None
    assert any(e.get("logger") == "extension.go_migration" and e.get("namespace") == ns
               for e in operator.log_lines())
