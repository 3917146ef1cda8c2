"""The static policy: exclusive CPUs by topology, reserved CPUs."""

from __future__ import annotations

from unit.resmgr.policy_helpers import burstable, ctr, guaranteed, policy_from_yaml

from resmgr.topology import Topology

STATIC = "policy:\n  Active: static\n  ReservedResources:\n    cpu: {reserved}\n"


def test_static_exclusive_by_topology(topologies: dict[str, Topology]) -> None:
    topo = topologies["2s-2n-16c-2t"]
    p = policy_from_yaml(STATIC.format(reserved="cpuset:0,64"), topo)
    p.allocate("be", ctr("be"))
    # 64 CPUs: one whole socket, and not socket 0 which holds the reserved CPUs.
    p.allocate("big", guaranteed("big", 64000))
    assert p.placement("big")[0] == topo.packages[1]
    # 4 CPUs: two whole cores.
    p.allocate("four", guaranteed("four", 4000))
    four = p.placement("four")[0]
    assert len(four) == 4 and sum(1 for c in topo.cores.values() if c <= four) == 2
    assert not four & {0, 64}
    # Non-integer or non-Guaranteed requests share.
    p.allocate("frac", guaranteed("frac", 1500))
    p.allocate("burst", burstable("burst", 2000))
    shared = p.placement("be")[0]
    assert p.placement("frac")[0] == shared == p.placement("burst")[0]
    assert shared == topo.online - topo.packages[1] - four
    assert {0, 64} <= shared  # reserved CPUs stay shared
    p.release("big")
    assert p.placement("be")[0] == topo.online - four


def test_static_reserved_never_exclusive(topologies: dict[str, Topology]) -> None:
    topo = topologies["this-machine"]
    p = policy_from_yaml(STATIC.format(reserved=1), topo)
    p.allocate("g1", guaranteed("g1", 1000))
    p.allocate("g2", guaranteed("g2", 1000))  # no room left: falls back to shared
    assert len(p.placement("g1")[0]) == 1
    assert p.grants["g2"].kind == "shared"
    assert p.placement("g1")[0].isdisjoint(p.reserved)
    assert p.placement("g2")[0] == p.reserved
