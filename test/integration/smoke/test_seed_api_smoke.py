"""The real kube-apiserver answers and Gardener's resources apply and read back."""

from __future__ import annotations

import json

from kubernetes import client


def test_version_answers(seed_api):
    version = seed_api.version()
    assert version["major"] == "1"
    assert version["gitVersion"].startswith("v1.")


def test_extension_and_cluster_round_trip(seed_api):
    ns = seed_api.create_shoot_namespace()
    labels = client.CoreV1Api(seed_api.api_client()).read_namespace(ns).metadata.labels
    assert labels["gardener.cloud/role"] == "shoot"

    cluster = seed_api.create_cluster(ns)
    assert cluster["spec"]["shoot"]["spec"]["kubernetes"]["version"]

    ext = {"apiVersion": "extensions.gardener.cloud/v1alpha1", "kind": "Extension",
           "metadata": {"name": "cri-resmgr-extension", "namespace": ns,
                        "annotations": {"gardener.cloud/operation": "reconcile"}},
           "spec": {"type": "cri-resmgr-extension",
                    "providerConfig": {"configs": {"default": "policy:\n  Active: none\n"}}}}
    seed_api.kubectl("apply", "-f", "-", input=json.dumps(ext))
    api = client.CustomObjectsApi(seed_api.api_client())
    got = api.get_namespaced_custom_object("extensions.gardener.cloud", "v1alpha1", ns, "extensions",
                                           "cri-resmgr-extension")
    assert got["spec"]["type"] == "cri-resmgr-extension"
    assert got["spec"]["providerConfig"]["configs"]["default"].startswith("policy:")
    assert got["metadata"]["annotations"]["gardener.cloud/operation"] == "reconcile"


def test_managedresource_crd_established(seed_api):
    out = seed_api.kubectl("get", "crd", "managedresources.resources.gardener.cloud", "-o", "json").stdout
    conds = {c["type"]: c["status"] for c in json.loads(out)["status"]["conditions"]}
    assert conds["Established"] == "True"
