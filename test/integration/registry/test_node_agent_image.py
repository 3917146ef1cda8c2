"""The gardener-node-agent image of devland/node_agent_image.py along the path node-agent's self-update
takes (docs/development/current-gardener.md, "How it updates itself"): pushed into a real docker-registry with
hacks/registry.py push (skopeo), pulled by a real containerd in namespace ``default`` with the overlayfs
snapshotter and the hosts of a certs.d directory, and ``/gardener-node-agent`` read back from a mounted
read-only view, as node-agent's containerd extractor does (pkg/nodeagent/registry/containerd_extractor.go: Pull
with WithPullUnpack on the default snapshotter under a lease, View of the image's chain, mount, copy).

Two places for containerd's root: /tmp (ext4 here), and a directory on an overlay mount, which is where a
landscape node's /var/lib/containerd lies (its root is an overlay of the shared rootfs and its disk). An
overlay cannot be the upper directory of another overlay, but neither unpacking nor a read-only view needs
one: the overlayfs snapshotter serves a one-layer view as a bind mount, and a view of several layers as an
overlay of lower directories only.
"""

from __future__ import annotations

import contextlib
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.containerd import CONTAINERD2, DEBIAN, Containerd

from devland.node_agent_image import image_archive
from devland.tools import Tools

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
def containerd_under(tools: Tools, certs_dir: Path, parent: Path, runtime: str) -> Iterator[Containerd]:
    ctrd = Containerd(tools, Path(tempfile.mkdtemp(prefix="c-", dir=parent)), registry_config_path=certs_dir,
                      runtime=runtime)
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


def mounted_below(path: Path) -> list[str]:
    prefix = f"{path}/"
    return [f.split()[4] for f in Path("/proc/self/mountinfo").read_text().splitlines()
            if f.split()[4].startswith(prefix)]


def copy_from_image(ctrd: Containerd, ref: str, path_in_image: str, certs_dir: Path, dest: Path) -> None:
    """What node-agent's extractor does: pull and unpack with the overlayfs snapshotter, mount a read-only
    View of the image's chain under a lease, copy the file, unmount, drop the lease and the view."""
    ctr(ctrd, "images", "pull", "--snapshotter", "overlayfs", "--hosts-dir", str(certs_dir), ref)
    mountpoint = Path(tempfile.mkdtemp(prefix="na-mnt-", dir="/tmp"))
    # `ctr images mount` holds its view under a lease named after the mountpoint, as node-agent holds its own:
    # a view without one is garbage containerd may collect at any time.
    ctr(ctrd, "images", "mount", "--snapshotter", "overlayfs", ref, str(mountpoint))
    try:
        shutil.copy2(mountpoint / path_in_image.lstrip("/"), dest)
    finally:
        ctr(ctrd, "images", "unmount", str(mountpoint))
        # Synchronously: containerd 2's mount manager keeps its own mount of the view until the lease's
        # resources are collected (`ctr images unmount --rm` leaves it to a later collection).
        ctr(ctrd, "leases", "delete", "--sync", str(mountpoint))
        mountpoint.rmdir()


# Gardener's nodes run containerd 2; the landscape's nodes run Debian's 1.6 today.
@pytest.mark.parametrize("runtime", [CONTAINERD2, DEBIAN])
@pytest.mark.parametrize("root", ["tmp", "overlay"])
def test_containerd_pulls_the_image_and_the_binary_comes_out_unchanged(
        root: str, runtime: str, registry_mod, registry, certs_dir: Path, tools: Tools, tmp_path: Path) -> None:
    binary = fake_binary(tmp_path / "gardener-node-agent-next")
    ref = f"{registry.address}/gardener-node-agent:{TAG}"
    archive = image_archive(binary, ref, tmp_path / "gardener-node-agent.tar")
    pushed = registry_mod.push(archive, registry.address)
    assert [p.destination for p in pushed] == [ref]

    with contextlib.ExitStack() as stack:
        parent = stack.enter_context(overlay_root()) if root == "overlay" else Path("/tmp")
        ctrd = stack.enter_context(containerd_under(tools, certs_dir, parent, runtime))
        out = tmp_path / "copied"
        copy_from_image(ctrd, ref, "/gardener-node-agent", certs_dir, out)
        assert ref in ctr(ctrd, "images", "list", "-q").split()
        assert out.read_bytes() == binary.read_bytes()
        assert stat.S_IMODE(out.stat().st_mode) == 0o755
        # Only the image's own snapshot is left, and nothing stays mounted.
        snapshots = ctr(ctrd, "snapshots", "--snapshotter", "overlayfs", "ls").splitlines()[1:]
        assert [line.split()[-1] for line in snapshots] == ["Committed"]
        assert mounted_below(ctrd.workdir) == []
