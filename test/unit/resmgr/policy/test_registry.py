"""The policy registry: names, example configs, topology-dependent config errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from unit.resmgr.policy_helpers import burstable, ctr, guaranteed

from resmgr.config import POLICY_NAMES, ConfigError, validate_config_text
from resmgr.policy.registry import available_policies, create_policy
from resmgr.topology import Topology


def test_registry_matches_schema() -> None:
    assert tuple(available_policies()) == POLICY_NAMES


@pytest.mark.parametrize(("text", "field"), [
    ("policy:\n  Active: static\n  AvailableResources:\n    cpu: cpuset:0-200\n", "policy.AvailableResources.cpu"),
    ("policy:\n  Active: static\n  ReservedResources:\n    cpu: 300\n", "policy.ReservedResources.cpu"),
    ("policy:\n  Active: balloons\n  balloons:\n    BalloonTypes:\n      - Name: x\n        MinCPUs: 100\n"
     "        MinBalloons: 2\n", "policy.balloons.BalloonTypes[0].MinBalloons"),
])
def test_topology_dependent_config_errors(topologies: dict[str, Topology], text: str, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        create_policy(validate_config_text(text), topologies["2s-2n-16c-2t"])
    assert info.value.field == field


def test_policy_registry_always_offers_none():
    assert "none" in available_policies()


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
