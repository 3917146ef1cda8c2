"""One local landscape per test session, shared by the local e2e scenarios (start-up is the costly part)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from devland import Images, Landscape, build_images
from devland.tools import Tools


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
