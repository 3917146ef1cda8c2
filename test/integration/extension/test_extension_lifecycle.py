"""Delete (uninstall roll first), hibernated delete, migrate, restore, restarts and the annotation modes."""

from __future__ import annotations

import signal

import pytest
from extension_operator_process import FINALIZER, Operator, by_kind, wait_for
from fixtures.seed_api import default_shoot

pytestmark = pytest.mark.integration


def last_op(seed, ns):
    ex = seed.extension(ns)
    return ((ex or {}).get("status") or {}).get("lastOperation") or {}


def succeeded(seed, ns, op_type=None):
    last = last_op(seed, ns)
    return last.get("state") == "Succeeded" and (op_type is None or last.get("type") == op_type)


def new_shoot(seed, prefix, **kw):
    ns = seed.new_namespace(prefix)
    seed.seed_api.create_cluster(ns, shoot=default_shoot(ns, **kw))
    return ns


def installer_mode(seed, ns, name="cri-resmgr-installer"):
    objs = seed.rendered_objects(ns)
    ds = by_kind(objs, "DaemonSet")
    env = {e["name"]: e.get("value") for e in ds[name]["spec"]["template"]["spec"]["containers"][0]["env"]}
    return env["CRI_RESMGR_INSTALLER_MODE"], set(ds)


def test_delete_rolls_uninstall_first_and_removes_finalizer_after(seed, operator):
    ns = new_shoot(seed, operator.prefix)
    seed.create_extension(ns, {"workerPools": ["worker"]})
    wait_for(lambda: succeeded(seed, ns), "reconcile", operator=operator)
    seed.set_mr_conditions(ns)
    everything = {"cri-resmgr-installer", "cri-resmgr-installer-cleanup", "cri-resmgr-agent"}
    assert installer_mode(seed, ns) == ("install", everything)
    # Nodes outside the selected pool always run the installer in uninstall mode.
    assert installer_mode(seed, ns, "cri-resmgr-installer-cleanup")[0] == "uninstall"

    seed.delete_extension(ns)
    # The installer is rolled into uninstall mode (agent gone); the Extension waits for it.
    wait_for(lambda: installer_mode(seed, ns)[0] == "uninstall", "uninstall rollout", operator=operator)
    mode, daemonsets = installer_mode(seed, ns)
    assert daemonsets == {"cri-resmgr-installer", "cri-resmgr-installer-cleanup"}
    assert installer_mode(seed, ns, "cri-resmgr-installer-cleanup")[0] == "uninstall"
    installer = by_kind(seed.rendered_objects(ns), "DaemonSet")["cri-resmgr-installer"]["spec"]["template"]
    # Uninstall targets the same nodes as the install.
    assert installer["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["worker"]
    wait_for(lambda: "uninstall" in last_op(seed, ns).get("description", ""), "waiting status", operator=operator)
    ex = seed.extension(ns)
    assert ex is not None and FINALIZER in ex["metadata"]["finalizers"]
    assert last_op(seed, ns)["type"] == "Delete" and last_op(seed, ns)["state"] == "Processing"

    # The DaemonSet is not healthy yet: still waiting, finalizer still there.
    seed.set_mr_conditions(ns, healthy="False", progressing="True")
    wait_for(lambda: "DaemonSet" in last_op(seed, ns).get("description", ""), "unhealthy detail", operator=operator)
    assert seed.extension(ns) is not None and seed.managed_resource(ns) is not None

    # gardener-resource-manager reports the uninstall rollout healthy: the MR goes, then the finalizer.
    seed.set_mr_conditions(ns)
    wait_for(lambda: seed.extension(ns) is None, "Extension gone", operator=operator)
    assert seed.managed_resource(ns) is None
    assert seed.managed_resource(ns, "extension-cri-resmgr-monitoring") is None
    left = [s.metadata.name for s in seed.core.list_namespaced_secret(ns).items
            if s.metadata.name.startswith("managedresource-")]
    assert left == []


def test_delete_reports_error_after_uninstall_timeout(seed, tools, seed_api, base_configs_namespace,
                                                      tmp_path):
    op = Operator(seed_api, tools, tmp_path, "tuninst-*", configmap_namespace=base_configs_namespace,
                  extra_args=["--uninstall-timeout", "1"]).start()
    try:
        ns = new_shoot(seed, "tuninst")
        seed.create_extension(ns, None)
        wait_for(lambda: succeeded(seed, ns), "reconcile", operator=op)
        seed.delete_extension(ns)
        wait_for(lambda: last_op(seed, ns).get("state") == "Error", "timeout error", operator=op)
        err = seed.extension(ns)["status"]["lastError"]["description"]
        assert "uninstall not finished" in err and "still waiting" in err
        # Waiting continues: healthy later still completes the deletion.
        seed.set_mr_conditions(ns)
        wait_for(lambda: seed.extension(ns) is None, "Extension gone", operator=op)
    finally:
        op.stop()


def test_hibernated_or_deleting_shoot_deletes_without_waiting(seed, operator):
    ns = new_shoot(seed, operator.prefix)
    seed.create_extension(ns, None)
    wait_for(lambda: succeeded(seed, ns), "reconcile", operator=operator)
    assert seed.managed_resource(ns) is not None
    seed.seed_api.create_cluster(ns, shoot=default_shoot(ns, hibernated=True))
    seed.delete_extension(ns)
    # No uninstall rollout and no health to wait for: nodes are gone.
    wait_for(lambda: seed.extension(ns) is None, "Extension gone", operator=operator)
    assert seed.managed_resource(ns) is None

    ns2 = new_shoot(seed, operator.prefix)
    seed.create_extension(ns2, None)
    wait_for(lambda: succeeded(seed, ns2), "reconcile", operator=operator)
    shoot = default_shoot(ns2)
    shoot["metadata"]["annotations"] = {"confirmation.gardener.cloud/force-deletion": "true"}
    seed.seed_api.create_cluster(ns2, shoot=shoot)
    seed.delete_extension(ns2)
    wait_for(lambda: seed.extension(ns2) is None, "force-deleted Extension gone", operator=operator)
    assert seed.managed_resource(ns2) is None


def test_migrate_keeps_objects_then_restore_redeploys(seed, operator):
    ns = new_shoot(seed, operator.prefix)
    seed.create_extension(ns, None)
    wait_for(lambda: succeeded(seed, ns), "reconcile", operator=operator)
    # A finalizer like gardener-resource-manager's lets us see keepObjects before the MR goes.
    grm_finalizer = "resources.gardener.cloud/gardener-resource-manager"
    seed.patch_managed_resource(ns, {"metadata": {"finalizers": [grm_finalizer]}})

    seed.annotate(ns, "migrate")
    mr = wait_for(lambda: (m := seed.managed_resource(ns)) and m["metadata"].get("deletionTimestamp") and m,
                  "MR deletion", operator=operator)
    assert mr["spec"]["keepObjects"] is True
    assert last_op(seed, ns)["type"] == "Migrate" and last_op(seed, ns)["state"] == "Processing"
    seed.patch_managed_resource(ns, {"metadata": {"finalizers": None}})
    wait_for(lambda: succeeded(seed, ns, "Migrate"), "Migrate Succeeded", operator=operator)
    ex = wait_for(lambda: (e := seed.extension(ns)) and "gardener.cloud/operation" not in
                  (e["metadata"].get("annotations") or {}) and e, "migrate annotation removed", operator=operator)
    assert FINALIZER not in (ex["metadata"].get("finalizers") or [])
    assert seed.managed_resource(ns) is None

    # While migrated, a plain reconcile request is ignored.
    seed.annotate(ns, "reconcile")
    seed.annotate(ns, "restore")
    wait_for(lambda: succeeded(seed, ns, "Restore"), "Restore Succeeded", operator=operator)
    ex = wait_for(lambda: (e := seed.extension(ns)) and "gardener.cloud/operation" not in
                  (e["metadata"].get("annotations") or {}) and e, "restore annotation removed", operator=operator)
    assert FINALIZER in ex["metadata"]["finalizers"]
    assert seed.managed_resource(ns) is not None
    # A migrated-then-deleted Extension (the usual end in the old seed) goes without uninstalling.
    seed.annotate(ns, "migrate")
    wait_for(lambda: succeeded(seed, ns, "Migrate"), "second migrate", operator=operator)
    seed.delete_extension(ns)
    wait_for(lambda: seed.extension(ns) is None, "migrated Extension deleted", operator=operator)


def test_operator_killed_mid_operation_converges_after_restart(seed, tools, seed_api, base_configs_namespace,
                                                               tmp_path):
    op = Operator(seed_api, tools, tmp_path / "a", "tkill-*", configmap_namespace=base_configs_namespace).start()
    namespaces = [new_shoot(seed, "tkill") for _ in range(4)]
    try:
        for ns in namespaces:
            seed.create_extension(ns, None)
        # Kill as soon as the first one is done: the others are mid-reconcile or not started.
        wait_for(lambda: any(succeeded(seed, ns) for ns in namespaces), "first reconcile", operator=op)
        op.stop(sig=signal.SIGKILL)
        # Also leave one in the middle of a delete.
        op = Operator(seed_api, tools, tmp_path / "b", "tkill-*", configmap_namespace=base_configs_namespace,
                      name="operator2").start()
        for ns in namespaces:
            wait_for(lambda ns=ns: succeeded(seed, ns), f"{ns} converged", operator=op)
            assert len(seed.managed_resource(ns)["spec"]["secretRefs"]) == 1
            assert "gardener.cloud/operation" not in (seed.extension(ns)["metadata"].get("annotations") or {})
        victim = namespaces[0]
        seed.set_mr_conditions(victim)
        seed.delete_extension(victim)
        wait_for(lambda: installer_mode(seed, victim)[0] == "uninstall", "uninstall rollout", operator=op)
        op.stop(sig=signal.SIGKILL)
        seed.set_mr_conditions(victim)
        op = Operator(seed_api, tools, tmp_path / "c", "tkill-*", configmap_namespace=base_configs_namespace,
                      name="operator3").start()
        wait_for(lambda: seed.extension(victim) is None, "delete converged after restart", operator=op)
        assert seed.managed_resource(victim) is None
    finally:
        op.stop()


def test_ignore_operation_annotation_reacts_to_generation_and_cluster(seed, tools, seed_api,
                                                                      base_configs_namespace, tmp_path):
    # An image only for newer shoots: a Kubernetes upgrade in the Cluster must re-render.
    overwrite = tmp_path / "images_overwrite.yaml"
    overwrite.write_text("images:\n- name: gardener-extension-cri-resmgr-installation\n"
                         "  repository: reg/installer-new\n  tag: v2\n  targetVersion: '>= 1.32'\n")
    op = Operator(seed_api, tools, tmp_path, "tignore-*", configmap_namespace=base_configs_namespace,
                  extra_args=["--ignore-operation-annotation"],
                  env={"IMAGEVECTOR_OVERWRITE": str(overwrite)}).start()
    try:
        ns = new_shoot(seed, "tignore")
        seed.create_extension(ns, None, annotations={})
        wait_for(lambda: succeeded(seed, ns), "reconcile without annotation", operator=op)
        [old] = seed.managed_resource(ns)["spec"]["secretRefs"]
        seed.patch_extension(ns, {"spec": {"providerConfig": {"configs": {"force": "policy:\n  Active: none\n"}}}})
        wait_for(lambda: seed.managed_resource(ns)["spec"]["secretRefs"] != [old], "generation change applied",
                 operator=op)
        ex = wait_for(lambda: (e := seed.extension(ns)) and e["status"].get("observedGeneration") == 2 and e,
                      "observedGeneration 2", operator=op)
        assert ex["status"]["lastOperation"]["state"] == "Succeeded"

        def installer_image():
            ds = by_kind(seed.rendered_objects(ns), "DaemonSet")["cri-resmgr-installer"]
            return ds["spec"]["template"]["spec"]["containers"][0]["image"]

        assert "installer-new" not in installer_image()
        # No annotation, no Extension change: only the Cluster (shoot upgraded to 1.32).
        seed.seed_api.create_cluster(ns, shoot=default_shoot(ns, kubernetes_version="1.32.0"))
        wait_for(lambda: installer_image() == "reg/installer-new:v2", "re-render after the Cluster change",
                 operator=op)
    finally:
        op.stop()


def test_default_mode_reacts_to_annotation_and_generation(seed, operator):
    ns = new_shoot(seed, operator.prefix)
    seed.create_extension(ns, None)
    wait_for(lambda: succeeded(seed, ns), "reconcile", operator=operator)
    [first] = seed.managed_resource(ns)["spec"]["secretRefs"]
    # gardenlet changes spec and annotates in one go; the operator follows.
    seed.patch_extension(ns, {"spec": {"providerConfig": {"configs": {"force": "policy:\n  Active: none\n"}}},
                              "metadata": {"annotations": {"gardener.cloud/operation": "reconcile"}}})
    [second] = wait_for(lambda: (r := seed.managed_resource(ns)["spec"]["secretRefs"]) != [first] and r,
                        "new secret", operator=operator)
    # A spec change without the annotation (generation != observedGeneration) is reacted to as well.
    seed.patch_extension(ns, {"spec": {"providerConfig": {"configs": {"force": "policy:\n  Active: static\n"}}}})
    wait_for(lambda: seed.managed_resource(ns)["spec"]["secretRefs"] not in ([first], [second]),
             "secret after a generation change", operator=operator)
    ex = wait_for(lambda: (e := seed.extension(ns))["status"].get("observedGeneration") == 3 and e,
                  "observedGeneration 3", operator=operator)
    assert ex["status"]["lastOperation"]["state"] == "Succeeded"
    # Reconcile without any change: same secret, annotation removed, still Succeeded.
    refs = seed.managed_resource(ns)["spec"]["secretRefs"]
    seed.annotate(ns, "reconcile")
    wait_for(lambda: "gardener.cloud/operation" not in (seed.extension(ns)["metadata"].get("annotations") or {})
             and succeeded(seed, ns), "annotation consumed", operator=operator)
    assert seed.managed_resource(ns)["spec"]["secretRefs"] == refs
