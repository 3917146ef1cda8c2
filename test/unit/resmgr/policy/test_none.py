"""The none policy."""

from __future__ import annotations

from unit.resmgr.policy_helpers import guaranteed, policy_from_yaml

from resmgr.topology import Topology


def test_none_changes_nothing(topologies: dict[str, Topology]) -> None:
    p = policy_from_yaml("policy:\n  Active: none\n", topologies["2s-2n-16c-2t"])
    p.allocate("a", guaranteed("a", 4000))
    assert p.placements() == {"a": (None, None)}
