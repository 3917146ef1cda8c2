"""The reconciler over an in-memory API (test/unit/extension/fake_api.py): which operation runs and what
lastOperation, lastError, observedGeneration, annotations and the finalizer say afterwards."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import pytest
from unit.extension.fake_api import FakeApis
from unit.extension.test_actuator import FALLBACK, MRS, NS, make_actuator, mark_healthy, provider_config

import noderecord
from extension import base_configs, node_proof
from extension import constants as c
from extension.errors import RetryLater
from extension.gardener import status
from extension.reconciler import CONFIG_RETRY_MAX, OperatorSettings, Reconciler

EXT = ("extensions", NS, "cri-resmgr")


def put_cluster(apis: FakeApis, *, hibernated: bool = False, failed: bool = False) -> None:
    shoot = {"metadata": {"name": "local"},
             "spec": {"kubernetes": {"version": "1.31.1"}, "hibernation": {"enabled": hibernated},
                      "provider": {"workers": [{"name": "pool-a"}]}},
             "status": {"lastOperation": {"state": "Failed" if failed else "Succeeded"}}}
    apis.store.put(("clusters", "", NS), {"spec": {"shoot": shoot}})


def put_extension(apis: FakeApis, pc: dict | None = None, annotation: str | None = None, **meta) -> None:
    metadata = {"name": "cri-resmgr", "namespace": NS, "finalizers": [c.FINALIZER], "resourceVersion": "1",
                "annotations": {c.OPERATION_ANNOTATION: annotation} if annotation else {}, **meta}
    apis.store.put(EXT, {"metadata": metadata, "spec": {"type": c.EXTENSION_TYPE, "providerConfig": pc}})


def extension(apis: FakeApis) -> dict:
    return apis.object(*EXT)


@pytest.fixture
def apis() -> FakeApis:
    apis = FakeApis()
    put_cluster(apis, hibernated=True)
    return apis


def reconciler(apis: FakeApis, helm: str = "helm-is-not-needed", **settings) -> Reconciler:
    return Reconciler(apis, make_actuator(apis, helm),
                      OperatorSettings(**{"retry_delay_min": 1, "retry_delay_max": 8, **settings}))


def test_first_reconcile_is_create_and_records_success(apis: FakeApis) -> None:
    put_extension(apis, provider_config(fallback=FALLBACK), annotation=c.OPERATION_RECONCILE)
    assert reconciler(apis).change(NS, "cri-resmgr") == "Shoot is hibernated; nothing deployed"
    ex = extension(apis)
    last = ex["status"]["lastOperation"]
    assert (last["type"], last["state"], last["progress"]) == (status.CREATE, status.SUCCEEDED, 100)
    assert ex["status"]["observedGeneration"] == ex["metadata"]["generation"]
    assert "lastError" not in ex["status"]
    assert c.OPERATION_ANNOTATION not in ex["metadata"]["annotations"]  # removed before reconciling
    # Nothing changed since: the next event runs nothing.
    writes = len(apis.store.calls)
    assert reconciler(apis).change(NS, "cri-resmgr") is None
    assert apis.store.calls[writes:] == []


def test_upstream_fields_and_flags_not_applied_are_named_in_the_description(apis: FakeApis) -> None:
    put_extension(apis, provider_config(fallback=FALLBACK,
                                        default="policy:\n  Active: memtier\n  memtier:\n    PageMoveCount: 5\n",
                                        EXTRA_OPTIONS="--metrics-interval=10s"))
    reconciler(apis).change(NS, "cri-resmgr")
    last = extension(apis)["status"]["lastOperation"]
    assert last["state"] == status.SUCCEEDED
    assert "providerConfig.configs.default: accepted, not implemented by this cri-resmgr, ignored: " \
           "policy.memtier.PageMoveCount" in last["description"]
    assert "providerConfig.configs.EXTRA_OPTIONS: accepted, not implemented by this cri-resmgr, ignored: " \
           "-metrics-interval" in last["description"]


def test_unknown_config_fields_are_a_warning_and_the_reconcile_succeeds(apis: FakeApis) -> None:
    """Upstream ignores an unknown key; so the Extension succeeds, and its description names the key and the
    closest known one, as the worker-pool warnings do. Nothing of it is an error."""
    put_extension(apis, provider_config(fallback=FALLBACK, default=(
        "policy:\n  Active: balloons\n  balloons:\n    BalloonTypes:\n      - Name: two\n"
        "        MaxCPUs: 1\n        PreferNewBalloon: true\n")))
    reconciler(apis).change(NS, "cri-resmgr")
    ex = extension(apis)
    last = ex["status"]["lastOperation"]
    assert last["state"] == status.SUCCEEDED and "lastError" not in ex["status"]
    assert last["description"].startswith("Successfully reconciled Extension resource; warning: ")
    assert ("warning: providerConfig.configs.default: unknown field, left out of the config: "
            "policy.balloons.BalloonTypes[0].PreferNewBalloon (did you mean 'PreferNewBalloons'?)"
            ) in last["description"]


@pytest.mark.parametrize("hibernated", [True, False], ids=["hibernated", "deploying"])
def test_one_reconcile_reads_the_base_configs_once_and_validates_each_config_once(
        apis: FakeApis, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest, hibernated: bool) -> None:
    """The actuator's reconcile hands its warnings and the digest of the base configs it used to the reconciler,
    which neither reads the ConfigMap again nor validates the configs again to find them."""
    import resmgr.config
    import resmgr.config.extra_options

    validated: collections.Counter[tuple[str, str]] = collections.Counter()

    def counted(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def check(*args: Any, **kwargs: Any) -> Any:
            validated[(name, kwargs.get("source", ""))] += 1
            return real(*args, **kwargs)
        return check

    for module, name in ((resmgr.config, "check_config_text"), (resmgr.config, "check_config_sections"),
                         (resmgr.config.extra_options, "check_extra_options")):
        monkeypatch.setattr(module, name, counted(name, getattr(module, name)))
    base = {"fallback": FALLBACK}
    apis.core.config_maps[("garden", c.CONFIGS_CONFIGMAP_NAME)] = base
    put_cluster(apis, hibernated=hibernated)
    put_extension(apis, {**provider_config(default="policy:\n  Active: none\n",
                                           EXTRA_OPTIONS="--metrics-interval=10s"), "workerPools": ["pool-x"]})
    helm = "helm-is-not-needed" if hibernated else str(request.getfixturevalue("tools").helm)
    r = Reconciler(apis, make_actuator(apis, helm, configmap_namespace="garden"),
                   OperatorSettings(retry_delay_min=1, retry_delay_max=8, base_configs_interval=600))
    r.change(NS, "cri-resmgr")
    ex = extension(apis)
    description = ex["status"]["lastOperation"]["description"]
    assert ex["status"]["lastOperation"]["state"] == status.SUCCEEDED, description
    # The warnings of that one validation: the worker pool and the flag accepted but not applied.
    assert "warning: providerConfig.workerPools[0]: worker pool 'pool-x' does not exist" in description
    assert "warning: providerConfig.configs.EXTRA_OPTIONS: accepted, not implemented" in description
    assert ex["metadata"]["annotations"][base_configs.RECONCILED_ANNOTATION] == base_configs.digest(base)
    assert apis.core.config_map_reads == [("garden", c.CONFIGS_CONFIGMAP_NAME)]
    assert sorted(validated) == [
        ("check_config_sections", "providerConfig.configs.default"),
        ("check_config_text", f"configmap garden/{c.CONFIGS_CONFIGMAP_NAME}.fallback"),
        ("check_config_text", "providerConfig.configs.default"),
        ("check_extra_options", "")]
    assert set(validated.values()) == {1}, validated
    # The periodic check compares with what the reconcile read: no read of its own, nothing to request.
    assert r.check_base_configs(extension(apis)) is False
    assert len(apis.core.config_map_reads) == 1


def test_configuration_error_is_recorded_and_retried_soon(apis: FakeApis) -> None:
    put_extension(apis, provider_config(fallback="policy:\n  Active: nope\n"))
    with pytest.raises(RetryLater) as err:
        reconciler(apis, retry_delay_max=600).change(NS, "cri-resmgr", retry=9)
    assert err.value.delay == CONFIG_RETRY_MAX  # a fixed config is picked up quickly, whatever the backoff
    st = extension(apis)["status"]
    assert st["lastOperation"]["state"] == status.ERROR
    assert st["lastError"]["codes"] == [status.ERR_CONFIGURATION_PROBLEM]
    assert "Unable to reconcile Extension resource" in st["lastError"]["description"]


def test_missing_cluster_and_failed_shoot(apis: FakeApis) -> None:
    put_extension(apis, provider_config(fallback=FALLBACK))
    del apis.store.objects[("clusters", "", NS)]
    with pytest.raises(RetryLater, match="Cluster"):
        reconciler(apis).change(NS, "cri-resmgr", retry=2)
    put_cluster(apis, failed=True)
    assert reconciler(apis).change(NS, "cri-resmgr") is None
    assert "status" not in extension(apis)


def test_migrate_then_restore(apis: FakeApis) -> None:
    put_extension(apis, provider_config(fallback=FALLBACK), annotation=c.OPERATION_MIGRATE)
    assert reconciler(apis).change(NS, "cri-resmgr").startswith("Migrated")
    ex = extension(apis)
    assert ex["status"]["lastOperation"]["type"] == status.MIGRATE
    assert ex["status"]["lastOperation"]["state"] == status.SUCCEEDED
    assert c.FINALIZER not in ex["metadata"]["finalizers"]
    assert c.OPERATION_ANNOTATION not in ex["metadata"]["annotations"]
    # Restore runs on the new seed and takes its annotation away only after success.
    apis.custom.patch_namespaced_custom_object("", "", NS, "extensions", "cri-resmgr", {
        "metadata": {"annotations": {c.OPERATION_ANNOTATION: c.OPERATION_RESTORE}}})
    assert reconciler(apis).change(NS, "cri-resmgr") == "Shoot is hibernated; nothing deployed"
    ex = extension(apis)
    assert ex["status"]["lastOperation"]["type"] == status.RESTORE
    assert c.OPERATION_ANNOTATION not in ex["metadata"]["annotations"]


def test_delete_waits_for_the_uninstall_then_succeeds(apis: FakeApis, tools) -> None:
    put_cluster(apis)
    put_extension(apis, provider_config(fallback=FALLBACK))
    r = reconciler(apis, str(tools.helm))
    r.actuator.shoot.add_node("n1")
    assert r.change(NS, "cri-resmgr").startswith("Deployed")
    with pytest.raises(RetryLater, match="waiting for the uninstall on 1 of 1 node"):
        r.delete(NS, "cri-resmgr", runtime_seconds=1)
    last = extension(apis)["status"]["lastOperation"]
    assert (last["type"], last["state"]) == (status.DELETE, status.PROCESSING)
    assert "n1: no record yet" in last["description"]
    mark_healthy(apis)  # not proof
    digest = apis.object(MRS, NS, c.MANAGED_RESOURCE_NAME)["metadata"]["annotations"][
        node_proof.EXPECTED_DIGEST_ANNOTATION]
    r.actuator.shoot.record("n1", noderecord.UNINSTALL_FAILED, digest, "uninstall failed: boom")
    with pytest.raises(RetryLater, match="uninstall failed on 1 of 1 node"):
        r.delete(NS, "cri-resmgr", runtime_seconds=3, retry=1)
    ex = extension(apis)
    assert "n1: uninstall failed: boom" in ex["status"]["lastError"]["description"]
    assert ex["status"]["lastOperation"]["state"] == status.ERROR
    r.actuator.shoot.record("n1", noderecord.UNINSTALLED, digest)
    assert r.delete(NS, "cri-resmgr", runtime_seconds=5, retry=2) == \
        "Uninstalled cri-resmgr and deleted managed resources"
    last = extension(apis)["status"]["lastOperation"]
    assert (last["type"], last["state"]) == (status.DELETE, status.SUCCEEDED)
    assert apis.object(MRS, NS, c.MANAGED_RESOURCE_NAME) is None


def test_delete_leaves_migrated_and_vanished_extensions_alone(apis: FakeApis) -> None:
    put_extension(apis)
    apis.custom.patch_namespaced_custom_object_status("", "", NS, "extensions", "cri-resmgr", {
        "status": {"lastOperation": {"type": status.MIGRATE, "state": status.SUCCEEDED}}})
    writes = len(apis.store.calls)
    assert reconciler(apis).delete(NS, "cri-resmgr", runtime_seconds=0) is None
    assert apis.store.calls[writes:] == []
    assert reconciler(apis).delete(NS, "gone", runtime_seconds=0) is None


def test_cluster_change_triggers_reconciled_extensions_in_ignore_mode(apis: FakeApis) -> None:
    put_extension(apis, provider_config(fallback=FALLBACK))
    r = reconciler(apis, ignore_operation_annotation=True)
    r.change(NS, "cri-resmgr")
    annotations = extension(apis)["metadata"]["annotations"]
    from extension.gardener import triggers

    assert triggers.RECONCILED_DIGEST_ANNOTATION in annotations
    cluster = apis.object("clusters", "", NS)
    r.cluster_changed(cluster)  # unchanged: nothing to do
    assert triggers.CLUSTER_DIGEST_ANNOTATION not in extension(apis)["metadata"]["annotations"]
    cluster["spec"]["shoot"]["spec"]["kubernetes"]["version"] = "1.31.2"
    r.cluster_changed(cluster)
    assert extension(apis)["metadata"]["annotations"][triggers.CLUSTER_DIGEST_ANNOTATION] != \
        annotations[triggers.RECONCILED_DIGEST_ANNOTATION]


def test_base_configs_change_requests_a_reconcile_once_and_never_while_busy(apis: FakeApis) -> None:
    apis.core.config_maps[("garden", c.CONFIGS_CONFIGMAP_NAME)] = {"fallback": FALLBACK}
    r = Reconciler(apis, make_actuator(apis, configmap_namespace="garden"),
                   OperatorSettings(retry_delay_min=1, retry_delay_max=8, base_configs_interval=0.000001))
    put_extension(apis, provider_config(), annotation=c.OPERATION_RECONCILE)
    r.change(NS, "cri-resmgr")
    recorded = extension(apis)["metadata"]["annotations"][base_configs.RECONCILED_ANNOTATION]
    assert recorded == base_configs.digest({"fallback": FALLBACK})
    assert r.check_base_configs(extension(apis)) is False  # up to date

    apis.core.config_maps[("garden", c.CONFIGS_CONFIGMAP_NAME)] = {"fallback": FALLBACK, "default": FALLBACK}
    with r._working(NS, "cri-resmgr"):  # an operation of this process is on it: left alone
        assert r.check_base_configs(extension(apis)) is False
    assert c.OPERATION_ANNOTATION not in extension(apis)["metadata"]["annotations"]
    assert r.check_base_configs(extension(apis)) is True
    assert extension(apis)["metadata"]["annotations"][c.OPERATION_ANNOTATION] == c.OPERATION_RECONCILE
    assert r.check_base_configs(extension(apis)) is False  # already pending

    r.change(NS, "cri-resmgr")  # the reconcile it asked for records the new base configs
    ex = extension(apis)
    assert ex["metadata"]["annotations"][base_configs.RECONCILED_ANNOTATION] == base_configs.digest(
        {"fallback": FALLBACK, "default": FALLBACK})
    assert c.OPERATION_ANNOTATION not in ex["metadata"]["annotations"]
    assert r.check_base_configs(ex) is False


# -- the staged rollout of dynamic configs (extension/config_rollout.py) -----------------------------------------


def shoot_config_maps(apis: FakeApis) -> dict[str, dict]:
    """The ConfigMaps the installation's ManagedResource gives the shoot: name -> data."""
    import base64

    import yaml

    mr = apis.object(MRS, NS, c.MANAGED_RESOURCE_NAME)
    data = apis.object("secrets", NS, mr["spec"]["secretRefs"][0]["name"])["data"]
    docs = [d for v in data.values() for d in yaml.safe_load_all(base64.b64decode(v)) if d]
    return {d["metadata"]["name"]: d.get("data") or {} for d in docs if d["kind"] == "ConfigMap"}


def test_a_changed_dynamic_config_goes_to_one_canary_per_pool_and_a_refusal_stops_it(
        apis: FakeApis, tools) -> None:
    from resmgr.agent import rollout

    put_cluster(apis)
    old, new = "policy:\n  Active: topology-aware\n", "policy:\n  Active: balloons\n"
    put_extension(apis, provider_config(default=old), annotation=c.OPERATION_RECONCILE)
    r = reconciler(apis, str(tools.helm), retry_delay_min=1)
    shoot = r.actuator.shoot
    for name, pool in (("a1", "pool-a"), ("a2", "pool-a"), ("b1", "pool-b")):
        shoot.add_node(name, pool)
    r.change(NS, "cri-resmgr")  # the first config: nothing older to go back to, so it goes out as it is
    assert extension(apis)["status"]["lastOperation"]["state"] == status.SUCCEEDED
    assert shoot_config_maps(apis)["cri-resmgr-config.default"] == {"policy": "Active: topology-aware\n"}

    apis.store.objects[EXT]["spec"]["providerConfig"] = provider_config(default=new)
    apis.store.objects[EXT]["metadata"]["generation"] = 2
    with pytest.raises(RetryLater, match="started on the canary node"):
        r.change(NS, "cri-resmgr")
    ex = extension(apis)
    assert ex["status"]["lastOperation"]["state"] == status.PROCESSING
    # Waiting for canaries is no failed reconcile (the error counter feeds an alert).
    assert r.metrics.registry.get_sample_value(
        "gardener_extension_cri_resmgr_operations_total", {"operation": "Reconcile", "result": "waiting"}) == 1
    cms = shoot_config_maps(apis)
    assert cms["cri-resmgr-config.default"] == {"policy": "Active: topology-aware\n"}  # every other node keeps it
    assert cms["cri-resmgr-candidate.default"] == {"policy": "Active: balloons\n"}
    spec = rollout.parse_rollout({"data": cms[rollout.ROLLOUT_CONFIG_MAP]})
    assert spec.canaries == ("a1", "b1")

    # b1 refuses it: the rollout stops, the candidate goes, and lastError names the node and the error.
    shoot.nodes[0]["metadata"]["annotations"] = {rollout.ROLLOUT_ANNOTATION: f"{spec.attempt} applied"}
    shoot.nodes[2]["metadata"]["annotations"] = {
        rollout.ROLLOUT_ANNOTATION: f"{spec.attempt} failed: balloons: not enough CPUs on this node"}
    with pytest.raises(RetryLater, match="canary node b1: balloons: not enough CPUs on this node"):
        r.change(NS, "cri-resmgr")
    ex = extension(apis)
    assert ex["status"]["lastError"]["codes"] == [status.ERR_CONFIGURATION_PROBLEM]
    assert "canary node b1" in ex["status"]["lastError"]["description"]
    cms = shoot_config_maps(apis)
    assert "cri-resmgr-candidate.default" not in cms
    assert cms["cri-resmgr-config.default"] == {"policy": "Active: topology-aware\n"}
    assert rollout.parse_rollout({"data": cms[rollout.ROLLOUT_CONFIG_MAP]}).attempt == ""

    # Fixed: a new attempt, promoted once both canaries applied it.
    fixed = "policy:\n  Active: balloons\n  ReservedResources:\n    cpu: 1\n"
    apis.store.objects[EXT]["spec"]["providerConfig"] = provider_config(default=fixed)
    apis.store.objects[EXT]["metadata"]["generation"] = 3
    with pytest.raises(RetryLater, match="started"):
        r.change(NS, "cri-resmgr")
    attempt = rollout.parse_rollout({"data": shoot_config_maps(apis)[rollout.ROLLOUT_CONFIG_MAP]}).attempt
    for i in (0, 2):
        shoot.nodes[i]["metadata"]["annotations"] = {rollout.ROLLOUT_ANNOTATION: f"{attempt} applied"}
    # The waiting rollout is judged again without any event: the periodic check asks for a reconcile (kopf's own
    # retry of a reconcile an operation annotation started was seen lost on the landscape), never while busy.
    apis.store.objects[EXT]["metadata"].get("annotations", {}).pop(c.OPERATION_ANNOTATION, None)
    with r._working(NS, "cri-resmgr"):
        assert r.check_config_rollout(extension(apis)) is False
    assert r.check_config_rollout(extension(apis)) is True
    assert extension(apis)["metadata"]["annotations"][c.OPERATION_ANNOTATION] == c.OPERATION_RECONCILE
    assert r.check_config_rollout(extension(apis)) is False  # already pending
    assert "promoted to every node" in r.change(NS, "cri-resmgr")
    assert r.check_config_rollout(extension(apis)) is False  # nothing waits any more
    ex = extension(apis)
    assert ex["status"]["lastOperation"]["state"] == status.SUCCEEDED and ex["status"].get("lastError") is None
    cms = shoot_config_maps(apis)
    assert "cri-resmgr-candidate.default" not in cms
    assert cms["cri-resmgr-config.default"]["policy"].startswith("Active: balloons\nReservedResources")
