"""A real gardenlet installs us (issue 24, item 4): our examples/ ControllerDeployment and ControllerRegistration,
applied to a garden with `kubectl apply` (strict validation), become a ControllerInstallation that the real
gardener-controller-manager creates, the real gardenlet renders with the values it injects, and the seed's
gardener-resource-manager (class seed) applies; then a shoot's Extension reconciles through that Deployment.

Its own landscape (Landscape(controller_installation=True)): the shared one of conftest.py deploys the extension
itself. Only the shoot part of gardenlet (Cluster, Extension) is still the stand-in.

The same garden shows the garden-side admission (issue 29, item 1): the real gardener-apiserver calls
gardener-extension-admission-cri-resmgr for Shoots that enable the extension, and `kubectl apply` refuses a bad
providerConfig naming the field.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.targets import LandscapeTarget

from devland import Images, Landscape, build_images, garden, seed_extension
from devland import control_plane as cp
from devland.kube import Kube
from devland.procs import Process, free_port
from devland.tools import Tools
from devland.waiting import wait_until

REGISTRATION = "cri-resmgr-extension"
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def ci_landscape(tools: Tools, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Landscape]:
    if os.geteuid() != 0:
        pytest.fail("the landscape needs root (network namespace, systemd-nspawn, cgroups)", pytrace=False)
    images = Images.from_dir(tools, build_images(tmp_path_factory.mktemp("landscape-images")))
    # One shoot pool is enough for one Extension reconcile.
    land = Landscape(tools, Path(tempfile.mkdtemp(prefix="landscape-ci-", dir="/tmp")), images,
                     pools=("pool-a",), controller_installation=True)
    land.up()
    try:
        with land.inside():
            yield land
    finally:
        left = land.down()
        assert not left, f"the landscape left things behind: {left}"


def test_gardenlet_installs_the_extension_and_an_extension_reconciles(ci_landscape: Landscape) -> None:
    land = ci_landscape
    t0 = time.monotonic()
    ci = garden.install_extension(land)
    healthy_s = time.monotonic() - t0
    print(f"\ncontrollerinstallation_healthy_s={healthy_s:.1f}")
    garden_steps = ("seed: the Gardener CRDs gardenlet watches", "garden kube-apiserver", "gardener-apiserver",
                    "gardener-controller-manager", "gardenlet")
    print("garden start-up: " + ", ".join(f"{k}={land.timings[k]:.1f}s" for k in garden_steps))

    # gardenlet's work in the seed: the namespace extension-<installation>, labelled from the registration, and
    # its NetworkPolicy controller's policies there; the Deployment carries the SEED_NAME it adds to every pod.
    assert ci["spec"]["registrationRef"]["name"] == REGISTRATION
    namespace = f"extension-{ci['metadata']['name']}"
    labels = land.seed.get_json("namespace", namespace)["metadata"]["labels"]
    assert labels["gardener.cloud/role"] == "extension"
    assert labels["controllerregistration.core.gardener.cloud/name"] == REGISTRATION
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    policies = {p["metadata"]["name"] for p in land.seed.get_json("networkpolicies", "-n", namespace)["items"]}
    assert {"deny-all", "allow-to-runtime-apiserver", "allow-to-dns"} <= policies
    mr = land.seed.get_json("managedresource", ci["metadata"]["name"], "-n", "garden")
    assert mr["spec"]["class"] == "seed"
    deployment = land.seed.get_json("deployment", seed_extension.NAME, "-n", namespace)
    env = {e["name"]: e.get("value") for c in deployment["spec"]["template"]["spec"]["containers"]
           for e in c.get("env", [])}
    assert env.get("SEED_NAME") == garden.SEED_NAME
    # The only extension Deployment in the seed is gardenlet's: the landscape deployed none of its own.
    everywhere = land.seed.get_json("deployments", "-A", "-l", f"app.kubernetes.io/name={seed_extension.NAME}")
    assert [d["metadata"]["namespace"] for d in everywhere["items"]] == [namespace]
    pods = land.seed.get_json("pods", "-n", namespace, "-l", f"app.kubernetes.io/name={seed_extension.NAME}")
    running = [p for p in pods["items"] if p["status"].get("phase") == "Running"]
    assert running, "no running extension pod"
    pod_env = {e["name"]: e.get("value") for c in running[0]["spec"]["containers"] for e in c.get("env", [])}
    assert pod_env.get("SEED_NAME") == garden.SEED_NAME

    # A shoot's Extension, through gardenlet's stand-in for the shoot part, reconciled by that Deployment.
    t1 = time.monotonic()
    target = LandscapeTarget(land)
    target.create()
    target.enable({})
    print(f"extension_reconciled_s={time.monotonic() - t1:.1f}")
    ext = target.gardenlet.extension()
    assert ext["status"]["lastOperation"]["state"] == "Succeeded"


ADMISSION = "gardener-extension-admission-cri-resmgr"
BAD_DEFAULT = "policy:\n  Active: no-such-policy\n"
GOOD_DEFAULT = "policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 750m\n"


def cri_resmgr(default: str) -> dict:
    return {"type": REGISTRATION, "providerConfig": {
        "apiVersion": "cri-resmgr.extensions.gardener.cloud/v1alpha1", "kind": "CriResMgrConfig",
        "configs": {"default": default}}}


def test_the_garden_refuses_a_bad_shoot_at_apply(ci_landscape: Landscape, tmp_path: Path) -> None:
    """gardener-apiserver (real, v1.149.3) calls the admission through the application part of
    charts/gardener-extension-admission-cri-resmgr (its ValidatingWebhookConfiguration as rendered, objectSelector
    and all), and `kubectl apply` of a Shoot with a bad providerConfig fails with the field path.

    Stand-in: the webhook server runs as a process of the landscape (the console script the image runs, same flags
    as the runtime part's Deployment) on the garden's address, and the configuration's clientConfig is the chart's
    ``webhook.url`` naming it; on a real garden it is the runtime part's Deployment behind its Service, which the
    virtual garden's gardener-apiserver reaches by DNS name. gardener-apiserver runs as a process here too
    (devland/garden.py), so a URL is how it reaches any webhook."""
    from integration.admission.test_admission_chart import render

    land = ci_landscape
    garden_api = Kube(land.tools.kubectl, str(land.garden_kubeconfig))
    garden.install_extension(land)  # our ControllerRegistration: the ExtensionValidator wants the type registered
    garden.apply_objects(garden_api, garden.shoot_prerequisites())

    crt, key = land.pki.issue("admission-cri-resmgr", ADMISSION, ips=(cp.GARDEN.ip,))
    port = free_port()
    server = Process(ADMISSION, [str(Path(sys.executable).parent / ADMISSION), "--address", cp.GARDEN.ip,
                                 "--port", str(port), "--cert-file", str(crt), "--key-file", str(key),
                                 "--log-level", "debug"], tmp_path)
    try:
        server.wait_until(lambda: '"serving"' in server.log_path.read_text(), "serving", 60)
        values = {"webhook": {"caBundle": land.pki.ca_crt.read_text(),
                              "url": f"https://{cp.GARDEN.ip}:{port}/webhooks/cri-resmgr"}}
        [vwc] = render(land.tools, "application", values, namespace="extension-admission-cri-resmgr")
        garden.apply_objects(garden_api, [vwc])

        def apply(shoot: dict, *extra: str):
            return garden_api.run("apply", *extra, "-f", "-", input=json.dumps(shoot), check=False)

        bad = garden.shoot_manifest("bad", [cri_resmgr(BAD_DEFAULT)])
        field = "spec.extensions[0].providerConfig.configs.default.policy.Active"

        # gardener-apiserver picks up the configuration (and its admission caches the prerequisites) on its own
        # time: dry runs until the refusal is ours.
        def refused_by_us() -> tuple[bool, str]:
            r = apply(bad, "--dry-run=server")
            return field in r.stderr, (r.stderr or r.stdout).strip()[-400:]
        wait_until("gardener-apiserver calls the admission", refused_by_us, timeout=120, interval=1)

        r = apply(bad)
        assert r.returncode != 0
        assert f'admission webhook "cri-resmgr-extension.validator.extensions.gardener.cloud" denied the request: ' \
               f"{field}: " in r.stderr, r.stderr
        assert "no-such-policy" in r.stderr
        assert garden_api.run("get", "shoot", "bad", "-n", garden.PROJECT_NAMESPACE, check=False).returncode != 0

        good = garden.shoot_manifest("good", [cri_resmgr(GOOD_DEFAULT)])
        r = apply(good)
        assert r.returncode == 0, r.stderr
        stored = garden_api.get_json("shoot", "good", "-n", garden.PROJECT_NAMESPACE)
        # The label the objectSelector matches, set by gardener-apiserver's ExtensionLabels plugin.
        assert stored["metadata"]["labels"][f"extensions.extensions.gardener.cloud/{REGISTRATION}"] == "true"
        # An update to a bad config is refused too; the stored Shoot keeps its good one.
        r = apply(garden.shoot_manifest("good", [cri_resmgr(BAD_DEFAULT)]))
        assert r.returncode != 0 and f"{field}: " in r.stderr, r.stderr
        stored = garden_api.get_json("shoot", "good", "-n", garden.PROJECT_NAMESPACE)
        assert stored["spec"]["extensions"][0]["providerConfig"]["configs"]["default"] == GOOD_DEFAULT

        # A Shoot without the extension is never sent (objectSelector): the server hears nothing of it.
        plain = garden.shoot_manifest("plain", [])
        r = apply(plain)
        assert r.returncode == 0, r.stderr
        lines = [json.loads(line) for line in server.log_path.read_text().splitlines() if line.startswith("{")]
        shoots = {e.get("shoot") for e in lines if "shoot" in e}
        assert {"bad", "good"} <= shoots and "plain" not in shoots, shoots
    finally:
        for name in ("good", "plain"):
            garden_api.run("annotate", "shoot", name, "-n", garden.PROJECT_NAMESPACE,
                           "confirmation.gardener.cloud/deletion=true", "--overwrite", check=False)
            garden_api.run("delete", "shoot", name, "-n", garden.PROJECT_NAMESPACE, "--wait=false", check=False)
        garden_api.run("delete", "validatingwebhookconfiguration", ADMISSION, "--ignore-not-found", check=False)
        server.stop()
