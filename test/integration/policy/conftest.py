"""Shared by the policy placement tests on real containerd: a node (``fixtures.placement.Node``) whose
ResourceManager decides on the fake sysfs tree of this machine's shape, behind the relay or the NRI front end.

``node_factory`` builds relay nodes on the session's containerd. A test parametrized over ``frontend``
(``FRONTENDS``) runs its scenario through both: the NRI nodes on ``nri_containerd``, a containerd 2 with NRI
on (test/conftest.py), one per module.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.containerd import Containerd
from fixtures.placement import NRI, RELAY, Node
from fixtures.sysfs_builder import THIS_MACHINE


@pytest.fixture
def frontend() -> str:
    """The relay unless a test is parametrized over ``fixtures.placement.FRONTENDS``."""
    return RELAY


@pytest.fixture
def node_factory(request: pytest.FixtureRequest, frontend: str) -> Iterator:
    runtime: Containerd = request.getfixturevalue("nri_containerd" if frontend == NRI else "containerd")
    nodes: list[Node] = []
    dirs: list[Path] = []

    def make(config_text: str, machine=THIS_MACHINE) -> Node:
        dirs.append(Path(tempfile.mkdtemp(prefix="policy-it-", dir="/tmp")))
        node = Node(runtime, dirs[-1], config_text, machine, frontend=frontend)
        nodes.append(node)
        return node.start()

    yield make
    for node in nodes:
        node.stop()
    runtime.remove_all()
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)
