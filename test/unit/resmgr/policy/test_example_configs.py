"""The example configs shipped in examples/configs validate and run on the fake topologies."""

from __future__ import annotations

from pathlib import Path

import pytest
from unit.resmgr.policy_helpers import burstable, ctr, guaranteed

from resmgr.config import validate_config_text
from resmgr.policy.registry import create_policy
from resmgr.topology import Topology

EXAMPLES = sorted((Path(__file__).resolve().parents[4] / "examples" / "configs").glob("*.yaml"))


def test_examples_exist() -> None:
    assert EXAMPLES, "examples/configs/*.yaml are missing"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
@pytest.mark.parametrize("shape", ["2s-2n-16c-2t", "8numa-256"])
def test_example_config_runs(path: Path, shape: str, topologies: dict[str, Topology]) -> None:
    config = validate_config_text(path.read_text(), source=str(path))
    policy = create_policy(config, topologies[shape])
    for i, ns in enumerate(["default", "prod-a", "batch", "kube-system"]):
        policy.allocate(f"g{i}", guaranteed(f"g{i}", 2000, ns=ns))
        policy.allocate(f"b{i}", burstable(f"b{i}", 500, ns=ns))
        policy.allocate(f"e{i}", ctr(f"e{i}", ns=ns))
    for cpus, _ in policy.placements().values():
        assert cpus is None or cpus  # a pinned container never gets an empty cpuset
