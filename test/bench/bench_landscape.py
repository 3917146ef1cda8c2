"""Benchmark: the local landscape (`make bench-landscape`).

Measures, on one landscape (2 shoot nodes in two pools, real kubelets, real gardener-resource-manager;
the extension installed by a real gardenlet from examples/ through its ControllerInstallation; the shoot
part of gardenlet played by the stand-in):

  startup_s               landscape up: etcd, the API servers, KCM, scheduler, kube-proxy, GRM, the seed's
                          DNS and NetworkPolicy enforcer, 3 nodes Ready, the garden (gardener-apiserver,
                          gardener-controller-manager, gardenlet)
  controllerinstallation_healthy_s
                          examples/ applied to the garden -> ControllerInstallation Installed and Healthy
                          (gardenlet rendered the chart, the seed's gardener-resource-manager applied it,
                          the extension Deployment is available)
  enable_to_relay_s       Extension created -> every shoot node's running kubelet on the relay
  disable_to_restored_s   Extension deleted -> every node's kubelet back on containerd, unit removed
  disable_to_gone_s       Extension deleted -> Extension gone (every node's record said uninstalled)
  uninstall_node_s        per node, Extension deleted -> its record "uninstalled" (noderecord/),
                          in order: with maxUnavailable 50% of 2 nodes the second includes the first's step
  rss_mb_<component>      resident memory of each component while enabled (a node: everything in it)

The LAST line printed is the summary:

    landscape: gardener_version=<v> startup_s=<x> controllerinstallation_healthy_s=<c> enable_to_relay_s=<y>
               disable_to_restored_s=<z>
               disable_to_gone_s=<s> uninstall_node_s=<a,b> rss_mb_<component>=<mb> ...   (one line)

Target (DESIGN, reported, not asserted): enable -> every node on the relay <= 60 s for 2 nodes.
"""

from __future__ import annotations

import atexit
import datetime as dt
import os
import tempfile
import time
from pathlib import Path

import pytest
from e2e import scenarios
from e2e.targets import LANDSCAPE_EXTRA_OPTIONS

import noderecord
from devland import Images, Landscape, build_images, garden, shoot_ops
from devland.node_checks import NodeRunner

pytestmark = pytest.mark.bench
TARGET_ENABLE_S = 60.0


def _all(runners, check, what: str) -> None:
    for r in runners:
        shoot_ops.wait_until(f"{r.node}: {what}", check(r), 600, 0.5)


def test_bench_landscape(tools, tmp_path):
    if os.geteuid() != 0:
        pytest.fail("the landscape needs root", pytrace=False)
    images = Images.from_dir(tools, build_images(tmp_path / "images"))
    land = Landscape(tools, Path(tempfile.mkdtemp(prefix="landscape-bench-", dir="/tmp")), images,
                     controller_installation=True)
    try:
        land.up()
        with land.inside():
            t0 = time.monotonic()
            garden.install_extension(land)
            installation_s = time.monotonic() - t0
            runners = [NodeRunner(n) for n in land.shoot_nodes]
            g = land.gardenlet()
            g.write_cluster()
            t0 = time.monotonic()
            g.reconcile(scenarios.provider_config({"EXTRA_OPTIONS": LANDSCAPE_EXTRA_OPTIONS}))
            _all(runners, shoot_ops.installed_check, "on the relay")
            enable_s = time.monotonic() - t0
            g.wait_ready(300)
            rss = land.rss_mb()
            t0, wall0 = time.monotonic(), time.time()
            g.delete_extension()
            _all(runners, shoot_ops.removed_check, "restored")
            disable_s = time.monotonic() - t0
            g.wait_gone(600)
            gone_s = time.monotonic() - t0
            node_s = sorted(_record_time(lease) - wall0 for lease in land.shoot.get_json(
                "leases", "-n", "kube-system", "-l", f"{noderecord.LABEL}={noderecord.LABEL_VALUE}")["items"]
                if (lease["metadata"].get("annotations") or {}).get(noderecord.STATE) == noderecord.UNINSTALLED)
    finally:
        left = land.down()
    assert not left, f"the landscape left things behind: {left}"
    print(f"\n  versions: {land.versions()}")
    print("  start-up phases: " + ", ".join(f"{k} {v:.1f}s" for k, v in land.timings.items()))
    print(f"  target enable -> relay <= {TARGET_ENABLE_S:g}s: "
          f"{'met' if enable_s <= TARGET_ENABLE_S else 'NOT met'} ({enable_s:.1f}s)")
    line = (f"landscape: gardener_version={land.versions()['gardener']} "
            f"startup_s={land.timings['startup']:.1f} controllerinstallation_healthy_s={installation_s:.1f} "
            f"enable_to_relay_s={enable_s:.1f} "
            f"disable_to_restored_s={disable_s:.1f} disable_to_gone_s={gone_s:.1f} "
            f"uninstall_node_s={','.join(f'{x:.1f}' for x in node_s)} "
            + " ".join(f"rss_mb_{_key(k)}={v:.0f}" for k, v in rss.items()))
    print(line, flush=True)
    atexit.register(print, line, flush=True)


def _record_time(lease: dict) -> float:
    stamp = lease["metadata"]["annotations"][noderecord.TIME]
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()


def _key(name: str) -> str:
    return name.replace("-", "_").replace(".", "_")
