"""Shipping artefacts for the ship tests: the single-file executable and both kinds of images, built once per
session (each cached by content hash, so a warm run takes seconds)."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from integration.ship.dockerfile_build import build_dockerfile_images, stage_context

from devland.hacks import build_executable

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def executable() -> Path:
    """hacks/build-executable.sh's output; rebuilt only when the sources changed (a build takes ~1.5 min)."""
    out = build_executable()
    assert out.is_file()
    return out


@pytest.fixture(scope="session")
def shipped_images(executable: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """hacks/build-images.py's docker-archive tars, built from the session's executable."""
    out = tmp_path_factory.mktemp("images")
    r = subprocess.run(["python3", str(REPO / "hacks" / "build-images.py"), "--executable", str(executable),
                        "--output-dir", str(out), "--registry", "registry.test/cri-resmgr", "--tag", "ship-test"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"build-images.py failed:\n{r.stdout}\n{r.stderr}"
    return {"extension": out / "extension.tar", "installation": out / "installation.tar"}


@pytest.fixture(scope="session")
def dockerfile_context() -> Iterator[Path]:
    """A frozen copy of the build context: edits made to the tree meanwhile cannot change what is built.
    Outside pytest's basetemp, which concurrent sessions prune while a long build runs."""
    dest = Path(tempfile.mkdtemp(prefix="dockerfile-context-", dir="/tmp"))
    try:
        yield stage_context(dest)
    finally:
        shutil.rmtree(dest, ignore_errors=True)


@pytest.fixture(scope="session")
def dockerfile_images(dockerfile_context: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The Dockerfile's targets built with buildah (hacks/build-dockerfile-images.py): minutes cold, seconds warm."""
    out = tmp_path_factory.mktemp("dockerfile-images")
    r = build_dockerfile_images(dockerfile_context, out, "--registry", "registry.test/dockerfile", "--tag", "ship-test")
    assert r.returncode == 0, f"build-dockerfile-images.py failed:\n{r.stdout}\n{r.stderr[-6000:]}"
    return {"extension": out / "extension.tar", "installation": out / "installation.tar"}
