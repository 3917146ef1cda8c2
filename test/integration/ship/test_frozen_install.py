"""The frozen installer installs the frozen relay on a real systemd node (containerd + kubelet stand-in).

Everything cri-resmgr-related runs from hacks/build-executable.sh's output, not from Python sources:
the installer (its jinja2 unit templates come from the bundle), and the unpacked cri-resmgr it copies
onto the node as a release, which systemd then runs as the relay kubelet talks to. The node's own python3 is removed
first; only the kubelet stand-in still runs on this test run's (bind-mounted) Python.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from integration.installer.installer_node import node_ro_binds, prepare_node
from integration.installer.node_checks import (
    crictl_via_relay,
    unit_loaded,
    unit_state,
    wait_kubelet_on_relay,
    wait_kubelet_on_runtime,
)

from devland.node_checks import snapshot
from installer import release

pytestmark = pytest.mark.integration


def frozen_installer(executable: Path, node, config_dir: Path, ready: Path, *extra: str) -> subprocess.CompletedProcess:
    argv = [str(executable.parent / f"{executable.name}.dir" / "cri-resmgr"), "cri-resmgr-installer",
            "--host-root", str(node.root), "--host-pid", str(node.pid), "--host-namespaces", "mount,pid",
            "--binary", str(executable.parent / f"{executable.name}.dir"), "--config-dir", str(config_dir),
            "--ready-file", str(ready),
            "--log-format", "text", "--once", *extra]
    # No PYTHONPATH or venv on PATH: the frozen program must not need them.
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd="/", env=env)


def test_frozen_installer_installs_frozen_relay(executable: Path, systemd_node_factory, tools, tmp_path: Path) -> None:
    node = systemd_node_factory(ro_binds=node_ro_binds())
    node.run("rm -f /usr/bin/python3*")
    prepare_node(node, "gardener")
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    # The relay's metrics port would collide between parallel nodes (they share the host network).
    (config_dir / "EXTRA_OPTIONS").write_text("--metrics-address=off\n")
    ready = tmp_path / "ready"

    r = frozen_installer(executable, node, config_dir, ready)
    assert r.returncode == 0, f"frozen installer exited {r.returncode}:\n{r.stderr[-4000:]}"
    assert unit_state(node) == "active"
    installed = snapshot(node)
    # The unpacked build is a release named by its digest; the stable path is a symlink to its executable.
    digest = release.manifest_of(executable.parent / f"{executable.name}.dir").digest
    target = f"/opt/cri-resmgr/releases/{digest}/cri-resmgr"
    assert installed["/opt/cri-resmgr/bin/cri-resmgr"] == f"-> {target}"
    assert installed[target] == (executable.parent / f"{executable.name}.dir" / "cri-resmgr").read_bytes()
    # The unit rendered from the bundled template runs the stable path.
    unit = installed["/etc/systemd/system/cri-resource-manager.service"]
    assert b"/opt/cri-resmgr/bin/cri-resmgr" in unit
    assert b"--metrics-address=off" in installed["/etc/cri-resmgr/extra-options.env"]
    version = crictl_via_relay(tools.crictl, node, "version")
    assert version.returncode == 0 and "RuntimeName:  containerd" in version.stdout, version.stderr
    wait_kubelet_on_relay(node)
    pid = node.run(["systemctl", "show", "-p", "MainPID", "--value", "cri-resource-manager"]).stdout.strip()
    exe = node.run(["readlink", f"/proc/{pid}/exe"]).stdout
    assert exe.strip() == target, exe
    # One process: the one-dir bootloader found its files from the resolved path and runs the relay itself
    # (a one-file build would be a bootloader parent with the relay as its child).
    children = node.run(["cat", f"/proc/{pid}/task/{pid}/children"]).stdout.split()
    assert children == [], children
    rss = [line for line in node.run(["cat", f"/proc/{pid}/status"]).stdout.splitlines() if line.startswith("VmRSS")]
    print(f"relay on the node: pid {pid}, {rss}")  # for the record (no assertion on figures)

    r = frozen_installer(executable, node, config_dir, ready, "--mode", "uninstall")
    assert r.returncode == 0, f"frozen uninstall exited {r.returncode}:\n{r.stderr[-4000:]}"
    wait_kubelet_on_runtime(node)
    assert not unit_loaded(node)
