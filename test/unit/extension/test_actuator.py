"""The Actuator over an in-memory API (test/unit/extension/fake_api.py): what it deploys, waits for and deletes."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml
from unit.extension.fake_api import FakeApis

import noderecord
from extension import base_configs, node_proof
from extension import constants as c
from extension.actuator import Actuator, ActuatorSettings, UninstallTimeout
from extension.errors import ConfigurationError, WaitingError
from extension.gardener.cluster import ClusterInfo
from extension.installation import UNINSTALL

REPO = Path(__file__).resolve().parents[3]
NS = "shoot--dev--local"
MRS = "managedresources"
FALLBACK = "policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: 750m\n"


def cluster(**changes) -> ClusterInfo:
    base = dict(name=NS, kubernetes_version="1.31.1", hibernated=False, worker_pools=("pool-a",),
                shoot_deleting=False, shoot_failed=False, force_deletion=False)
    return ClusterInfo(**{**base, **changes})


def extension(provider_config=None) -> dict:
    spec = {"type": c.EXTENSION_TYPE}
    if provider_config is not None:
        spec["providerConfig"] = provider_config
    return {"metadata": {"name": "cri-resmgr", "namespace": NS, "generation": 1}, "spec": spec}


def provider_config(**configs: str) -> dict:
    return {"apiVersion": "cri-resmgr.extensions.gardener.cloud/v1alpha1", "kind": "CriResMgrConfig",
            "configs": configs}


class RecordedShoot(node_proof.ShootReader):
    """The shoot's nodes and node records, in memory (the real reader is tested in the integration tests)."""

    def __init__(self, apis: FakeApis) -> None:
        super().__init__(apis)
        self.nodes: list[dict] = []
        self.leases: dict[str, dict] = {}

    def add_node(self, name: str, pool: str = "pool-a") -> None:
        self.nodes.append({"metadata": {"name": name, "labels": {
            "worker.gardener.cloud/cri-name": "containerd", c.WORKER_POOL_LABEL: pool}}})

    def record(self, node: str, state: str, digest: str, reason: str = "") -> None:
        self.leases[node] = noderecord.NodeRecord(node, state, digest, reason).to_lease()

    def nodes_and_records(self, namespace: str) -> tuple[list[dict], list[dict]]:
        return self.nodes, list(self.leases.values())


@pytest.fixture
def apis() -> FakeApis:
    return FakeApis()


def make_actuator(apis: FakeApis, helm: str = "helm-is-not-needed", **settings) -> Actuator:
    return Actuator(apis, ActuatorSettings(chart_dir=REPO / "charts" / "internal" / "cri-resmgr-installation",
                                           images_file=REPO / "charts" / "images.yaml", helm=helm, **settings),
                    shoot=RecordedShoot(apis))


@pytest.fixture
def actuator(apis: FakeApis, tools) -> Actuator:
    return make_actuator(apis, str(tools.helm), uninstall_timeout=600)


def mark_healthy(apis: FakeApis, name: str = c.MANAGED_RESOURCE_NAME) -> None:
    """What gardener-resource-manager reports once it applied the ManagedResource's current generation."""
    mr = apis.store.objects[(MRS, NS, name)]
    mr["status"] = {"observedGeneration": mr["metadata"]["generation"], "conditions": [
        {"type": "ResourcesApplied", "status": "True"}, {"type": "ResourcesHealthy", "status": "True"},
        {"type": "ResourcesProgressing", "status": "False"}]}


def secret_of(apis: FakeApis, name: str = c.MANAGED_RESOURCE_NAME) -> str:
    return apis.object(MRS, NS, name)["spec"]["secretRefs"][0]["name"]


def test_hibernated_shoot_is_validated_but_gets_nothing(apis: FakeApis) -> None:
    actuator = make_actuator(apis)  # nothing is rendered, so no helm is needed
    result = actuator.reconcile(extension(provider_config(fallback=FALLBACK)), cluster(hibernated=True))
    assert result.detail == "Shoot is hibernated; nothing deployed"
    assert apis.store.calls == []
    with pytest.raises(ConfigurationError, match="fallback"):
        actuator.reconcile(extension(provider_config(fallback="policy:\n  Active: nope\n")),
                           cluster(hibernated=True))


def test_a_pool_config_for_a_missing_pool_is_a_warning(apis: FakeApis) -> None:
    actuator = make_actuator(apis)  # hibernated: validated, nothing rendered
    result = actuator.reconcile(extension(provider_config(**{"pool.pool-a": FALLBACK, "pool.gone": FALLBACK})),
                                cluster(hibernated=True))
    assert result.warnings == ("providerConfig.configs.pool.gone: worker pool 'gone' does not exist in the shoot "
                               "(pools: pool-a); no node gets this config",)
    with pytest.raises(ConfigurationError, match="pool name 'Pool_A' is a label value"):
        actuator.reconcile(extension(provider_config(**{"pool.Pool_A": FALLBACK})), cluster(hibernated=True))


def test_reconcile_deploys_both_components_and_is_idempotent(apis: FakeApis, actuator: Actuator) -> None:
    detail = actuator.reconcile(extension(provider_config(fallback=FALLBACK)), cluster()).detail
    runtime, monitoring = apis.object(MRS, NS, c.MANAGED_RESOURCE_NAME), \
        apis.object(MRS, NS, c.MONITORING_MANAGED_RESOURCE_NAME)
    assert "class" not in runtime["spec"]  # targets the shoot
    assert monitoring["spec"]["class"] == "seed"
    secret = secret_of(apis)
    assert detail.startswith("Deployed ") and detail.endswith(f"via secret {secret}")
    assert apis.object("secrets", NS, secret) is not None
    # The seed MR carries the ScrapeConfig, our PrometheusRule and the dashboard.
    data = apis.object("secrets", NS, secret_of(apis, c.MONITORING_MANAGED_RESOURCE_NAME))["data"]
    seed_objs = [o for v in data.values() for o in yaml.safe_load_all(base64.b64decode(v))]
    assert sorted(o["kind"] for o in seed_objs) == ["ConfigMap", "PrometheusRule", "ScrapeConfig"]
    [rule] = [o for o in seed_objs if o["kind"] == "PrometheusRule"]
    assert rule["metadata"]["namespace"] == NS and rule["metadata"]["labels"] == {"prometheus": "shoot"}
    writes = len(apis.store.calls)
    assert actuator.reconcile(extension(provider_config(fallback=FALLBACK)), cluster()).detail == detail
    # The same content keeps the same secret: no new secret, only the ManagedResources are patched again.
    assert [verb for verb, _ in apis.store.calls[writes:]] == ["patch", "patch"]


def test_delete_rolls_the_uninstall_and_waits_for_every_node_record(apis: FakeApis, actuator: Actuator) -> None:
    shoot = actuator.shoot
    shoot.add_node("n1")
    shoot.add_node("n2")
    shoot.add_node("other-pool", pool="pool-b")  # not selected: never waited for
    ex = extension({**provider_config(fallback=FALLBACK), "workerPools": ["pool-a"]})
    ex["metadata"].update(uid="u1", deletionTimestamp="2026-11-22T23:00:00Z")
    actuator.reconcile(ex, cluster(worker_pools=("pool-a", "pool-b")))
    installed = secret_of(apis)
    install_digest = apis.object(MRS, NS, c.MANAGED_RESOURCE_NAME)["metadata"]["annotations"][
        node_proof.EXPECTED_DIGEST_ANNOTATION]
    for node in ("n1", "n2"):
        shoot.record(node, noderecord.UNINSTALLED, "digest-of-an-earlier-disable")
    with pytest.raises(WaitingError, match="waiting for the uninstall on 2 of 2 node.*n1: record is of another"):
        actuator.delete(ex, cluster(), runtime_seconds=1)
    uninstalling = secret_of(apis)
    assert uninstalling != installed  # the installer now runs in uninstall mode
    assert apis.object("secrets", NS, installed)["metadata"]["labels"][c.GARBAGE_COLLECTABLE_LABEL] == "true"
    digest = actuator.uninstallation(ex, cluster()).values.digest
    assert digest != install_digest
    # A healthy ManagedResource is not proof.
    mark_healthy(apis)
    shoot.record("n1", noderecord.UNINSTALLED, digest)
    with pytest.raises(UninstallTimeout, match="not finished after 601s.*1 of 2 node.*n2"):
        actuator.delete(ex, cluster(), runtime_seconds=601)
    shoot.record("n2", noderecord.UNINSTALL_FAILED, digest, "uninstall failed: kubelet did not come back")
    with pytest.raises(node_proof.NodesFailed, match="uninstall failed on 1 of 2 node.*n2: uninstall failed: kubelet"):
        actuator.delete(ex, cluster(), runtime_seconds=602)
    assert apis.object(MRS, NS, c.MANAGED_RESOURCE_NAME) is not None  # the uninstalling DaemonSet stays
    shoot.nodes = [n for n in shoot.nodes if n["metadata"]["name"] != "n2"]  # a node that is gone never blocks
    assert actuator.delete(ex, cluster(), runtime_seconds=603) == \
        "Uninstalled cri-resmgr and deleted managed resources"
    assert [key for key in apis.store.objects if key[0] in (MRS, "secrets")] == []


def test_a_new_deletion_has_a_new_digest(actuator: Actuator) -> None:
    ex = extension(provider_config(fallback=FALLBACK))
    first = actuator.uninstallation({**ex, "metadata": {**ex["metadata"], "uid": "u1",
                                                        "deletionTimestamp": "2026-11-22T23:00:00Z"}}, cluster())
    again = actuator.uninstallation({**ex, "metadata": {**ex["metadata"], "uid": "u1",
                                                        "deletionTimestamp": "2026-11-22T23:00:00Z"}}, cluster())
    later = actuator.uninstallation({**ex, "metadata": {**ex["metadata"], "uid": "u2",
                                                        "deletionTimestamp": "2026-11-23T01:00:00Z"}}, cluster())
    assert first.values.digest == again.values.digest != later.values.digest


def test_uninstall_values_keep_only_the_node_selection(apis: FakeApis, actuator: Actuator) -> None:
    pc = {**provider_config(fallback=FALLBACK), "nodeSelector": {"role": "compute"}}
    installation = actuator.uninstallation(extension(pc), cluster())
    assert installation.values.mode == UNINSTALL
    assert installation.values.node_selector == {"role": "compute"}
    assert installation.values.static_configs == {} and installation.values.dynamic_configs == {}
    # A providerConfig that no longer validates still uninstalls (everywhere).
    broken = actuator.uninstallation(extension({"configs": "not a mapping"}), cluster())
    assert broken.values.mode == UNINSTALL and broken.values.node_selector == {}


@pytest.mark.parametrize("changes, detail", [
    ({"force_deletion": True}, "Force-deleted managed resources without waiting"),
    ({"hibernated": True}, "Shoot is hibernated; deleted managed resources without waiting"),
    ({"shoot_deleting": True}, "Shoot is being deleted; deleted managed resources without waiting"),
])
def test_delete_without_waiting(apis: FakeApis, actuator: Actuator, changes: dict, detail: str) -> None:
    ex = extension(provider_config(fallback=FALLBACK))
    actuator.reconcile(ex, cluster())
    assert actuator.delete(ex, cluster(**changes), runtime_seconds=0) == detail
    assert [key for key in apis.store.objects if key[0] in (MRS, "secrets")] == []


def test_delete_of_nothing_and_of_a_managed_resource_being_deleted(apis: FakeApis) -> None:
    actuator = make_actuator(apis)
    assert actuator.delete(extension(), cluster(), runtime_seconds=0) == "Deleted managed resources"
    apis.store.put((MRS, NS, c.MANAGED_RESOURCE_NAME),
                   {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"secretRefs": []}})
    with pytest.raises(WaitingError, match=f"waiting for managed resource {c.MANAGED_RESOURCE_NAME} to be deleted"):
        actuator.delete(extension(), cluster(), runtime_seconds=0)


def test_migrate_keeps_the_objects_and_removes_our_resources(apis: FakeApis, actuator: Actuator) -> None:
    ex = extension(provider_config(fallback=FALLBACK))
    actuator.reconcile(ex, cluster())
    writes = len(apis.store.calls)
    assert actuator.migrate(ex).startswith("Migrated")
    calls = apis.store.calls[writes:]
    for name in (c.MANAGED_RESOURCE_NAME, c.MONITORING_MANAGED_RESOURCE_NAME):
        # keepObjects is set before the ManagedResource goes, so gardener-resource-manager leaves the shoot alone.
        assert calls.index(("patch", (MRS, NS, name))) < calls.index(("delete", (MRS, NS, name)))
    assert apis.object(MRS, NS, c.MANAGED_RESOURCE_NAME) is None


def test_base_configs_come_from_the_operator_configmap(apis: FakeApis) -> None:
    actuator = make_actuator(apis, configmap_namespace="garden")
    ex = extension(provider_config(default=FALLBACK))
    with pytest.raises(ConfigurationError, match="base configs ConfigMap not found"):
        actuator.reconcile(ex, cluster(hibernated=True))
    base = {"fallback": FALLBACK}
    apis.core.config_maps[("garden", c.CONFIGS_CONFIGMAP_NAME)] = base
    split = actuator.configs(actuator.provider_config(ex), actuator.base_configs())
    assert set(split.static) == {"fallback"} and set(split.dynamic) == {"default"}
    # The reconcile says which base configs it used; without a ConfigMap configured, none.
    assert actuator.reconcile(ex, cluster(hibernated=True)).base_configs_digest == base_configs.digest(base)
    assert make_actuator(apis).reconcile(ex, cluster(hibernated=True)).base_configs_digest is None


def test_the_rollout_digest_follows_what_the_installer_applies_only(actuator: Actuator) -> None:
    def digest(pc: dict) -> str:
        return actuator.installation(NS, cluster(), actuator.provider_config(extension(pc)),
                                     actuator.configs(actuator.provider_config(extension(pc)), None),
                                     "install").values.digest
    base = digest(provider_config(fallback=FALLBACK))
    assert digest(provider_config(fallback=FALLBACK)) == base
    # The agent's dynamic configs do not re-roll the installer; a static config or the selection does.
    assert digest(provider_config(fallback=FALLBACK, default="policy:\n  Active: none\n")) == base
    assert digest(provider_config(fallback="policy:\n  Active: none\n")) != base
    assert digest({**provider_config(fallback=FALLBACK), "workerPools": ["pool-a"]}) != base


def test_the_reconcile_runs_the_admissions_check_of_the_shoots_part(apis: FakeApis, monkeypatch) -> None:
    """One implementation (extension/shoot_config.py): the reconcile validates the shoot's providerConfig with the
    function the garden's admission calls, and the base configs the shoot does not replace on their own."""
    import extension.actuator as actuator_module
    from extension.shoot_config import check_shoot_config

    calls = []

    def spy(raw, **kwargs):
        calls.append((raw, kwargs))
        return check_shoot_config(raw, **kwargs)
    monkeypatch.setattr(actuator_module, "check_shoot_config", spy)
    actuator = make_actuator(apis, configmap_namespace="garden")
    apis.core.config_maps[("garden", c.CONFIGS_CONFIGMAP_NAME)] = {"default": "policy:\n  Active: bogus\n"}
    raw = provider_config(default=FALLBACK)
    # The bad base default is replaced by the shoot's: not an error, as before.
    actuator.reconcile(extension(raw), cluster(hibernated=True))
    assert calls == [(raw, {"shoot_pools": ["pool-a"], "kubernetes_version": cluster().kubernetes_version})]
    with pytest.raises(ConfigurationError) as err:
        actuator.reconcile(extension(provider_config(fallback=FALLBACK)), cluster(hibernated=True))
    assert err.value.field.startswith(f"configmap garden/{c.CONFIGS_CONFIGMAP_NAME}.default")
