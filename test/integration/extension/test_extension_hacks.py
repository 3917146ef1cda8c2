"""hacks/: controller registration generation and the shoot helper scripts (against a Shoot CRD stand-in)."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import tarfile
import urllib.request
from pathlib import Path

import pytest
import yaml

from devland.hacks import load_hack
from devland.procs import free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
HACKS = REPO / "hacks"


def run(script, *args, env=None, check=True):
    r = subprocess.run(["bash", str(HACKS / script), *args], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **(env or {})})
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_generate_controller_registration(tools, tmp_path):
    out = tmp_path / "ctrl.yaml"
    run("generate-controller-registration.sh", "-o", str(out), "-i", "reg/ext", "-t", "v9",
        env={"HELM": tools.helm})
    docs = [d for d in yaml.safe_load_all(out.read_text()) if d]
    kinds = [(d["apiVersion"], d["kind"]) for d in docs]
    assert kinds == [("core.gardener.cloud/v1", "ControllerDeployment"),
                     ("core.gardener.cloud/v1beta1", "ControllerRegistration")]
    v1, reg = docs
    assert v1["helm"]["values"]["image"] == {"repository": "reg/ext", "tag": "v9"}
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(v1["helm"]["rawChart"]))) as tar:
        names = tar.getnames()
        chart = yaml.safe_load(tar.extractfile("gardener-extension-cri-resmgr/Chart.yaml"))
        packaged = tar.extractfile("gardener-extension-cri-resmgr/templates/deployment.yaml").read()
    assert chart["name"] == "gardener-extension-cri-resmgr"
    assert packaged == (REPO / "charts/gardener-extension-cri-resmgr/templates/deployment.yaml").read_bytes()
    assert "gardener-extension-cri-resmgr/values.yaml" in names
    assert reg["spec"]["resources"] == [{"kind": "Extension", "type": "cri-resmgr-extension"}]
    assert reg["metadata"]["annotations"] == {"security.gardener.cloud/pod-security-enforce": "restricted"}
    assert reg["spec"]["deployment"]["deploymentRefs"] == [{"name": v1["metadata"]["name"]}]


def test_committed_registration_matches_the_chart():
    docs = [d for d in yaml.safe_load_all((REPO / "examples/ctrldeploy-ctrlreg.yaml").read_text()) if d]
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(docs[0]["helm"]["rawChart"]))) as tar:
        for member in tar.getmembers():
            if member.isfile():
                rel = member.name.split("/", 1)[1]
                packaged = tar.extractfile(member).read()
                source = (REPO / "charts/gardener-extension-cri-resmgr" / rel).read_bytes()
                if rel == "Chart.yaml":  # helm package re-serialises Chart.yaml
                    packaged, source = yaml.safe_load(packaged), yaml.safe_load(source)
                assert packaged == source, f"{rel} changed: run hacks/generate-controller-registration.sh"


SHOOT_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "shoots.core.gardener.cloud"},
    "spec": {"group": "core.gardener.cloud", "scope": "Namespaced",
             "names": {"kind": "Shoot", "plural": "shoots", "singular": "shoot"},
             "versions": [{"name": "v1beta1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}


def test_shoot_scripts_enable_trigger_disable(tools, seed_api, tmp_path):
    # The garden's Shoot API is aggregated in real Gardener; a schema-less CRD stands in for it here.
    seed_api.kubectl("apply", "-f", "-", input=json.dumps(SHOOT_CRD))
    seed_api.kubectl("wait", "--for=condition=Established", "crd/shoots.core.gardener.cloud")
    ns = seed_api.create_shoot_namespace("garden-hacks")
    shoot = yaml.safe_load((REPO / "examples/shoot.yaml").read_text())
    shoot["metadata"]["namespace"] = ns
    shoot["spec"]["extensions"] = [{"type": "other-extension"}]
    seed_api.kubectl("apply", "-f", "-", input=json.dumps(shoot))
    env = {"KUBECONFIG": seed_api.kubeconfig, "KUBECTL": tools.kubectl}

    pc = tmp_path / "pc.yaml"
    pc.write_text("workerPools: [cpu-pinned]\nconfigs:\n  default: |\n    policy:\n      Active: none\n")
    run("enable-extension-in-shoot.sh", "local", ns, str(pc), env=env)
    got = json.loads(seed_api.kubectl("-n", ns, "get", "shoot", "local", "-o", "json").stdout)
    assert got["spec"]["extensions"] == [
        {"type": "other-extension"},
        {"type": "cri-resmgr-extension", "providerConfig": {"workerPools": ["cpu-pinned"], "configs": {
            "default": "policy:\n  Active: none\n"}}}]

    run("trigger-reconcile.sh", "local", ns, env=env)
    got = json.loads(seed_api.kubectl("-n", ns, "get", "shoot", "local", "-o", "json").stdout)
    assert got["metadata"]["annotations"]["gardener.cloud/operation"] == "reconcile"

    run("disable-extension-in-shoot.sh", "local", ns, env=env)
    got = json.loads(seed_api.kubectl("-n", ns, "get", "shoot", "local", "-o", "json").stdout)
    assert got["spec"]["extensions"] == [{"type": "other-extension"}]

    r = run("enable-extension-in-shoot.sh", "nosuchshoot", ns, env=env, check=False)
    assert r.returncode != 0 and "not found" in r.stderr
    r = run("enable-extension-in-shoot.sh", env=env, check=False)
    assert r.returncode == 2 and "usage" in r.stderr


def test_trigger_reconcile_on_the_seed(tools, seed_api):
    ns = seed_api.create_shoot_namespace("shoot--hacks--seed")
    ext = {"apiVersion": "extensions.gardener.cloud/v1alpha1", "kind": "Extension",
           "metadata": {"name": "cri-resmgr", "namespace": ns}, "spec": {"type": "cri-resmgr-extension"}}
    seed_api.kubectl("apply", "-f", "-", input=json.dumps(ext))
    run("trigger-reconcile.sh", "--seed", ns, env={"KUBECONFIG": seed_api.kubeconfig, "KUBECTL": tools.kubectl})
    got = json.loads(seed_api.kubectl("-n", ns, "get", "extension", "cri-resmgr", "-o", "json").stdout)
    assert got["metadata"]["annotations"]["gardener.cloud/operation"] == "reconcile"


def test_generate_controller_registration_with_the_chart_in_an_oci_registry(tools, tmp_path):
    """-r pushes the chart and names it by digest (helm.ociRepository); what a seed pulls by that digest is the
    chart the rawChart form carries, byte for byte."""
    registry = load_hack("registry")
    address = f"127.0.0.1:{free_port()}"
    registry.start(tmp_path / "registry", address)
    try:
        oci_out, raw_out = tmp_path / "oci.yaml", tmp_path / "raw.yaml"
        run("generate-controller-registration.sh", "-o", str(oci_out), "-r", f"oci://{address}/charts", "-P",
            env={"HELM": tools.helm})
        run("generate-controller-registration.sh", "-o", str(raw_out), env={"HELM": tools.helm})
        oci_docs = [d for d in yaml.safe_load_all(oci_out.read_text()) if d]
        raw_docs = [d for d in yaml.safe_load_all(raw_out.read_text()) if d]
        assert oci_docs[1] == raw_docs[1]  # the same registration
        helm_section = oci_docs[0]["helm"]
        assert "rawChart" not in helm_section and helm_section["values"] == raw_docs[0]["helm"]["values"]
        oci = helm_section["ociRepository"]
        repository = f"{address}/charts/gardener-extension-cri-resmgr"
        assert oci["repository"] == repository and oci["digest"].startswith("sha256:")
        path = repository.split("/", 1)[1]
        manifest = json.loads(urllib.request.urlopen(urllib.request.Request(
            f"http://{address}/v2/{path}/manifests/{oci['digest']}",
            headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}), timeout=10).read())
        chart_type = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
        [layer] = [x for x in manifest["layers"] if x["mediaType"] == chart_type]
        pulled = urllib.request.urlopen(f"http://{address}/v2/{path}/blobs/{layer['digest']}", timeout=10).read()
        assert pulled == base64.b64decode(raw_docs[0]["helm"]["rawChart"])
    finally:
        assert registry.stop(tmp_path / "registry")
    # A registry that is not there: a clear error, no file written.
    r = run("generate-controller-registration.sh", "-o", str(tmp_path / "none.yaml"), "-r",
            f"127.0.0.1:{free_port()}/charts", "-P", env={"HELM": tools.helm}, check=False)
    assert r.returncode != 0 and "helm push" in r.stderr and not (tmp_path / "none.yaml").exists()
