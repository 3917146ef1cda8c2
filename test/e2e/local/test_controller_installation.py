"""A real gardenlet installs us (issue 24, item 4): our examples/ ControllerDeployment and ControllerRegistration,
applied to a garden with `kubectl apply` (strict validation), become a ControllerInstallation that the real
gardener-controller-manager creates, the real gardenlet renders with the values it injects, and the seed's
gardener-resource-manager (class seed) applies; then a shoot's Extension reconciles through that Deployment.

Its own landscape (Landscape(controller_installation=True)): the shared one of conftest.py deploys the extension
itself. Only the shoot part of gardenlet (Cluster, Extension) is still the stand-in.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e.targets import LandscapeTarget

from devland import Images, Landscape, build_images, garden, seed_extension
from devland.tools import Tools

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
