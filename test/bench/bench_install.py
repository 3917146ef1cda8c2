"""Benchmark: cri-resmgr-installer install and uninstall on a real systemd node (`make bench-install`).

Each round starts the installer as a fresh process, as a pod start would, and times it until it
exits: for install that is after kubelet was restarted against the relay and checked active
(`--once`), for uninstall after the node is clean. Rounds run on the gardener layout (several
times) and once on the kubeadm and KubeletConfiguration layouts. For scale, the same run measures
a bare `systemctl restart kubelet` until the kubelet stand-in is active and connected, the floor
any install pays once. The LAST line printed is the summary (medians over all rounds):

    install: install_s=<x> uninstall_s=<y>

Target (DESIGN, reported, not asserted): each <= 20 s.
"""

from __future__ import annotations

import atexit
import os
import statistics
import time
from pathlib import Path

import pytest
from integration.installer.installer_node import (
    kubelet_log,
    node_ro_binds,
    prepare_node,
    run_installer,
    wait_for,
    write_launcher,
)

from devland.node_checks import snapshot

TARGET_S = 20.0
ROUNDS = {"gardener": int(os.environ.get("INSTALL_BENCH_ROUNDS", "3")), "kubeadm": 1, "config": 1}

pytestmark = pytest.mark.bench


def kubelet_restart_s(node) -> float:
    before = kubelet_log(node).count("connected to")
    start = time.monotonic()
    node.systemctl("restart", "kubelet.service")
    wait_for(lambda: kubelet_log(node).count("connected to") > before, "kubelet stand-in to reconnect",
             timeout=60, interval=0.05)
    return time.monotonic() - start


def test_bench_install(systemd_node_factory, tmp_path: Path) -> None:
    launcher = write_launcher(tmp_path)
    installs: list[float] = []
    uninstalls: list[float] = []
    floors: list[float] = []
    for layout, rounds in ROUNDS.items():
        node = systemd_node_factory(ro_binds=node_ro_binds())
        prepare_node(node, layout)
        config_dir = tmp_path / f"config-{layout}"
        config_dir.mkdir()
        (config_dir / "EXTRA_OPTIONS").write_text("--metrics-address=off\n")
        ready = tmp_path / f"ready-{layout}"
        clean = snapshot(node)
        for i in range(rounds):
            floors.append(kubelet_restart_s(node))
            start = time.monotonic()
            r = run_installer(node, launcher, config_dir, ready)
            installed = time.monotonic() - start
            assert r.returncode == 0, r.stderr[-3000:]
            start = time.monotonic()
            r = run_installer(node, launcher, config_dir, ready, "--mode", "uninstall")
            uninstalled = time.monotonic() - start
            assert r.returncode == 0, r.stderr[-3000:]
            assert snapshot(node) == clean, "uninstall did not restore the node"
            installs.append(installed)
            uninstalls.append(uninstalled)
            print(f"  {layout} round {i + 1}: install {installed:.2f}s uninstall {uninstalled:.2f}s "
                  f"(kubelet restart floor {floors[-1]:.2f}s)", flush=True)
        node.poweroff()

    install_s = statistics.median(installs)
    uninstall_s = statistics.median(uninstalls)
    floor = statistics.median(floors)
    print(f"  install: median {install_s:.2f}s max {max(installs):.2f}s; uninstall: median {uninstall_s:.2f}s "
          f"max {max(uninstalls):.2f}s over {len(installs)} rounds", flush=True)
    print(f"  baseline kubelet restart to connected: median {floor:.2f}s; install/baseline "
          f"{install_s / floor:.1f}x, uninstall/baseline {uninstall_s / floor:.1f}x", flush=True)
    for name, value in (("install_s", install_s), ("uninstall_s", uninstall_s)):
        print(f"  target {name} <= {TARGET_S:g}: {'met' if value <= TARGET_S else 'NOT met'} ({value:.2f})",
              flush=True)
    line = f"install: install_s={install_s:.2f} uninstall_s={uninstall_s:.2f}"
    print(line, flush=True)
    # pytest prints its own summary after the test; repeat the line at exit so it is the LAST line.
    atexit.register(print, line, flush=True)
