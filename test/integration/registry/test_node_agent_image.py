"""The gardener-node-agent image of fixtures/landscape/node_agent_image.py along the path node-agent's self-update
takes (docs/development/current-gardener.md, "How it updates itself"): pushed into a real docker-registry with
hacks/registry.py push (skopeo), pulled by a real containerd 2 in namespace ``default`` with the overlayfs
snapshotter and the hosts of a certs.d directory, and ``/gardener-node-agent`` read back from the mounted
snapshot, as node-agent's containerd extractor does (pkg/nodeagent/registry/containerd_extractor.go: Pull with
WithPullUnpack on the default snapshotter, View of the image's chain, mount, copy).

Two places for containerd's root: /tmp (ext4 here), and a directory on an overlay mount, which is where a
landscape node's /var/lib/containerd lies (its root is an overlay of the shared rootfs and its disk). An
overlay cannot be the upper directory of another overlay, so there the snapshotter only works for what it
serves with bind mounts, as it does for a one-layer image.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.containerd import CONTAINERD2, Containerd
from fixtures.landscape.node_agent_image import image_archive
from fixtures.tools import Tools

pytestmark = pytest.mark.integration

TAG = "v1.149.3-landscape.1"


def fake_binary(path: Path, size: int = 300_001) -> Path:
    path.write_bytes(bytes((i * 7 + i // 251) % 256 for i in range(size)))
    path.chmod(0o755)
    return path


@contextlib.contextmanager
def overlay_root() -> Iterator[Path]:
    """A directory on a fresh overlay mount (lower, upper and work on /tmp), like a landscape node's root."""
    base = Path(tempfile.mkdtemp(prefix="na-ovl-", dir="/tmp"))
    for d in ("lower", "upper", "work", "root"):
        (base / d).mkdir()
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                    f"lowerdir={base / 'lower'},upperdir={base / 'upper'},workdir={base / 'work'}", str(base / "root")],
                   check=True, capture_output=True, text=True)
    try:
        yield base / "root"
    finally:
        subprocess.run(["umount", "-R", str(base / "root")], check=False, capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


@contextlib.contextmanager
def containerd2_under(tools: Tools, certs_dir: Path, parent: Path) -> Iterator[Containerd]:
    ctrd = Containerd(tools, Path(tempfile.mkdtemp(prefix="c-", dir=parent)), registry_config_path=certs_dir,
                      runtime=CONTAINERD2)
    try:
        ctrd.start()
        yield ctrd
    finally:
        ctrd.stop()


def ctr(ctrd: Containerd, *args: str) -> str:
    r = subprocess.run([ctrd.binary("ctr"), "--address", ctrd.socket, "-n", "default", *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"ctr {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}"
    return r.stdout


def chain_id(archive: Path) -> str:
    """The snapshot key of the image's unpacked layers: for one layer, its diff_id."""
    with tarfile.open(archive) as tar:
        [entry] = json.load(tar.extractfile("manifest.json"))
        diff_ids = json.load(tar.extractfile(entry["Config"]))["rootfs"]["diff_ids"]
    assert len(diff_ids) == 1
    return diff_ids[0]


def copy_from_image(ctrd: Containerd, ref: str, chain: str, path_in_image: str, certs_dir: Path, dest: Path) -> None:
    """What node-agent's extractor does: pull and unpack with the overlayfs snapshotter, a View of the image's
    chain, the view's mounts mounted by the client itself (not by containerd's mount manager, which `ctr images
    mount` uses and whose mount `ctr images unmount` leaves behind), the file copied, unmounted, view removed."""
    ctr(ctrd, "images", "pull", "--snapshotter", "overlayfs", "--hosts-dir", str(certs_dir), ref)
    key = f"na-view-{secrets.token_hex(4)}"
    mounts = json.loads(ctr(ctrd, "snapshots", "--snapshotter", "overlayfs", "view", "--mounts", key, chain))
    mountpoint = Path(tempfile.mkdtemp(prefix="na-mnt-", dir="/tmp"))
    try:
        for m in mounts:
            subprocess.run(["mount", "-t", m["Type"], m["Source"], str(mountpoint), "-o", ",".join(m["Options"])],
                           check=True, capture_output=True, text=True)
        shutil.copy2(mountpoint / path_in_image.lstrip("/"), dest)
    finally:
        subprocess.run(["umount", "-R", str(mountpoint)], check=False, capture_output=True)
        mountpoint.rmdir()
        ctr(ctrd, "snapshots", "--snapshotter", "overlayfs", "rm", key)


@pytest.mark.parametrize("root", ["tmp", "overlay"])
def test_containerd2_pulls_the_image_and_the_binary_comes_out_unchanged(
        root: str, registry_mod, registry, certs_dir: Path, tools: Tools, tmp_path: Path) -> None:
    binary = fake_binary(tmp_path / "gardener-node-agent-next")
    ref = f"{registry.address}/gardener-node-agent:{TAG}"
    archive = image_archive(binary, ref, tmp_path / "gardener-node-agent.tar")
    pushed = registry_mod.push(archive, registry.address)
    assert [p.destination for p in pushed] == [ref]

    with contextlib.ExitStack() as stack:
        parent = stack.enter_context(overlay_root()) if root == "overlay" else Path("/tmp")
        ctrd = stack.enter_context(containerd2_under(tools, certs_dir, parent))
        out = tmp_path / "copied"
        copy_from_image(ctrd, ref, chain_id(archive), "/gardener-node-agent", certs_dir, out)
        assert ref in ctr(ctrd, "images", "list", "-q").split()
        assert out.read_bytes() == binary.read_bytes()
        assert stat.S_IMODE(out.stat().st_mode) == 0o755
