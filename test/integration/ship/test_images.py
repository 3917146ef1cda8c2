"""The daemonless images import into containerd and their entrypoints run as containers."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fixtures.cri_objects import make_container_config, make_pod_config, write_json

pytestmark = pytest.mark.integration

EXTENSION = "registry.test/cri-resmgr/gardener-extension-cri-resmgr:ship-test"
INSTALLER = "registry.test/cri-resmgr/cri-resmgr-installer:ship-test"
AGENT = "registry.test/cri-resmgr/cri-resmgr-agent:ship-test"


def run_to_exit(containerd, tmp_path: Path, name: str, image: str, *, args: list[str],
                command: list[str] | None = None, readonly_rootfs: bool = False) -> tuple[int, str, dict]:
    """Run one container in its own pod until it exits; its exit code, log and image user as containerd saw them."""
    pod = write_json(tmp_path / f"{name}-pod.json", make_pod_config(name))
    cfg = make_container_config(name, image=image)
    del cfg["command"]  # keep the image's entrypoint unless told otherwise
    if command:
        cfg["command"] = command
    cfg["args"] = args
    cfg["linux"]["security_context"]["readonly_rootfs"] = readonly_rootfs
    ctr = write_json(tmp_path / f"{name}-ctr.json", cfg)
    pod_id = containerd.crictl("runp", pod).stdout.strip()
    try:
        cid = containerd.crictl("create", pod_id, ctr, pod).stdout.strip()
        containerd.crictl("start", cid)
        deadline = time.monotonic() + 120  # a hang guard, not a speed check
        while True:
            info = json.loads(containerd.crictl("inspect", cid).stdout)
            if info["status"]["state"] == "CONTAINER_EXITED" or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert info["status"]["state"] == "CONTAINER_EXITED", f"{name} still running: {info['status']}"
        logs = containerd.crictl("logs", cid)
        return info["status"]["exitCode"], logs.stdout + logs.stderr, info
    finally:
        containerd.crictl("stopp", pod_id, check=False)
        containerd.crictl("rmp", "-f", pod_id, check=False)


@pytest.fixture(scope="module")
def imported(containerd, shipped_images: dict[str, Path]) -> None:
    for tar in shipped_images.values():
        containerd.import_images(tar)
    images = json.loads(containerd.crictl("images", "-o", "json").stdout)["images"]
    tags = {t for img in images for t in img["repoTags"]}
    assert {EXTENSION, INSTALLER, AGENT} <= tags, tags


def test_extension_image_entrypoint(containerd, imported, tmp_path: Path) -> None:
    code, out, info = run_to_exit(containerd, tmp_path, "ext-help", EXTENSION, args=["--help"])
    assert code == 0, out
    assert "usage: gardener-extension-cri-resmgr" in out and "--charts-dir" in out
    # The charts are where the image's environment says (helm test below), and the process runs as nonroot.
    spec = info["info"]["runtimeSpec"]
    assert spec["process"]["user"]["uid"] == 65532, spec["process"]["user"]
    assert "CRI_RESMGR_CHARTS_DIR=/charts" in spec["process"]["env"]


def test_extension_image_has_helm_and_charts(containerd, imported, tmp_path: Path) -> None:
    code, out, _ = run_to_exit(containerd, tmp_path, "ext-helm", EXTENSION, command=["helm"],
                               args=["show", "chart", "/charts/internal/cri-resmgr-installation"])
    assert code == 0, out
    assert "name: cri-resmgr-installation" in out


def test_installation_image_entrypoint(containerd, imported, tmp_path: Path) -> None:
    code, out, _ = run_to_exit(containerd, tmp_path, "inst-help", INSTALLER, args=["--help"])
    assert code == 0, out
    assert "usage: cri-resmgr-installer" in out and "--host-root" in out


@pytest.mark.parametrize("command,expect", [
    (["cri-resmgr-agent", "--help"], "usage: cri-resmgr-agent"),
    (["cri-resmgr-agent-probe", "--help"], "usage: cri-resmgr-agent-probe"),
    (["/opt/cri-resmgr/bin/cri-resmgr", "--list-policies"], "topology-aware"),
    (["nsenter", "--version"], "nsenter from util-linux"),
])
def test_installation_image_commands(containerd, imported, tmp_path: Path, command: list[str], expect: str) -> None:
    # The chart runs the agent from the same image under its own command; the installer needs nsenter.
    code, out, _ = run_to_exit(containerd, tmp_path, "inst-cmd", AGENT, command=command[:1], args=command[1:])
    assert code == 0, out
    assert expect in out


def test_agent_runs_with_read_only_root(containerd, imported, tmp_path: Path) -> None:
    # The chart runs the agent with readOnlyRootFilesystem: the image's program must not need to unpack itself.
    code, out, info = run_to_exit(containerd, tmp_path, "agent-ro", AGENT, command=["cri-resmgr-agent-probe"],
                                  args=["--help"], readonly_rootfs=True)
    assert info["info"]["runtimeSpec"]["root"]["readonly"] is True
    assert code == 0, out
    assert "usage: cri-resmgr-agent-probe" in out


def test_installation_image_ships_the_node_binary(containerd, imported, tmp_path: Path) -> None:
    # The installer's --binary default: the one-file executable (it unpacks itself into the container's /tmp).
    code, out, _ = run_to_exit(containerd, tmp_path, "node-bin", INSTALLER, command=["/opt/cri-resmgr/bin/cri-resmgr"],
                               args=["--version"])
    assert code == 0, out
    assert out.startswith("cri-resmgr ")
