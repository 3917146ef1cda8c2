"""One local landscape per test session, shared by the local e2e scenarios (start-up is the costly part)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.landscape import Images, Landscape
from fixtures.tools import Tools

REPO = Path(__file__).resolve().parents[3]


def build_images(out: Path) -> Path:
    """The single-file executable and both images under the chart's default names (images.yaml), so the
    extension's image vector points at what the nodes have. Both builds are cached by content hash."""
    exe = REPO / "_out" / "bin" / "cri-resmgr"
    r = subprocess.run(["bash", str(REPO / "hacks" / "build-executable.sh"), str(exe)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"build-executable.sh failed:\n{r.stdout}\n{r.stderr}"
    r = subprocess.run(["python3", str(REPO / "hacks" / "build-images.py"), "--executable", str(exe),
                        "--output-dir", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"build-images.py failed:\n{r.stdout}\n{r.stderr}"
    return out


@pytest.fixture(scope="session")
def landscape(tools: Tools, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Landscape]:
    if os.geteuid() != 0:
        pytest.fail("the landscape needs root (network namespace, systemd-nspawn, cgroups)", pytrace=False)
    images = Images.from_dir(tools, build_images(tmp_path_factory.mktemp("landscape-images")))
    land = Landscape(tools, Path(tempfile.mkdtemp(prefix="landscape-", dir="/tmp")), images)
    land.up()
    try:
        yield land
    finally:
        left = land.down()
        assert not left, f"the landscape left things behind: {left}"


@pytest.fixture
def inside(landscape: Landscape) -> Iterator[Landscape]:
    """The test runs inside the landscape's network namespace (and only the test)."""
    with landscape.inside():
        yield landscape
