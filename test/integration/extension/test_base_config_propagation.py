"""A change of the base configs ConfigMap re-reconciles every Extension, without a restart and without gardenlet
(real kube-apiserver, real operator process).

The Extension that is mid-operation is a migration waiting for its ManagedResource to go: the finalizer
gardener-resource-manager puts on ManagedResources holds it (no gardener-resource-manager runs here, so
the test plays that one step by adding and later removing the finalizer).
"""

from __future__ import annotations

import pytest
from extension_operator_process import MR_NAME, Operator, by_kind, wait_for
from fixtures.seed_api import default_shoot

pytestmark = pytest.mark.integration

GRM_FINALIZER = "resources.gardener.cloud/gardener-resource-manager"
RECORD = "base-configs.cri-resmgr.extensions.gardener.cloud/reconciled"
OLD_DEFAULT = "policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 750m\n"
NEW_DEFAULT = "policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 250m\n"


@pytest.fixture(scope="module")
def operator(seed_api, tools, seed, base_configs_namespace, tmp_path_factory):
    """Checks every second, so the test converges quickly; the default is 10 s (within 30 s as asked)."""
    op = Operator(seed_api, tools, tmp_path_factory.mktemp("operator"), "tbasecfg-*",
                  configmap_namespace=base_configs_namespace, extra_args=["--base-configs-interval", "1"])
    op.start()
    yield op
    op.stop()


def last_op(seed, ns):
    return ((seed.extension(ns) or {}).get("status") or {}).get("lastOperation") or {}


def default_policy(seed, ns) -> str:
    cms = by_kind(seed.rendered_objects(ns), "ConfigMap")
    return cms["cri-resmgr-config.default"]["data"]["policy"]


def requests_for(operator, ns) -> list[dict]:
    return [e for e in operator.log_lines()
            if e.get("logger") == "extension.base_configs" and e.get("namespace") == ns]


def test_base_config_change_reconciles_every_extension_but_not_one_mid_operation(seed, operator,
                                                                                 base_configs_namespace):
    shoots = []
    for _ in range(4):
        ns = seed.new_namespace("tbasecfg")
        seed.seed_api.create_cluster(ns, shoot=default_shoot(ns))
        seed.create_extension(ns)
        shoots.append(ns)
    for ns in shoots:
        wait_for(lambda ns=ns: last_op(seed, ns).get("state") == "Succeeded", f"{ns} reconciled", operator=operator)
        assert "CPU: 750m" in default_policy(seed, ns)
    # The reconciler records the base configs it used after the status patch that the wait above sees.
    records = [wait_for(lambda ns=ns: (seed.extension(ns)["metadata"].get("annotations") or {}).get(RECORD),
                        f"{ns}: the base-configs record", operator=operator) for ns in shoots]
    old_record = records[0]
    assert all(record == old_record for record in records), records

    # The fourth one is migrating and waits for its ManagedResource to be deleted.
    migrating, others = shoots[3], shoots[:3]
    seed.patch_managed_resource(migrating, {"metadata": {"finalizers": [GRM_FINALIZER]}})
    seed.annotate(migrating, "migrate")
    wait_for(lambda: last_op(seed, migrating).get("type") == "Migrate"
             and last_op(seed, migrating).get("state") == "Processing"
             and (seed.managed_resource(migrating) or {}).get("metadata", {}).get("deletionTimestamp"),
             "the migration waiting for its ManagedResource", operator=operator)
    secrets_before = {ns: seed.managed_resource(ns)["spec"]["secretRefs"][0]["name"] for ns in others}

    # The operator's base config changes; nothing else happens (no gardenlet, no restart).
    pid = operator.process.pid
    seed.core.patch_namespaced_config_map("gardener-extension-cri-resmgr-configs", base_configs_namespace,
                                          {"data": {"default": NEW_DEFAULT}})

    def reconciled_with_new_config(ns):
        ex = seed.extension(ns)
        record = ex["metadata"]["annotations"].get(RECORD)
        if record in (None, old_record) or last_op(seed, ns).get("state") != "Succeeded":
            return False
        return "CPU: 250m" in default_policy(seed, ns)

    for ns in others:
        wait_for(lambda ns=ns: reconciled_with_new_config(ns), f"{ns} reconciled with the new base config",
                 operator=operator)
        ex = seed.extension(ns)
        assert "gardener.cloud/operation" not in (ex["metadata"].get("annotations") or {})
        assert seed.managed_resource(ns)["spec"]["secretRefs"][0]["name"] != secrets_before[ns]
        # Exactly one reconcile was requested for it, through Gardener's operation annotation. The operator
        # logs the request after its annotation patch, which the reconcile seen above may overtake.
        [request] = wait_for(lambda ns=ns: requests_for(operator, ns), f"{ns}: the reconcile request's log line",
                             operator=operator)
        assert request["msg"].startswith("requested reconcile: base configs changed"), request
    assert operator.process.pid == pid and operator.process.alive()

    # The migrating one was left alone: still migrating, its operation annotation untouched.
    ex = seed.extension(migrating)
    assert ex["metadata"]["annotations"]["gardener.cloud/operation"] == "migrate"
    assert last_op(seed, migrating)["type"] == "Migrate" and last_op(seed, migrating)["state"] == "Processing"
    assert ex["metadata"]["annotations"][RECORD] == old_record
    assert requests_for(operator, migrating) == []

    # gardener-resource-manager's part ends; the migration finishes and is not turned into a reconcile.
    seed.patch_managed_resource(migrating, {"metadata": {"finalizers": None}})
    wait_for(lambda: last_op(seed, migrating).get("state") == "Succeeded", "migration finished", operator=operator)
    assert last_op(seed, migrating)["type"] == "Migrate"
    assert seed.managed_resource(migrating, MR_NAME) is None
    assert requests_for(operator, migrating) == []
