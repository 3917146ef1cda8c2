"""Both kinds of shipped images import into containerd and keep the contract the charts rely on.

Each test runs once on the daemonless images (hacks/build-images.py) and once on the Dockerfile's targets
built with buildah (hacks/build-dockerfile-images.py): entrypoints run as containers, the extension runs
as uid 65532 with helm on PATH and the charts at /charts, the installation image has the node program
at /opt/cri-resmgr/lib and nsenter, and the agent runs with a read-only root.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from fixtures.cri_objects import make_container_config, make_pod_config, write_json

# A cold Dockerfile build (pip, PyInstaller inside buildah) takes minutes; it happens in the first test's setup.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(2700)]


@dataclass(frozen=True)
class ImageSet:
    extension: str
    installer: str
    agent: str


IMAGE_SETS = {
    # names given by the fixtures that build them (test/integration/ship/conftest.py)
    "daemonless": ("shipped_images", "registry.test/cri-resmgr"),
    "dockerfile": ("dockerfile_images", "registry.test/dockerfile"),
}


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


@pytest.fixture(scope="module", params=sorted(IMAGE_SETS))
def images(request: pytest.FixtureRequest, containerd) -> ImageSet:
    """One image set, imported into the session's containerd."""
    fixture, prefix = IMAGE_SETS[request.param]
    tars: dict[str, Path] = request.getfixturevalue(fixture)
    for tar in tars.values():
        containerd.import_images(tar)
    names = ImageSet(f"{prefix}/gardener-extension-cri-resmgr:ship-test", f"{prefix}/cri-resmgr-installer:ship-test",
                     f"{prefix}/cri-resmgr-agent:ship-test")
    listed = json.loads(containerd.crictl("images", "-o", "json").stdout)["images"]
    tags = {t for img in listed for t in img["repoTags"]}
    assert {names.extension, names.installer, names.agent} <= tags, tags
    return names


def test_extension_image_entrypoint(containerd, images: ImageSet, tmp_path: Path) -> None:
    code, out, info = run_to_exit(containerd, tmp_path, "ext-help", images.extension, args=["--help"])
    assert code == 0, out
    assert "usage: gardener-extension-cri-resmgr" in out and "--charts-dir" in out
    # The charts are where the image's environment says (helm test below), and the process runs as nonroot.
    spec = info["info"]["runtimeSpec"]
    assert spec["process"]["user"]["uid"] == 65532, spec["process"]["user"]
    assert "CRI_RESMGR_CHARTS_DIR=/charts" in spec["process"]["env"]


def test_extension_runs_as_nonroot_with_read_only_root(containerd, images: ImageSet, tmp_path: Path) -> None:
    # The chart's Deployment: runAsNonRoot, uid 65532, readOnlyRootFilesystem.
    code, out, info = run_to_exit(containerd, tmp_path, "ext-ro", images.extension, args=["--help"],
                                  readonly_rootfs=True)
    assert info["info"]["runtimeSpec"]["root"]["readonly"] is True
    assert code == 0, out
    assert "usage: gardener-extension-cri-resmgr" in out


def test_extension_image_has_helm_and_charts(containerd, images: ImageSet, tmp_path: Path) -> None:
    code, out, _ = run_to_exit(containerd, tmp_path, "ext-helm", images.extension, command=["helm"],
                               args=["show", "chart", "/charts/internal/cri-resmgr-installation"])
    assert code == 0, out
    assert "name: cri-resmgr-installation" in out


def test_extension_image_has_the_admission(containerd, images: ImageSet, tmp_path: Path) -> None:
    # charts/gardener-extension-admission-cri-resmgr runs the garden's admission from the extension image.
    code, out, _ = run_to_exit(containerd, tmp_path, "ext-admission", images.extension,
                               command=["gardener-extension-admission-cri-resmgr"], args=["--help"],
                               readonly_rootfs=True)
    assert code == 0, out
    assert "usage: gardener-extension-admission-cri-resmgr" in out


def test_installation_image_entrypoint(containerd, images: ImageSet, tmp_path: Path) -> None:
    code, out, _ = run_to_exit(containerd, tmp_path, "inst-help", images.installer, args=["--help"])
    assert code == 0, out
    assert "usage: cri-resmgr-installer" in out and "--host-root" in out


@pytest.mark.parametrize("command,expect", [
    (["cri-resmgr-agent", "--help"], "usage: cri-resmgr-agent"),
    (["cri-resmgr-agent-probe", "--help"], "usage: cri-resmgr-agent-probe"),
    (["cri-resmgr-webhook", "--help"], "usage: cri-resmgr-webhook"),
    (["/opt/cri-resmgr/lib/cri-resmgr", "--list-policies"], "topology-aware"),
    (["nsenter", "--version"], "nsenter from util-linux"),
])
def test_installation_image_commands(containerd, images: ImageSet, tmp_path: Path, command: list[str],
                                     expect: str) -> None:
    # The chart runs the agent from the same image under its own command; the installer needs nsenter.
    code, out, _ = run_to_exit(containerd, tmp_path, "inst-cmd", images.agent, command=command[:1], args=command[1:])
    assert code == 0, out
    assert expect in out


def test_agent_runs_with_read_only_root(containerd, images: ImageSet, tmp_path: Path) -> None:
    # The chart runs the agent with readOnlyRootFilesystem: the image's program must not need to unpack itself.
    code, out, info = run_to_exit(containerd, tmp_path, "agent-ro", images.agent, command=["cri-resmgr-agent-probe"],
                                  args=["--help"], readonly_rootfs=True)
    assert info["info"]["runtimeSpec"]["root"]["readonly"] is True
    assert code == 0, out
    assert "usage: cri-resmgr-agent-probe" in out


def test_installation_image_ships_the_node_binary(containerd, images: ImageSet, tmp_path: Path) -> None:
    # The installer's --binary default: the unpacked program directory; the one-file build is not shipped.
    code, out, _ = run_to_exit(containerd, tmp_path, "node-bin", images.installer,
                               command=["/opt/cri-resmgr/lib/cri-resmgr"], args=["--version"])
    assert code == 0, out
    assert out.startswith("cri-resmgr ")
