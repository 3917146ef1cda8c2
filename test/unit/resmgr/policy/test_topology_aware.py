"""The topology-aware policy: pool tree, pinning, isolation, colocation."""

from __future__ import annotations

import pytest
from unit.resmgr.policy_helpers import burstable, ctr, guaranteed, policy_from_yaml

from resmgr.policy.base import RestoreError
from resmgr.topology import Topology

SHARED = "prefer-shared-cpus.cri-resource-manager.intel.com"
ISOLATED = "prefer-isolated-cpus.cri-resource-manager.intel.com"

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
    # A multi-CPU Guaranteed container with a fraction shares, as upstream, unless annotated not to:
    # then it gets exclusive CPUs plus the pool's shared CPUs.
    p.allocate("frac", guaranteed("frac", 2500))
    assert p.grants["frac"].kind == "shared" and p.grants["frac"].shared_milli == 2500
    p.allocate("mixed", guaranteed("mixed", 2500, annotations={f"{SHARED}/pod": "false"}))
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
    p.allocate("noiso", guaranteed("noiso", 1000, annotations={f"{ISOLATED}/container.noiso": "false"}))
    assert p.grants["noiso"].kind == "exclusive" and not p.placement("noiso")[0] & topo.isolated
    p.allocate("sh", guaranteed("sh", 2000, annotations={f"{SHARED}/pod": "true"}))
    assert p.grants["sh"].kind == "shared" and len(p.placement("sh")[0]) > 2
    # Two isolated CPUs only when annotated (a multi-CPU workload must spread itself over them).
    p.allocate("two", guaranteed("two", 2000))
    assert p.grants["two"].kind == "exclusive" and not p.placement("two")[0] & topo.isolated
    p.allocate("iso2", guaranteed("iso2", 2000, annotations={f"{ISOLATED}/pod": "true"}))
    assert p.grants["iso2"].kind == "isolated" and p.placement("iso2")[0] <= topo.isolated
    # PreferSharedCPUs in the config does not turn integer requests shared (upstream needs the annotation).
    p2 = ta(topo, "    PreferSharedCPUs: true\n    PinMemory: false\n    PinCPU: false")
    p2.allocate("g", guaranteed("g", 2000))
    assert p2.grants["g"].kind == "exclusive" and p2.placement("g") == (None, None)
    p2.allocate("g1", guaranteed("g1", 1500))
    assert p2.grants["g1"].kind == "shared"


# Upstream's cpuAllocationPreferences (topology-aware/pod-preferences.go), case by case:
# (request milli, config PreferSharedCPUs, config PreferIsolatedCPUs, shared note, isolated note)
#   -> (exclusive CPUs, shared milli, prefer isolated)
UPSTREAM_PREFERENCES = [
    ((500, False, True, None, None), (0, 500, False)),          # sub-core: always shared
    ((500, False, True, "false", "true"), (0, 500, False)),
    ((1000, False, True, None, None), (1, 0, True)),            # one CPU: exclusive, isolated by config
    ((1000, False, False, None, None), (1, 0, False)),
    ((1000, False, False, None, "true"), (1, 0, True)),
    ((1000, True, True, None, None), (1, 0, True)),             # config PreferShared: not for integer requests
    ((1000, True, True, "true", None), (0, 1000, False)),       # ... only the annotation
    ((1500, False, True, None, None), (1, 500, True)),          # 1 <= request < 2, fractional: mixed
    ((1500, True, True, None, None), (0, 1500, False)),         # ... shared by config
    ((1500, False, True, "true", None), (0, 1500, False)),      # ... or by annotation
    ((1500, True, True, "false", None), (1, 500, True)),        # annotation beats config
    ((2000, False, True, None, None), (2, 0, False)),           # multi-CPU: exclusive, not isolated
    ((2000, False, True, None, "true"), (2, 0, True)),          # ... isolated only when annotated
    ((2000, True, True, None, None), (2, 0, False)),            # config PreferShared ignored
    ((2000, False, True, "true", None), (0, 2000, False)),
    ((2500, False, True, None, None), (0, 2500, False)),        # multi-CPU fractional: shared
    ((2500, False, True, "false", None), (2, 500, False)),      # ... mixed when annotated unshared
    ((2500, False, True, "false", "true"), (2, 500, True)),
    ((2500, False, False, "false", "true"), (2, 500, True)),
    ((2500, True, True, "false", None), (2, 500, False)),
    ((3000, False, True, "not-a-bool", None), (3, 0, False)),  # unparsable annotation: as if absent
]


def test_topology_aware_preferences_follow_upstream(topologies: dict[str, Topology]) -> None:
    for (milli, cfg_shared, cfg_isolated, shared, isolated), want in UPSTREAM_PREFERENCES:
        p = ta(topologies["2s-2n-16c-2t"], f"    PreferSharedCPUs: {str(cfg_shared).lower()}\n"
                                             f"    PreferIsolatedCPUs: {str(cfg_isolated).lower()}")
        notes = {f"{SHARED}/pod": shared, f"{ISOLATED}/container.c": isolated}
        c = guaranteed("c", milli, annotations={k: v for k, v in notes.items() if v is not None})
        assert p._preferences(c) == want, (milli, cfg_shared, cfg_isolated, shared, isolated)
    p = ta(topologies["2s-2n-16c-2t"])
    assert p._preferences(burstable("b", 2000, annotations={f"{SHARED}/pod": "false"})) == (0, 2000, False)
    assert p._preferences(ctr("be")) == (0, 0, False)


def test_topology_aware_full_node_keeps_exclusive_cpus_exclusive(topologies: dict[str, Topology]) -> None:
    """The 2-CPU node of the issue: 750m reserved on CPU 0, a Guaranteed pod, then a Burstable one."""
    p = ta(topologies["this-machine"])
    assert p.reserved == {0}
    p.allocate("g", guaranteed("g", 1000))
    p.allocate("b", burstable("b", 100))
    p.allocate("be", ctr("be"))
    # As upstream, slicing off CPU 1 would leave no shared CPU: the Guaranteed pod shares it instead.
    assert p.grants["g"].kind == "shared" and not p.exclusive_sets()
    assert {cid: p.placement(cid)[0] for cid in ("g", "b", "be")} == {"g": {1}, "b": {1}, "be": {1}}
    # Where a pool keeps a shared CPU after the slice, the Guaranteed pod gets its CPU exclusively.
    p4 = ta(topologies["2s-2n-16c-2t"], "    PreferIsolatedCPUs: false")
    p4.allocate("g", guaranteed("g", 1000))
    p4.allocate("b", burstable("b", 100))
    assert not p4.placement("b")[0] & p4.grants["g"].exclusive


def test_topology_aware_no_reserved_cpus(topologies: dict[str, Topology]) -> None:
    p = policy_from_yaml("policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: 0\n",
                         topologies["this-machine"])
    p.allocate("sys", burstable("sys", 100, ns="kube-system"))
    assert p.placement("sys")[0] == {0, 1}


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


def test_topology_aware_refuses_cache_of_shared_grant_without_shared_cpus(topologies: dict[str, Topology]) -> None:
    """A cache written by the old policy (CPU 1 exclusive, a shared container next to it on nothing)
    is refused, so the resource manager re-places the containers instead of keeping an empty cpuset."""
    p = ta(topologies["this-machine"])
    state = {"grants": {"g": {"pool": "root", "kind": "exclusive", "exclusive": "1", "shared_milli": 0},
                        "b": {"pool": "root", "kind": "shared", "exclusive": "", "shared_milli": 100}}}
    with pytest.raises(RestoreError, match="no shared CPU"):
        p.restore_state(state, {"g": guaranteed("g", 1000), "b": burstable("b", 100)})
    del state["grants"]["b"]
    p.restore_state(state, {"g": guaranteed("g", 1000)})  # alone, the exclusive CPU is fine
    assert p.placement("g")[0] == {1}
