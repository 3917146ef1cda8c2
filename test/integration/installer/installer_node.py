"""A systemd-nspawn node made ready for the installer: containerd inside, kubelet in one of three layouts.

* containerd and runc come from this machine's Debian packages, bind-mounted read-only into the
  node, with a containerd unit and config of the node's own (restrict_oom_score_adj, native
  snapshotter because the node's root is already an overlay).
* kubelet is the test stand-in (test/fixtures/kubelet_standin.py), installed at the path each
  layout's unit expects, run by this test run's Python environment, also bind-mounted read-only.
* the cri-resmgr "executable" handed to the installer is a launcher script that runs the relay
  (``python -m resmgr.cli``) from that same environment, until the single-file build exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from devland.systemd_node import containerd_unit

REPO = Path(__file__).resolve().parents[3]
STANDIN = REPO / "test" / "fixtures" / "kubelet_standin.py"
PYTHON = Path(sys.prefix) / "bin" / "python"
RUNTIME_SOCKET = "/run/containerd/containerd.sock"
RUNTIME_ENDPOINT = f"unix://{RUNTIME_SOCKET}"
RELAY_SOCKET = "/var/run/cri-resmgr/cri-resmgr.sock"

CONTAINERD_CONFIG = f"""version = 2
root = "/var/lib/containerd"
state = "/run/containerd"
[grpc]
  address = "{RUNTIME_SOCKET}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.6"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
"""

CONTAINERD_UNIT = containerd_unit("--config /etc/containerd/config.toml",
                                  description="containerd container runtime (test node)")

KUBELET_CONFIG = """apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Written by the test: a typical node's kubelet config.
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
cgroupDriver: cgroupfs
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
{endpoint_line}maxPods: 110
"""

GARDENER_UNIT = """[Unit]
Description=kubelet daemon
Documentation=https://kubernetes.io/docs/admin/kubelet
After=containerd.service
[Install]
WantedBy=multi-user.target
[Service]
Restart=always
RestartSec=1
EnvironmentFile=/etc/environment
EnvironmentFile=-/var/lib/kubelet/extra_args
ExecStart=/opt/bin/kubelet \\
    --bootstrap-kubeconfig=/var/lib/kubelet/kubeconfig-bootstrap \\
    --config=/var/lib/kubelet/config/kubelet \\
    --kubeconfig=/var/lib/kubelet/kubeconfig-real \\
    --node-labels=worker.gardener.cloud/kubernetes-version={version} \\
    --container-runtime-endpoint=unix:///run/containerd/containerd.sock \\
    --v=2 $KUBELET_EXTRA_ARGS
"""

KUBEADM_UNIT = """[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=1

[Install]
WantedBy=multi-user.target
"""

KUBEADM_DROPIN = """# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
# This is a file that "kubeadm init" and "kubeadm join" generates at runtime, populating the KUBELET_KUBEADM_ARGS variable dynamically
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# This is a file that the user can use for overrides of the kubelet args as a last resort.
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""  # noqa: E501  (kubeadm's file, verbatim)

KUBEADM_FLAGS = ('KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock '
                 '--node-ip=172.18.0.2 --node-labels= --pod-infra-container-image=registry.k8s.io/pause:3.9 '
                 '--provider-id=kind://docker/kind/kind-worker"\n')

CONFIG_UNIT = """[Unit]
Description=kubelet (KubeletConfiguration layout)
After=containerd.service

[Service]
ExecStart=/usr/local/bin/kubelet --config=/etc/kubernetes/kubelet-config.yaml --kubeconfig=/etc/kubernetes/kubelet.conf
Restart=always
RestartSec=1

[Install]
WantedBy=multi-user.target
"""


@dataclass(frozen=True)
class KubeletLayout:
    name: str
    binary: str  # where the unit expects the kubelet executable
    files: dict[str, str]  # every kubelet file of the layout (all must come back byte for byte)


LAYOUTS = {
    "gardener": KubeletLayout("gardener", "/opt/bin/kubelet", {
        "/etc/systemd/system/kubelet.service": GARDENER_UNIT.format(version="1.31.1"),
        "/var/lib/kubelet/config/kubelet": KUBELET_CONFIG.format(
            endpoint_line="containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n"),
    }),
    "kubeadm": KubeletLayout("kubeadm", "/usr/bin/kubelet", {
        "/lib/systemd/system/kubelet.service": KUBEADM_UNIT,
        "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf": KUBEADM_DROPIN,
        "/var/lib/kubelet/kubeadm-flags.env": KUBEADM_FLAGS,
        "/var/lib/kubelet/config.yaml": KUBELET_CONFIG.format(endpoint_line=""),
    }),
    "config": KubeletLayout("config", "/usr/local/bin/kubelet", {
        "/etc/systemd/system/kubelet.service": CONFIG_UNIT,
        "/etc/kubernetes/kubelet-config.yaml": KUBELET_CONFIG.format(
            endpoint_line="containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\n"),
    }),
}

def node_ro_binds() -> list[tuple[str, str]]:
    """containerd, runc and this test run's Python environment (with the repo), read-only."""
    binds: list[tuple[str, str]] = []
    for name in ("containerd", "containerd-shim-runc-v2", "runc"):
        path = shutil.which(name, path="/usr/bin:/usr/sbin:/usr/local/bin:/bin:/sbin")
        if path is None:
            raise RuntimeError(f"{name} not found on this machine; run `make setup` (apt packages containerd, runc)")
        binds.append((os.path.realpath(path), path))
    for d in {str(REPO), sys.prefix, sys.base_prefix}:
        binds.append((d, d))
    return binds


def write_launcher(directory: Path) -> Path:
    """The cri-resmgr executable handed to the installer until the single-file build exists."""
    path = directory / "cri-resmgr"
    # PYTHONPATH: the venv's editable install may point at another checkout (a git worktree's tests run
    # their own code), and only REPO is bound into the node.
    path.write_text(f'#!/bin/sh\n# cri-resmgr launcher for test nodes: the relay from {REPO}\n'
                    f'export PYTHONPATH={REPO}\nexec {Path(sys.prefix) / "bin" / "cri-resmgr"} "$@"\n')
    path.chmod(0o755)
    return path


def wait_for(check, what: str, timeout: float = 60.0, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def start_containerd(node) -> None:
    node.write_file("/etc/containerd/config.toml", CONTAINERD_CONFIG)
    node.write_file("/etc/systemd/system/containerd.service", CONTAINERD_UNIT)
    node.systemctl("daemon-reload")
    node.systemctl("enable", "--now", "containerd.service")
    wait_for(lambda: node.run(["test", "-S", RUNTIME_SOCKET], check=False).returncode == 0, "containerd socket")


def install_kubelet(node, layout: KubeletLayout) -> None:
    node.write_file(layout.binary, f"#!{PYTHON}\n" + STANDIN.read_text(), mode=0o755)
    if not node.exists("/etc/environment"):
        node.write_file("/etc/environment", "")
    for path, content in layout.files.items():
        node.write_file(path, content)
    node.systemctl("daemon-reload")
    node.systemctl("enable", "--now", "kubelet.service")
    wait_for(lambda: kubelet_log(node).count("connected to") >= 1, "the kubelet stand-in to connect")


def kubelet_log(node) -> str:
    return node.run(["journalctl", "-u", "kubelet.service", "--no-pager", "-o", "cat"], check=False).stdout


def prepare_node(node, layout: str) -> KubeletLayout:
    start_containerd(node)
    spec = LAYOUTS[layout]
    install_kubelet(node, spec)
    return spec


def installer_argv(node, binary: Path, config_dir: Path, ready_file: Path, *extra: str) -> list[str]:
    return [str(PYTHON), "-m", "installer.cli", "--host-root", str(node.root), "--host-pid", str(node.pid),
            "--host-namespaces", "mount,pid", "--binary", str(binary), "--config-dir", str(config_dir),
            "--ready-file", str(ready_file), "--log-format", "text", *extra]


def run_installer(node, binary: Path, config_dir: Path, ready_file: Path, *extra: str,
                  env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    argv = installer_argv(node, binary, config_dir, ready_file, "--once", *extra)
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=str(REPO),
                          env={**os.environ, **(env or {})})
