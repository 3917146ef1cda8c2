"""Behaviour of each policy on the fake topologies."""

from __future__ import annotations

import pytest
from fixtures.seed_configs import SEED_BALLOONS, UPSTREAM_BALLOONS
from unit.resmgr.policy_helpers import burstable, ctr, guaranteed, policy_from_yaml

from resmgr.config import POLICY_NAMES, ConfigError, validate_config_text
from resmgr.policy.registry import available_policies, create_policy
from resmgr.topology import Topology, parse_cpuset


def test_registry_matches_schema() -> None:
    assert tuple(available_policies()) == POLICY_NAMES


def test_none_changes_nothing(topologies: dict[str, Topology]) -> None:
    p = policy_from_yaml("policy:\n  Active: none\n", topologies["2s-2n-16c-2t"])
    p.allocate("a", guaranteed("a", 4000))
    assert p.placements() == {"a": (None, None)}


# -- static -------------------------------------------------------------------------------------

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


# -- topology-aware -----------------------------------------------------------------------------

TA = """\
policy:
  Active: topology-aware
  ReservedResources:
    cpu: 750m
  topology-aware:
{options}
"""


def ta(topo: Topology, options: str = "    PinCPU: true"):
    return policy_from_yaml(TA.format(options=options), topo)


def test_topology_aware_pool_tree(topologies: dict[str, Topology]) -> None:
    p = ta(topologies["8numa-256"])
    names = set(p.pools)
    assert {"root", "socket #0", "socket #1", "die #0.0", "die #1.1"} <= names
    assert sum(1 for n in names if n.startswith("NUMA node")) == 8
    p2 = ta(topologies["this-machine"])
    assert set(p2.pools) == {"root"}


def test_topology_aware_reserved_and_pinning(topologies: dict[str, Topology]) -> None:
    topo = topologies["8numa-256"]
    p = ta(topo, "    ReservedPoolNamespaces: [monitoring]")
    assert len(p.reserved) == 1  # 750m rounds up to one CPU
    p.allocate("sys", burstable("sys", 100, ns="kube-system"))
    p.allocate("mon", ctr("mon", ns="monitoring"))
    assert p.placement("sys") == (p.reserved, topo.nodes_of(p.reserved))
    assert p.placement("mon")[0] == p.reserved
    p.allocate("g", guaranteed("g", 2000))
    cpus, mems = p.placement("g")
    assert len(cpus) == 2 and len(mems) == 1 and cpus <= topo.nodes[next(iter(mems))]
    # A Guaranteed container with a fraction gets exclusive + the pool's shared CPUs.
    p.allocate("mixed", guaranteed("mixed", 2500))
    grant = p.grants["mixed"]
    assert len(grant.exclusive) == 2 and grant.shared_milli == 500
    assert p.placement("mixed")[0] > grant.exclusive
    # A request bigger than a NUMA node goes up the tree to a die/socket pool.
    p.allocate("wide", guaranteed("wide", 40000))
    assert p.pools[p.grants["wide"].pool].depth < 3
    assert len(p.placement("wide")[1]) >= 2


def test_topology_aware_best_effort_spreads(topologies: dict[str, Topology]) -> None:
    p = ta(topologies["8numa-256"])
    for i in range(8):
        p.allocate(f"b{i}", burstable(f"b{i}", 8000))
    assert len({p.grants[f"b{i}"].pool for i in range(8)}) == 8


def test_topology_aware_isolated_and_preferences(topologies: dict[str, Topology]) -> None:
    topo = topologies["2s-2n-16c-2t"]
    p = ta(topo)
    p.allocate("iso", guaranteed("iso", 1000))
    assert p.grants["iso"].kind == "isolated" and p.placement("iso")[0] <= topo.isolated
    key = "prefer-isolated-cpus.cri-resource-manager.intel.com"
    p.allocate("noiso", guaranteed("noiso", 1000, annotations={f"{key}/container.noiso": "false"}))
    assert p.grants["noiso"].kind == "exclusive" and not p.placement("noiso")[0] & topo.isolated
    shared_key = "prefer-shared-cpus.cri-resource-manager.intel.com"
    p.allocate("sh", guaranteed("sh", 2000, annotations={f"{shared_key}/pod": "true"}))
    assert p.grants["sh"].kind == "shared" and len(p.placement("sh")[0]) > 2
    p2 = ta(topo, "    PreferSharedCPUs: true\n    PinMemory: false\n    PinCPU: false")
    p2.allocate("g", guaranteed("g", 2000))
    assert p2.grants["g"].kind == "shared" and p2.placement("g") == (None, None)


def test_topology_aware_colocate_pods(topologies: dict[str, Topology]) -> None:
    p = ta(topologies["8numa-256"], "    ColocatePods: true")
    p.allocate("a", burstable("a", 1000, pod="web"))
    for i in range(5):
        p.allocate(f"x{i}", burstable(f"x{i}", 1000))
        p.allocate(f"w{i}", burstable(f"w{i}", 1000, pod="web"))
    assert len({p.grants[f"w{i}"].pool for i in range(5)} | {p.grants["a"].pool}) == 1
    assert len({p.grants[f"x{i}"].pool for i in range(5)}) > 1


def test_topology_aware_colocate_namespaces(topologies: dict[str, Topology]) -> None:
    p = ta(topologies["8numa-256"], "    ColocateNamespaces: true")
    for i in range(6):
        p.allocate(f"a{i}", burstable(f"a{i}", 1000, ns="team-a"))
        p.allocate(f"b{i}", burstable(f"b{i}", 1000, ns="team-b"))
    assert len({p.grants[f"a{i}"].pool for i in range(6)}) == 1
    assert len({p.grants[f"b{i}"].pool for i in range(6)}) == 1
    assert p.grants["a0"].pool != p.grants["b0"].pool  # the second namespace spread elsewhere


def test_available_resources_limit_everything(topologies: dict[str, Topology]) -> None:
    topo = topologies["2s-2n-16c-2t"]
    text = ("policy:\n  Active: topology-aware\n  AvailableResources:\n    cpu: cpuset:16-31,80-95\n"
            "  ReservedResources:\n    cpu: cpuset:16\n")
    p = policy_from_yaml(text, topo)
    allowed = parse_cpuset("16-31,80-95")
    p.allocate("g", guaranteed("g", 4000))
    p.allocate("b", ctr("b"))
    for cpus, mems in p.placements().values():
        assert cpus <= allowed and mems == {1}


# -- balloons -----------------------------------------------------------------------------------

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
