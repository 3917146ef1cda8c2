"""The balloons policy: seed and upstream samples, reserved and default balloons, growing and shrinking."""

from __future__ import annotations

from fixtures.seed_configs import SEED_BALLOONS, UPSTREAM_BALLOONS
from unit.resmgr.policy_helpers import burstable, ctr, policy_from_yaml

from resmgr.topology import Topology, parse_cpuset


def test_seed_balloons_example(topologies: dict[str, Topology]) -> None:
    p = policy_from_yaml(SEED_BALLOONS, topologies["2s-2n-16c-2t"])
    medium = [b for b in p.balloons.values() if b.type == "mediumBalloon"]
    assert len(medium) == 2 and all(len(b.cpus) == 3 for b in medium)
    assert not medium[0].cpus & medium[1].cpus
    annotation = {"balloon.balloons.cri-resource-manager.intel.com": "mediumBalloon"}
    p.allocate("m", burstable("m", 2000, annotations=annotation))
    assert p.placement("m")[0] in (medium[0].cpus, medium[1].cpus)
    p.allocate("sys", ctr("sys", ns="kube-system"))
    assert p.placement("sys")[0] == {15}
    p.allocate("d", burstable("d", 1500))
    cpus = p.placement("d")[0]
    assert len(cpus) == 2 and cpus <= parse_cpuset("1-14")


def test_upstream_balloons_sample(topologies: dict[str, Topology]) -> None:
    p = policy_from_yaml(UPSTREAM_BALLOONS, topologies["8numa-256"])
    turbo = [b for b in p.balloons.values() if b.type == "full-core-turbo"]
    assert len(turbo) == 2 and all(len(b.cpus) == 2 for b in turbo)
    p.allocate("hp", burstable("hp", 1000, ns="highperf"))
    assert p.balloons[p.grants["hp"].pool].type == "full-core-turbo"
    p.allocate("web", burstable("web", 3000, ns="default"))
    assert p.balloons[p.grants["web"].pool].type == "socket-size"
    for cpus, _ in p.placements().values():
        assert cpus <= parse_cpuset("1-14")


def test_balloons_user_defined_reserved_and_default(topologies: dict[str, Topology]) -> None:
    text = """\
policy:
  Active: balloons
  ReservedResources:
    cpu: 2
  balloons:
    BalloonTypes:
      - Name: reserved
        Namespaces: [monitoring]
      - Name: default
        MinCPUs: 4
        MinBalloons: 1
"""
    p = policy_from_yaml(text, topologies["8numa-256"])
    p.allocate("mon", ctr("mon", ns="monitoring"))
    p.allocate("web", burstable("web", 500))
    assert p.placement("mon")[0] == p.reserved
    assert len(p.placement("web")[0]) == 4 and not p.placement("web")[0] & p.reserved


def test_balloons_grow_and_shrink(topologies: dict[str, Topology]) -> None:
    topo = topologies["8numa-256"]
    text = """\
policy:
  Active: balloons
  ReservedResources:
    cpu: 1
  balloons:
    PinMemory: true
    BalloonTypes:
      - Name: app
        Namespaces: [app-*]
        MinCPUs: 2
        MaxCPUs: 8
        MaxBalloons: 2
"""
    p = policy_from_yaml(text, topo)
    assert not [b for b in p.balloons.values() if b.type == "app"]  # MinBalloons 0
    p.allocate("a1", burstable("a1", 1000, ns="app-x"))
    b = p.balloons[p.grants["a1"].pool]
    assert len(b.cpus) == 2  # MinCPUs
    p.allocate("a2", burstable("a2", 3000, ns="app-x"))
    assert p.grants["a2"].pool == b.name and len(b.cpus) == 4
    p.allocate("a3", burstable("a3", 5000, ns="app-y"))  # does not fit: a second balloon
    assert p.grants["a3"].pool != b.name
    second = p.balloons[p.grants["a3"].pool]
    assert len(second.cpus) == 5 and not second.cpus & b.cpus
    p.allocate("a4", burstable("a4", 6000, ns="app-z"))  # MaxBalloons reached: overcommit
    assert p.grants["a4"].pool in (b.name, second.name)
    p.release("a2")
    p.release("a4")
    assert len(p.balloons[b.name].cpus) == 2
    p.release("a1")
    p.release("a3")
    assert not [x for x in p.balloons.values() if x.type == "app"]
    assert len(p._free) == 255  # everything but the reserved CPU came back
