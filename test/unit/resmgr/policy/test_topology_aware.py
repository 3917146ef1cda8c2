"""The topology-aware policy: pool tree, pinning, isolation, colocation."""

from __future__ import annotations

from unit.resmgr.policy_helpers import burstable, ctr, guaranteed, policy_from_yaml

from resmgr.topology import Topology

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
