"""Reconcile, config errors, config changes, health, hibernation and heartbeat against a real seed API."""

from __future__ import annotations

import base64

import pytest
from extension_operator_process import FINALIZER, MR_NAME, by_kind, wait_for
from fixtures.config_bombs import BOMBS
from fixtures.seed_api import default_shoot

pytestmark = pytest.mark.integration

PROVIDER_CONFIG = {
    "configs": {
        "default": "policy:\n  Active: balloons\n  ReservedResources:\n    CPU: 1\n",
        "node.worker-1": "policy:\n  Active: static\n",
        "EXTRA_OPTIONS": "--log-level=debug",
    },
    "nodeSelector": {"example.com/cri-resmgr": "yes"},
    "workerPools": ["pool-a"],
}


def succeeded(seed, ns, name="cri-resmgr"):
    ex = seed.extension(ns, name)
    last = ((ex or {}).get("status") or {}).get("lastOperation") or {}
    return ex if last.get("state") == "Succeeded" else None


def new_shoot(seed, operator, **shoot_kwargs):
    ns = seed.new_namespace(operator.prefix)
    seed.seed_api.create_cluster(ns, shoot=default_shoot(ns, workers=["pool-a", "pool-b"], **shoot_kwargs))
    return ns


def test_reconcile_deploys_secret_and_managed_resource(seed, operator):
    ns = new_shoot(seed, operator)
    seed.create_extension(ns, PROVIDER_CONFIG)
    ex = wait_for(lambda: succeeded(seed, ns), "Extension Succeeded", operator=operator)

    assert "gardener.cloud/operation" not in (ex["metadata"].get("annotations") or {})
    assert ex["status"]["observedGeneration"] == ex["metadata"]["generation"]
    assert ex["status"]["lastOperation"]["type"] == "Create"
    assert ex["status"]["lastOperation"]["progress"] == 100
    assert ex["status"].get("lastError") is None
    assert FINALIZER in ex["metadata"]["finalizers"]
    # kopf keeps its bookkeeping in annotations, never under status; status.state is the CRD's field for the
    # extension's own state (the staged config rollout's, extension/config_rollout.py).
    assert set(ex["status"]) <= {"lastOperation", "lastError", "observedGeneration", "conditions", "state"}
    assert set(ex["status"].get("state") or {}) <= {"configRollout"}

    mr = seed.managed_resource(ns)
    assert "class" not in mr["spec"]
    assert mr["metadata"]["labels"]["origin"] == "gardener-extension-cri-resmgr"
    assert mr["spec"]["injectLabels"] == {"shoot.gardener.cloud/no-cleanup": "true"}
    assert mr["spec"]["keepObjects"] is False
    [ref] = mr["spec"]["secretRefs"]
    assert ref["name"].startswith(f"managedresource-{MR_NAME}-") and len(ref["name"]) == len(
        f"managedresource-{MR_NAME}-") + 8
    secret = seed.secret(ns, ref["name"])
    assert secret.immutable is True
    assert secret.metadata.labels["resources.gardener.cloud/garbage-collectable-reference"] == "true"
    assert ref["name"] in mr["metadata"]["annotations"].values()

    objs = seed.rendered_objects(ns)
    daemonsets = by_kind(objs, "DaemonSet")
    # PROVIDER_CONFIG selects worker pools: the nodes outside them get the cleanup installer.
    assert set(daemonsets) == {"cri-resmgr-installer", "cri-resmgr-installer-cleanup", "cri-resmgr-agent"}
    installer = daemonsets["cri-resmgr-installer"]["spec"]["template"]
    env = {e["name"]: e.get("value") for e in installer["spec"]["containers"][0]["env"]}
    assert env["CRI_RESMGR_INSTALLER_MODE"] == "install"
    assert installer["metadata"]["labels"]["node.gardener.cloud/critical-component"] == "true"
    assert installer["spec"]["priorityClassName"].startswith("gardener-shoot-system-")
    assert installer["spec"]["nodeSelector"] == {"example.com/cri-resmgr": "yes",
                                                 "worker.gardener.cloud/cri-name": "containerd"}
    term = installer["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "worker.gardener.cloud/pool", "operator": "In", "values": ["pool-a"]}]
    images = {c["image"] for d in daemonsets.values() for c in d["spec"]["template"]["spec"]["containers"]}
    assert any("cri-resmgr-installer" in i for i in images) and any("cri-resmgr-agent" in i for i in images)

    cms = by_kind(objs, "ConfigMap")
    # The shoot's default wins over the operator's; the operator's fallback stays.
    assert "Active: balloons" in cms["cri-resmgr-config.default"]["data"]["policy"]
    assert cms["cri-resmgr-config.node.worker-1"]["data"]["policy"].strip() == "Active: static"
    static = cms["cri-resmgr-installer-config"]["data"]
    assert static["fallback.cfg"] == "policy:\n  Active: none\n"
    assert static["EXTRA_OPTIONS"] == "--log-level=debug"
    assert "force.cfg" not in static
    assert "adjustments.criresmgr.intel.com" in by_kind(objs, "CustomResourceDefinition")
    assert "cri-resmgr-metrics" in by_kind(objs, "Service")

    monitoring = seed.managed_resource(ns, "extension-cri-resmgr-monitoring")
    assert monitoring["spec"]["class"] == "seed"
    seed_objs = seed.rendered_objects(ns, "extension-cri-resmgr-monitoring")
    [scrape] = by_kind(seed_objs, "ScrapeConfig").values()
    assert scrape["apiVersion"] == "monitoring.coreos.com/v1alpha1"
    assert scrape["metadata"]["labels"] == {"prometheus": "shoot"} and scrape["metadata"]["namespace"] == ns
    assert scrape["spec"]["authorization"]["credentials"]["name"] == "shoot-access-prometheus-shoot"
    dashboards = by_kind(seed_objs, "ConfigMap")["extension-cri-resmgr-dashboards"]
    assert dashboards["metadata"]["labels"] == {"dashboard.monitoring.gardener.cloud/shoot": "true"}
    [rule] = by_kind(seed_objs, "PrometheusRule").values()
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"] == {"prometheus": "shoot"} and rule["metadata"]["namespace"] == ns
    assert {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]} >= {
        "CriResmgrRelayDown", "CriResmgrKubeletBypassesRelay", "CriResmgrInstallerNotReady", "CriResmgrConfigRefused",
        "CriResmgrPlacementsUnpinned", "CriResmgrRelayErrors"}
    # The seed side is accepted by a real kube-apiserver with Gardener's ScrapeConfig and PrometheusRule CRDs.
    import yaml

    seed_manifest = "\n---\n".join(yaml.safe_dump(o) for o in seed_objs)
    r = seed.seed_api.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", input=seed_manifest)
    assert r.stdout.count("(server dry run)") == len(seed_objs) == 3

    # Everything rendered for the shoot is accepted by a real kube-apiserver.
    manifest = "\n---\n".join(yaml.safe_dump(o) for o in objs)
    r = seed.seed_api.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", input=manifest)
    assert r.stdout.count("(server dry run)") == len(objs)


@pytest.mark.parametrize("kind", ["alias", "depth"])
def test_config_bombs_become_configuration_errors(seed, operator, kind):
    """A YAML bomb in a shoot's config is an ERR_CONFIGURATION_PROBLEM, not a stuck or dead operator."""
    ns = new_shoot(seed, operator)
    text, message = BOMBS[kind]
    seed.create_extension(ns, {"configs": {"default": text}})

    def errored():
        ex = seed.extension(ns)
        return ex if (ex.get("status") or {}).get("lastError") else None

    ex = wait_for(errored, "lastError", operator=operator)
    assert message in ex["status"]["lastError"]["description"]
    assert ex["status"]["lastError"]["codes"] == ["ERR_CONFIGURATION_PROBLEM"]
    assert seed.managed_resource(ns) is None


def test_invalid_provider_config_reports_last_error_and_deploys_nothing(seed, operator):
    ns = new_shoot(seed, operator)
    bad = {"configs": {"default": "policy:\n  Active: balloons\n  balloons:\n    BalloonTypes:\n"
                                  "      - Name: x\n        MinCPUs: -3\n"}}
    seed.create_extension(ns, bad)

    def errored():
        ex = seed.extension(ns)
        return ex if (ex.get("status") or {}).get("lastError") else None

    ex = wait_for(errored, "lastError", operator=operator)
    assert ex["status"]["lastOperation"]["state"] == "Error"
    desc = ex["status"]["lastError"]["description"]
    assert "providerConfig.configs.default.policy" in desc and "MinCPUs" in desc
    assert ex["status"]["lastError"]["codes"] == ["ERR_CONFIGURATION_PROBLEM"]
    assert seed.managed_resource(ns) is None

    # A malformed worker pool name is named too (a pool the shoot lacks is only a warning, tested below).
    seed.patch_extension(ns, {"spec": {"providerConfig": {"workerPools": ["no pe!"]}},
                              "metadata": {"annotations": {"gardener.cloud/operation": "reconcile"}}})
    wait_for(lambda: "workerPools[0]" in ((seed.extension(ns).get("status") or {}).get("lastError") or {}).get(
        "description", ""), "lastError naming the worker pool", operator=operator)
    assert seed.managed_resource(ns) is None

    # Fixing the config recovers.
    seed.patch_extension(ns, {"spec": {"providerConfig": {"workerPools": None, "configs": None}},
                              "metadata": {"annotations": {"gardener.cloud/operation": "reconcile"}}})
    ex = wait_for(lambda: succeeded(seed, ns), "Succeeded after the fix", operator=operator)
    assert ex["status"].get("lastError") is None
    assert seed.managed_resource(ns) is not None


def test_changed_config_gives_new_secret_and_old_is_garbage_collectable(seed, operator):
    ns = new_shoot(seed, operator)
    seed.create_extension(ns, {"configs": {"force": "policy:\n  Active: static\n"}})
    wait_for(lambda: succeeded(seed, ns), "first reconcile", operator=operator)
    [old] = seed.managed_resource(ns)["spec"]["secretRefs"]

    seed.patch_extension(ns, {"spec": {"providerConfig": {"configs": {"force": "policy:\n  Active: none\n"}}},
                              "metadata": {"annotations": {"gardener.cloud/operation": "reconcile"}}})

    def new_ref():
        refs = seed.managed_resource(ns)["spec"]["secretRefs"]
        return refs if refs != [old] and succeeded(seed, ns) else None

    [new] = wait_for(new_ref, "new secret reference", operator=operator)
    assert new["name"] != old["name"]
    old_secret = seed.secret(ns, old["name"])
    assert old_secret.metadata.labels["resources.gardener.cloud/garbage-collectable-reference"] == "true"
    data = base64.b64decode(seed.secret(ns, new["name"]).data["installation_chart"]).decode()
    assert 'force.cfg: "policy:\\n  Active: none\\n"' in data
    # The reference annotation follows the live secret only.
    refs = [v for k, v in seed.managed_resource(ns)["metadata"]["annotations"].items()
            if k.startswith("reference.resources.gardener.cloud/")]
    assert refs == [new["name"]]


def health_condition(seed, ns):
    ex = seed.extension(ns) or {}
    for cond in (ex.get("status") or {}).get("conditions") or []:
        if cond["type"] == "SystemComponentsHealthy":
            return cond
    return None


def test_health_condition_follows_managed_resource_conditions(seed, operator):
    ns = new_shoot(seed, operator)
    seed.create_extension(ns, None)
    wait_for(lambda: succeeded(seed, ns), "reconcile", operator=operator)

    seed.set_mr_conditions(ns, "True", "True", "False")
    cond = wait_for(lambda: (c := health_condition(seed, ns)) and c["reason"] == "HealthCheckSuccessful" and c,
                    "healthy condition", operator=operator)
    assert cond["status"] == "True"

    seed.set_mr_conditions(ns, "True", "False", "False", message="DaemonSet cri-resmgr-installer is unhealthy")
    cond = wait_for(lambda: (c := health_condition(seed, ns)) and c["reason"] == "HealthCheckUnsuccessful" and c,
                    "unhealthy condition", operator=operator)
    assert cond["status"] == "False" and "cri-resmgr-installer is unhealthy" in cond["message"]

    # As Gardener's extensions library (healthcheck/reconciler.go): progressing after False stays False ...
    seed.set_mr_conditions(ns, "True", "True", "True")
    cond = wait_for(lambda: (c := health_condition(seed, ns)) and "is progressing" in c["message"] and c,
                    "progressing after unhealthy", operator=operator)
    assert (cond["status"], cond["reason"]) == ("False", "HealthCheckUnsuccessful")
    # ... and is Progressing after True (until the progressing threshold).
    seed.set_mr_conditions(ns, "True", "True", "False")
    wait_for(lambda: (c := health_condition(seed, ns)) and c["status"] == "True", "healthy again", operator=operator)
    seed.set_mr_conditions(ns, "True", "True", "True")
    cond = wait_for(lambda: (c := health_condition(seed, ns)) and c["reason"] == "HealthCheckProgressing" and c,
                    "progressing condition", operator=operator)
    assert cond["status"] == "Progressing"

    seed.patch_managed_resource(ns, {"metadata": {"annotations": {"x": "y"}}, "spec": {"keepObjects": True}})
    cond = wait_for(lambda: (c := health_condition(seed, ns)) and "outdated" in c["message"] and c,
                    "outdated generation", operator=operator)
    assert cond["status"] == "Progressing"


def test_hibernated_shoot_reconciles_without_deploying(seed, operator):
    ns = new_shoot(seed, operator, hibernated=True)
    seed.create_extension(ns, None)
    wait_for(lambda: succeeded(seed, ns), "reconcile while hibernated", operator=operator)
    assert seed.managed_resource(ns) is None
    # That text is the success line's detail, logged after the status patch `succeeded` sees: wait for it.
    wait_for(lambda: any(ln.get("namespace") == ns and "Shoot is hibernated; nothing deployed" in ln.get("msg", "")
                         for ln in operator.log_lines()), "the hibernated reconcile's success line", operator=operator)
    cond = wait_for(lambda: health_condition(seed, ns), "health condition", operator=operator)
    assert (cond["status"], cond["reason"], cond["message"]) == ("True", "HealthCheckSuccessful",
                                                                 "Shoot is hibernated")
    # Waking up: gardenlet updates the Cluster and annotates the Extension.
    seed.seed_api.create_cluster(ns, shoot=default_shoot(ns, workers=["pool-a", "pool-b"]))
    seed.annotate(ns, "reconcile")
    wait_for(lambda: seed.managed_resource(ns), "managed resource after wake-up", operator=operator)


def test_wait_for_state_and_failed_shoot_are_left_alone(seed, operator):
    waiting = new_shoot(seed, operator)
    seed.create_extension(waiting, None, annotations={"gardener.cloud/operation": "wait-for-state"})
    failed = seed.new_namespace(operator.prefix)
    shoot = default_shoot(failed)
    shoot["status"]["lastOperation"]["state"] = "Failed"
    seed.seed_api.create_cluster(failed, shoot=shoot)
    seed.create_extension(failed, None)
    # A normal one created after both: once it is done, the operator has seen the others.
    normal = new_shoot(seed, operator)
    seed.create_extension(normal, None)
    wait_for(lambda: succeeded(seed, normal), "normal Extension", operator=operator)
    wait_for(lambda: health_condition(seed, normal), "a health round", operator=operator)
    for ns in (waiting, failed):
        ex = seed.extension(ns)
        assert not ex.get("status"), ex.get("status")  # no operation and no health condition
        assert seed.managed_resource(ns) is None
    assert seed.extension(waiting)["metadata"]["annotations"]["gardener.cloud/operation"] == "wait-for-state"


def test_heartbeat_lease_is_renewed(seed, operator, base_configs_namespace):
    def lease():
        try:
            return seed.coordination.read_namespaced_lease("gardener-extension-heartbeat", base_configs_namespace)
        except Exception:
            return None

    first = wait_for(lease, "heartbeat lease", operator=operator)
    assert first.spec.holder_identity == "gardener-extension-cri-resmgr"
    t0 = first.spec.renew_time
    later = wait_for(lambda: (lz := lease()) and lz.spec.renew_time > t0 and lz, "renewal", operator=operator)
    assert later.spec.lease_duration_seconds == 1  # the renew interval the operator runs with


def test_logs_are_json_lines_with_namespace(seed, operator):
    ns = new_shoot(seed, operator)
    seed.create_extension(ns, None)
    wait_for(lambda: succeeded(seed, ns), "reconcile", operator=operator)
    # The success line is logged after the status patch (and its bookkeeping), so wait for it too.
    wait_for(lambda: any(ln.get("namespace") == ns and "Successfully reconciled" in ln.get("msg", "")
                         for ln in operator.log_lines()), "the success log line", operator=operator)
    lines = operator.log_lines()
    assert lines and all("raw" not in line for line in lines), [ln for ln in lines if "raw" in ln][:3]
    assert all({"ts", "level", "logger", "msg"} <= set(ln) for ln in lines)


def test_liveness_endpoint_answers(operator):
    import urllib.request

    def alive():
        try:
            with urllib.request.urlopen(operator.liveness_url, timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    wait_for(alive, "kopf liveness endpoint", operator=operator)


def test_large_provider_config_fits_kopf_bookkeeping(seed, operator):
    """kopf's diff base would copy spec into an annotation (256 KiB limit); ours keeps a digest."""
    ns = new_shoot(seed, operator)
    big = "policy:\n  Active: topology-aware\n#" + "x" * 400_000 + "\n"
    seed.create_extension(ns, {"configs": {"default": big}})
    wait_for(lambda: succeeded(seed, ns), "reconcile of a 400 KB config", operator=operator)
    key = "cri-resmgr.extensions.gardener.cloud/last-handled-configuration"
    ex = wait_for(lambda: (e := seed.extension(ns)) and key in (e["metadata"].get("annotations") or {}) and e,
                  "kopf's diff base stored", operator=operator)
    annotations = ex["metadata"]["annotations"]
    assert sum(len(k) + len(v) for k, v in annotations.items()) < 4096
    objs = seed.rendered_objects(ns)
    assert "Active: topology-aware" in by_kind(objs, "ConfigMap")["cri-resmgr-config.default"]["data"]["policy"]


def test_removed_worker_pool_is_a_warning_not_a_failed_reconcile(seed, operator):
    """A pool listed in workerPools that the shoot no longer has must not block the shoot's reconciliation."""
    ns = new_shoot(seed, operator)  # pools pool-a and pool-b
    seed.create_extension(ns, {"workerPools": ["pool-a", "pool-gone"]})
    ex = wait_for(lambda: succeeded(seed, ns), "Extension Succeeded", operator=operator)
    description = ex["status"]["lastOperation"]["description"]
    assert description.startswith("Successfully reconciled Extension resource; warning: ")
    assert "providerConfig.workerPools[1]: worker pool 'pool-gone' does not exist in the shoot" in description
    assert ex["status"].get("lastError") is None
    installer = by_kind(seed.rendered_objects(ns), "DaemonSet")["cri-resmgr-installer"]["spec"]["template"]
    term = installer["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["pool-a", "pool-gone"]
    assert any(e.get("level") == "warning" and "pool-gone" in e.get("msg", "") and e.get("namespace") == ns
               for e in operator.log_lines())


def test_unknown_config_field_is_a_warning_not_a_failed_reconcile(seed, operator):
    """Upstream ignores an unknown key (its own e2e balloons config has PreferNewBalloon): the Extension
    succeeds, says which key and the closest known one, and the config goes to the shoot as written."""
    ns = new_shoot(seed, operator)
    default = ("policy:\n  Active: balloons\n  balloons:\n    BalloonTypes:\n      - Name: two\n"
               "        MaxCPUs: 1\n        PreferNewBalloon: true\n")
    seed.create_extension(ns, {"configs": {"default": default}})
    ex = wait_for(lambda: succeeded(seed, ns), "Extension Succeeded", operator=operator)
    description = ex["status"]["lastOperation"]["description"]
    assert description == ("Successfully reconciled Extension resource; warning: providerConfig.configs.default: "
                           "unknown field, left out of the config: policy.balloons.BalloonTypes[0].PreferNewBalloon "
                           "(did you mean 'PreferNewBalloons'?)")
    assert ex["status"].get("lastError") is None
    policy = by_kind(seed.rendered_objects(ns), "ConfigMap")["cri-resmgr-config.default"]["data"]["policy"]
    assert "PreferNewBalloon: true" in policy  # as written: the agent and cri-resmgr warn on the node too
    assert any(e.get("level") == "warning" and "PreferNewBalloon (did you mean" in e.get("msg", "")
               and e.get("namespace") == ns for e in operator.log_lines())


def test_shoot_pod_network_reads_the_relays_metrics_only_when_the_operator_allows_it(
        seed, seed_api, tools, operator, base_configs_namespace, tmp_path):
    """The shoot Prometheus scrapes through the kube-apiserver proxy, which reaches the nodes from the shoot's
    pod network (the VPN's shoot side). Admitting that network admits every pod, so only with
    --metrics-allow-pod-network does cri-resmgr's --metrics-allow get it, after the user's flags."""
    from extension_operator_process import Operator

    from resmgr.config.extra_options import parse_extra_options

    def shoot_with_pod_network(prefix):
        ns = seed.new_namespace(prefix)
        shoot = default_shoot(ns, workers=["pool-a"])
        shoot["spec"]["networking"] = {"type": "calico", "pods": "100.96.0.0/11", "nodes": "10.250.0.0/16"}
        seed.seed_api.create_cluster(ns, shoot=shoot)
        seed.create_extension(ns, {"configs": {"EXTRA_OPTIONS": "--log-level=debug\n"}})
        return ns

    def extra_options(ns, op):
        wait_for(lambda: succeeded(seed, ns), "Extension Succeeded", operator=op)
        cm = by_kind(seed.rendered_objects(ns), "ConfigMap")["cri-resmgr-installer-config"]
        return parse_extra_options(cm["data"]["EXTRA_OPTIONS"])

    assert extra_options(shoot_with_pod_network(operator.prefix), operator) == ["--log-level=debug"]

    allowing = Operator(seed_api, tools, tmp_path, "tpodnet-*", configmap_namespace=base_configs_namespace,
                        extra_args=["--metrics-allow-pod-network"]).start()
    try:
        assert extra_options(shoot_with_pod_network("tpodnet"), allowing) == [
            "--log-level=debug", "--metrics-allow=100.96.0.0/11"]
        # Without a pod network in the Shoot (and without user flags) there is nothing to add.
        ns = seed.new_namespace("tpodnet")
        seed.seed_api.create_cluster(ns, shoot=default_shoot(ns))
        seed.create_extension(ns)
        wait_for(lambda: succeeded(seed, ns), "Extension Succeeded", operator=allowing)
        data = by_kind(seed.rendered_objects(ns), "ConfigMap")["cri-resmgr-installer-config"].get("data") or {}
        assert "EXTRA_OPTIONS" not in data
    finally:
        allowing.stop()


def test_per_pool_modes_deploy_an_installer_per_mode_and_the_nri_plugin(seed, operator):
    """providerConfig mode/modes through the operator: pool-a in NRI mode, the rest on the relay."""
    ns = new_shoot(seed, operator)
    seed.create_extension(ns, {"modes": {"pool-a": "nri", "gone": "auto"}})
    ex = wait_for(lambda: succeeded(seed, ns), "Extension Succeeded", operator=operator)
    assert "providerConfig.modes.gone: worker pool 'gone' does not exist in the shoot" in \
        ex["status"]["lastOperation"]["description"]
    daemonsets = by_kind(seed.rendered_objects(ns), "DaemonSet")
    assert set(daemonsets) == {"cri-resmgr-installer", "cri-resmgr-installer-nri", "cri-resmgr-installer-auto",
                               "cri-resmgr-agent", "cri-resmgr-nri"}
    plugin = daemonsets["cri-resmgr-nri"]["spec"]["template"]["spec"]
    assert plugin["nodeSelector"]["cri-resmgr.gardener.cloud/frontend"] == "nri"
    assert plugin["containers"][0]["command"][1] == "--frontend=nri"


def test_modes_other_than_relay_need_kubernetes_1_30(seed, operator):
    ns = seed.new_namespace(operator.prefix)
    seed.seed_api.create_cluster(ns, shoot=default_shoot(ns, kubernetes_version="1.29.4"))
    seed.create_extension(ns, {"mode": "nri"})

    def errored():
        ex = seed.extension(ns)
        return ex if (ex.get("status") or {}).get("lastError") else None

    ex = wait_for(errored, "lastError", operator=operator)
    assert "providerConfig.mode: mode nri needs Kubernetes 1.30 or later" in ex["status"]["lastError"]["description"]
    assert ex["status"]["lastError"]["codes"] == ["ERR_CONFIGURATION_PROBLEM"]
    assert seed.managed_resource(ns) is None
