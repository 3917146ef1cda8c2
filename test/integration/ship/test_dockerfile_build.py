"""hacks/build-dockerfile-images.py: its cache and its errors (the images themselves: test_images.py)."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import pytest
from integration.ship.dockerfile_build import SCRIPT, build_dockerfile_images

pytestmark = [pytest.mark.integration, pytest.mark.timeout(2700)]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["python3", str(SCRIPT), *args], capture_output=True, text=True, timeout=2400)


def repo_tags(archive: Path) -> list[str]:
    with tarfile.open(archive) as tar:
        return [t for entry in json.load(tar.extractfile("manifest.json")) for t in entry["RepoTags"]]


def test_unchanged_inputs_come_from_the_cache(dockerfile_images: dict[str, Path], dockerfile_context: Path,
                                              tmp_path: Path) -> None:
    # The session fixture built (or found) the images from this context; under other names they are not rebuilt.
    r = build_dockerfile_images(dockerfile_context, tmp_path, "--registry", "127.0.0.1:5000/other", "--tag", "t2")
    assert r.returncode == 0, r.stderr
    assert "up to date" in r.stderr and "buildah bud" not in r.stderr, r.stderr
    assert repo_tags(tmp_path / "installation.tar") == ["127.0.0.1:5000/other/cri-resmgr-installer:t2",
                                                        "127.0.0.1:5000/other/cri-resmgr-agent:t2"]
    assert repo_tags(tmp_path / "extension.tar") == ["127.0.0.1:5000/other/gardener-extension-cri-resmgr:t2"]
    # Same layers as the fixture's copy: only the names differ.
    with tarfile.open(tmp_path / "extension.tar") as a, tarfile.open(dockerfile_images["extension"]) as b:
        layers = {m.name: m.size for m in a if m.name != "manifest.json"}
        assert layers == {m.name: m.size for m in b if m.name != "manifest.json"}
    assert (tmp_path / "dockerfile-images.sha256").read_text().strip()


def test_missing_inputs_are_named(tmp_path: Path) -> None:
    r = run("--output-dir", str(tmp_path), "--rootfs", str(tmp_path / "no-rootfs.tar.zst"))
    assert r.returncode != 0
    assert "rootfs not found" in r.stderr and "make setup" in r.stderr and "Traceback" not in r.stderr
    r = run("--output-dir", str(tmp_path), "--helm", str(tmp_path / "no-helm"))
    assert r.returncode != 0 and "helm not found" in r.stderr and "make setup" in r.stderr
    assert not (tmp_path / "extension.tar").exists()
