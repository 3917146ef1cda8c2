"""installer.release: the program directory's manifest and digest, its verified copy, the atomic symlink switch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from installer import release
from installer.host import Host


def program(top: Path, body: str = "v1") -> Path:
    (top / "_internal" / "lib").mkdir(parents=True)
    exe = top / "cri-resmgr"
    exe.write_text(f"#!/bin/sh\necho {body}\n")
    exe.chmod(0o755)
    (top / "_internal" / "lib" / "mod.so").write_bytes(b"\x7fELF" + body.encode())
    (top / "_internal" / "libpython.so").symlink_to("lib/mod.so")
    return top


@pytest.fixture()
def host(tmp_path: Path) -> Host:
    root = tmp_path / "node"
    root.mkdir()
    return Host(root=root, runner=None)  # type: ignore[arg-type]  # no commands run here


def test_digest_covers_content_mode_and_layout(tmp_path: Path) -> None:
    base = release.manifest_of(program(tmp_path / "a")).digest
    assert release.manifest_of(program(tmp_path / "b")).digest == base  # same content, other place
    changed = program(tmp_path / "c")
    (changed / "_internal" / "lib" / "mod.so").write_bytes(b"other")
    assert release.manifest_of(changed).digest != base
    mode = program(tmp_path / "d")
    (mode / "_internal" / "lib" / "mod.so").chmod(0o600)
    assert release.manifest_of(mode).digest != base
    link = program(tmp_path / "e")
    (link / "_internal" / "libpython.so").unlink()
    (link / "_internal" / "libpython.so").symlink_to("lib")
    assert release.manifest_of(link).digest != base


def test_a_single_file_is_a_release_of_one_file_named_cri_resmgr(tmp_path: Path, host: Host) -> None:
    exe = tmp_path / "some-script"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    manifest = release.manifest_of(exe)
    assert [line.rsplit(" ", 1)[1] for line in manifest.lines] == ["cri-resmgr"]
    path = release.install(host, exe, manifest)
    assert path == f"{release.RELEASES_DIR}/{manifest.digest}/cri-resmgr"
    assert host.read_bytes(path) == exe.read_bytes()
    assert os.access(host.path(path), os.X_OK)


def test_links_out_of_the_release_are_refused(tmp_path: Path) -> None:
    top = program(tmp_path / "p")
    (top / "_internal" / "evil").symlink_to("/etc/passwd")
    with pytest.raises(ValueError, match="points out of the release"):
        release.manifest_of(top)


def test_install_copies_verifies_and_is_idempotent(tmp_path: Path, host: Host) -> None:
    src = program(tmp_path / "src")
    manifest = release.manifest_of(src)
    exe = release.install(host, src, manifest)
    rel = host.path(release.release_dir(manifest.digest))
    assert release.manifest_of(rel) == manifest
    assert os.readlink(rel / "_internal" / "libpython.so") == "lib/mod.so"
    assert release.is_installed(host, manifest.digest)
    before = os.stat(rel).st_ino
    assert release.install(host, src, manifest) == exe
    assert os.stat(rel).st_ino == before  # an intact release is not copied again
    assert sorted(p.name for p in host.path(release.RELEASES_DIR).iterdir()) == [manifest.digest]


def test_a_damaged_release_is_replaced(tmp_path: Path, host: Host) -> None:
    src = program(tmp_path / "src")
    manifest = release.manifest_of(src)
    release.install(host, src, manifest)
    (host.path(release.release_dir(manifest.digest)) / "_internal" / "lib" / "mod.so").write_bytes(b"torn")
    assert not release.is_installed(host, manifest.digest)
    release.install(host, src, manifest)
    assert release.is_installed(host, manifest.digest)


def test_a_copy_that_does_not_match_its_manifest_never_gets_the_name(tmp_path: Path, host: Host) -> None:
    src = program(tmp_path / "src")
    manifest = release.manifest_of(src)
    (src / "_internal" / "lib" / "mod.so").write_bytes(b"changed after the manifest was taken")
    with pytest.raises(OSError, match="does not match its manifest"):
        release.install(host, src, manifest)
    assert list(host.path(release.RELEASES_DIR).iterdir()) == []  # no release, no leftover temp dir


def test_switch_is_a_symlink_replaced_in_one_rename(tmp_path: Path, host: Host) -> None:
    link = "/opt/cri-resmgr/bin/cri-resmgr"
    one = release.manifest_of(program(tmp_path / "one", "v1"))
    two = release.manifest_of(program(tmp_path / "two", "v2"))
    for src, m in ((tmp_path / "one", one), (tmp_path / "two", two)):
        release.install(host, src, m)
    assert release.current(host, link) is None
    assert release.point(host, link, one.digest)
    assert release.current(host, link) == one.digest
    assert not release.point(host, link, one.digest)
    assert host.read_text(link).endswith("echo v1\n")  # Host resolves the link inside the node's root
    assert release.point(host, link, two.digest)
    assert release.current(host, link) == two.digest
    assert host.read_text(link).endswith("echo v2\n")
    assert sorted(p.name for p in host.path("/opt/cri-resmgr/bin").iterdir()) == ["cri-resmgr"]  # no temp link
    assert release.unpoint(host, link)  # removes the link, not the release's executable it points at
    assert list(host.path("/opt/cri-resmgr/bin").iterdir()) == []
    assert release.is_installed(host, two.digest)
    assert not release.unpoint(host, link)


def test_a_regular_file_at_the_stable_path_is_replaced_by_the_link(tmp_path: Path, host: Host) -> None:
    # Nodes installed by the one-file version have the executable itself at the stable path.
    link = "/opt/cri-resmgr/bin/cri-resmgr"
    host.makedirs("/opt/cri-resmgr/bin")
    host.write_atomic(link, b"one-file", mode=0o755)
    assert release.current(host, link) is None
    m = release.manifest_of(program(tmp_path / "src"))
    release.install(host, tmp_path / "src", m)
    assert release.point(host, link, m.digest)
    assert release.current(host, link) == m.digest


def test_prune_keeps_the_named_releases_and_drops_interrupted_copies(tmp_path: Path, host: Host) -> None:
    digests = []
    for body in ("v1", "v2", "v3"):
        m = release.manifest_of(program(tmp_path / body, body))
        release.install(host, tmp_path / body, m)
        digests.append(m.digest)
    (host.path(release.RELEASES_DIR) / ".incoming-x").mkdir()  # a copy killed half-way
    removed = release.prune(host, {digests[1], digests[2]})
    assert sorted(removed) == sorted([digests[0], ".incoming-x"])
    assert sorted(p.name for p in host.path(release.RELEASES_DIR).iterdir()) == sorted(digests[1:])
