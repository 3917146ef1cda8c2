"""The topology-aware policy: pool tree, pinning, isolation, colocation."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from unit.resmgr.policy_helpers import burstable, ctr, guaranteed, policy_from_yaml
from unit.resmgr.rm_driver import Driver

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


# -- upstream's scenarios on its test VMs (conftest.upstream_topologies) -----------------------------------
def upstream(topo: Topology, available: str = "", reserved: str = "cpuset:0", options: str = "") -> Any:
    text = "policy:\n  Active: topology-aware\n"
    if available:
        text += f"  AvailableResources:\n    cpu: {available}\n"
    text += f"  ReservedResources:\n    cpu: {reserved}\n"
    if options:
        text += f"  topology-aware:\n{options}"
    return policy_from_yaml(text, topo)


def test_shared_requests_go_where_fewer_containers_run(upstream_topologies: dict[str, Topology]) -> None:
    """Upstream's topology-aware/n4c16/test04-available-resources with AvailableResources 1-4,11: of a
    pod's two 980m containers, the second goes alone to NUMA node 1 ({4}) rather than beside the first on
    {1-3}, which has more free shared capacity: fewer colocated containers win first (compareScores
    rule 9). A 1-CPU Guaranteed container then gets a CPU neither of them runs on."""
    p = upstream(upstream_topologies["n4c16"], available="cpuset:1-4,11", reserved="cpuset:11")
    pod = "pod0"
    p.allocate("pod0c0", guaranteed("pod0c0", 980, pod=pod))
    p.allocate("pod0c1", guaranteed("pod0c1", 980, pod=pod))
    assert p.placement("pod0c0") == ({1, 2, 3}, {0})
    assert p.placement("pod0c1") == ({4}, {1})
    p.allocate("pod1c0", guaranteed("pod1c0", 1000, pod="pod1"))
    mine = p.placement("pod1c0")[0]
    assert len(mine) == 1 and not mine & (p.placement("pod0c0")[0] | p.placement("pod0c1")[0])


def test_a_pool_the_request_would_fill_loses(upstream_topologies: dict[str, Topology]) -> None:
    """compareScores rule 1: a pool left without shared capacity by the request loses to one that keeps
    some, even a higher one. On n4c16 with CPU 0 reserved, 4 CPUs of Burstable requests would fill a NUMA
    node exactly: they go to the socket with most capacity left; 8 CPUs would fill socket 1 exactly: they
    go to the root pool (all CPUs, all memory nodes)."""
    topo = upstream_topologies["n4c16"]
    p = upstream(topo)
    p.allocate("four", burstable("four", 4000))
    assert p.grants["four"].pool == "socket #1"
    assert p.placement("four") == (frozenset(range(8, 16)), {2, 3})
    p = upstream(topo)
    p.allocate("eight", burstable("eight", 8000))
    assert p.grants["eight"].pool == "root"
    assert p.placement("eight") == (frozenset(range(1, 16)), {0, 1, 2, 3})


def test_capacity_ranks_before_affinity(upstream_topologies: dict[str, Topology]) -> None:
    """compareScores checks capacity (rule 1) before affinity (rule 2): a container of a colocated pod
    that would fill its pod's NUMA node goes to the pool above it, which has the next best affinity."""
    p = upstream(upstream_topologies["n4c16"], options="    ColocatePods: true\n")
    p.allocate("a", burstable("a", 1000, pod="web"))
    home = p.grants["a"].pool
    assert home.startswith("NUMA node")
    p.allocate("b", burstable("b", 3000, pod="web"))
    assert p.grants["b"].pool == p.pools[home].parent.name


def test_ranking_follows_compare_scores_rules(upstream_topologies: dict[str, Topology]) -> None:
    """The later rules of compareScores on n4c16 with CPU 0 reserved: exclusive requests take the pool with
    the most sliceable capacity (rule 8, NUMA node 1 before node 0, which has a reserved CPU), shared
    requests the one with fewer colocated containers, then more shared capacity (rule 9), then the lower id."""
    p = upstream(upstream_topologies["n4c16"], options="    PreferIsolatedCPUs: false\n")
    p.allocate("x", guaranteed("x", 2000))
    assert p.grants["x"].pool == "NUMA node #1"  # 4 free CPUs beat node 0's 3; node 1 beats 2 and 3 by id
    p.allocate("s1", burstable("s1", 100))
    assert p.grants["s1"].pool == "NUMA node #2"  # no container there; 4 shared CPUs beat node 0's 3
    p.allocate("s2", burstable("s2", 100))
    assert p.grants["s2"].pool == "NUMA node #3"  # fewer containers than node 2, more capacity than node 0
    p.allocate("s3", burstable("s3", 100))
    assert p.grants["s3"].pool == "NUMA node #0"  # the last one without a container (node 1 has x)
    p.allocate("s4", burstable("s4", 100))
    assert p.grants["s4"].pool == "NUMA node #2"  # one container each: most capacity, then the lower id
    # Depth wins over capacity (rule 5): a small request stays in a NUMA node.
    assert all(p.pools[p.grants[c].pool].depth == 2 for c in ("s1", "s2", "s3", "s4"))


def test_reserved_cpus_that_cannot_hold_the_request_fall_back_to_shared(
        upstream_topologies: dict[str, Topology]) -> None:
    """Upstream's topology-aware/n4c16/test05-reserved-resources: with AvailableResources 4-7,8-13 and CPUs 7
    and 11 reserved, kube-system containers run on the reserved CPUs while these have room: 4 x 200m, then
    1 CPU (1200m left); a 2-CPU one does not fit and runs on the root pool's shared CPUs instead."""
    p = upstream(upstream_topologies["n4c16"], available="cpuset:4-7,8-13", reserved="cpuset:7,11")
    for i in range(4):
        p.allocate(f"be{i}", ctr(f"be{i}", ns="kube-system"))
        p.allocate(f"g{i}", guaranteed(f"g{i}", 200, ns="kube-system", pod="pod2"))
    assert {p.placement(c)[0] for c in p.containers} == {frozenset({7, 11})}
    for name in ("pod3", "pod4"):  # twice: the release gives the reserved capacity back
        p.allocate(name, guaranteed(name, 1000, ns="kube-system"))
        assert p.placement(name)[0] == {7, 11}
        p.release(name)
    p.allocate("pod5", guaranteed("pod5", 2000, ns="kube-system"))
    assert p.grants["pod5"].pool == "root"
    assert p.placement("pod5")[0] == {4, 5, 6, 8, 9, 10, 12, 13}
    # A BestEffort one asks for nothing: it stays on the reserved CPUs however full they are.
    p.allocate("be", ctr("be", ns="kube-system"))
    assert p.placement("be")[0] == {7, 11}


# -- memory per pool (upstream's pools.go allocatePool, resources.go supply/grant memory) ------------------
GIB = 1 << 30


def with_memory(c: Any, limit: int) -> Any:
    c.memory_limit = limit
    return c


def test_memory_that_does_not_fit_a_numa_node_goes_up(upstream_topologies: dict[str, Topology]) -> None:
    """n4c16 has 2 GiB per NUMA node: a container with a 3 GiB limit is placed where that memory is, a
    socket (upstream's TestMemoryLimitFiltering: "fits to root" when no leaf can hold it)."""
    p = upstream(upstream_topologies["n4c16"])
    p.allocate("big", with_memory(burstable("big", 500), 3 * GIB))
    assert p.grants["big"].pool.startswith("socket")
    assert len(p.placement("big")[1]) == 2
    p.allocate("small", with_memory(burstable("small", 500), GIB))
    assert p.grants["small"].pool.startswith("NUMA node")


def test_a_root_grant_reserves_its_memory_in_every_pool_below(upstream_topologies: dict[str, Topology]) -> None:
    """A grant in the root pool may take all its memory from any one node: upstream reserves it in every
    pool below, so 1.5 GiB no longer fits a 2 GiB NUMA node beside a 1 GiB root grant, until it is gone."""
    p = upstream(upstream_topologies["n4c16"])
    p.allocate("wide", with_memory(burstable("wide", 8000), GIB))
    assert p.grants["wide"].pool == "root"
    p.allocate("a", with_memory(burstable("a", 100), 3 * GIB // 2))
    assert p.grants["a"].pool.startswith("socket")
    p.release("a")
    p.release("wide")
    p.allocate("a", with_memory(burstable("a", 100), 3 * GIB // 2))
    assert p.grants["a"].pool.startswith("NUMA node")


def test_memory_moves_up_when_a_root_grant_leaves_no_room(upstream_topologies: dict[str, Topology]) -> None:
    """Upstream's topology-aware/c4pmem4/test05-guarantee-memory: 4 single-CPU sockets of 2 GiB DRAM plus
    4 GiB PMEM each, CPU 0 reserved. Two 200m containers of 5 GiB get a socket each; a 1200m container of
    2 GiB can only run in the root pool, and its reservation in every socket leaves neither socket room
    for its 5 GiB: both containers' memory moves up to the root's 8 nodes, their CPUs stay. A 100 MiB pair
    moves nothing."""
    topo = upstream_topologies["c4pmem4"]
    p = upstream(topo)
    p.allocate("small0", with_memory(guaranteed("small0", 200), 100 << 20))
    p.allocate("small1", with_memory(guaranteed("small1", 1200), 100 << 20))
    assert len(p.placement("small0")[1]) == 2 and len(p.placement("small1")[1]) == 8
    p.release("small0")
    p.release("small1")

    p.allocate("c0", with_memory(guaranteed("c0", 200, pod="pod0"), 5 * GIB))
    p.allocate("c1", with_memory(guaranteed("c1", 200, pod="pod0"), 5 * GIB))
    cpus0, mems0 = p.placement("c0")
    cpus1, mems1 = p.placement("c1")
    assert len(mems0) == len(mems1) == 2 and mems0 != mems1
    p.allocate("wide", with_memory(guaranteed("wide", 1200, pod="pod1"), 2 * GIB))
    assert p.placement("wide")[1] == set(range(8))
    assert p.placement("c0") == (cpus0, frozenset(range(8)))
    assert p.placement("c1") == (cpus1, frozenset(range(8)))
    # The widened containers are in groups whose state changed, so the resource manager updates them.
    assert {p.group_of("c0"), p.group_of("c1")} <= set(p.group_state())
    # A restart keeps where their memory went.
    again = upstream(topo)
    again.restore_state(p.export_state(), dict(p.containers))
    assert again.placements() == p.placements()
    assert again.export_state() == p.export_state()


def test_widened_memory_reaches_the_runtime(upstream_topologies: dict[str, Topology], tmp_path: Path) -> None:
    """Through the resource manager, on n4c16 (2 GiB per NUMA node, 1 GiB per Guaranteed container): two
    containers of a colocated pod fill NUMA node 1's memory, one with exclusive CPUs only, one sharing; a
    root-pool container's reservation then moves their memory up to socket 0, and the runtime gets their
    new cpuset.mems, CPUs unchanged. A restart from the cache changes nothing."""
    d = Driver(upstream_topologies["n4c16"], tmp_path, "policy:\n  Active: topology-aware\n  ReservedResources:\n"
               "    cpu: cpuset:0\n  topology-aware:\n    ColocatePods: true\n")
    pod = d.run_pod("p", qos="guaranteed")
    excl = d.create(pod, "excl", 2000)
    share = d.create(pod, "share", 200)
    assert excl and share
    before = {cid: d.runtime.cpusets[cid] for cid in (excl, share)}
    assert {mems for _, mems in before.values()} == {"1"}
    d.create(d.run_pod("q", qos="guaranteed"), "wide", 9500)
    assert d.runtime_view() == d.rm.placements()
    assert {cid: d.runtime.cpusets[cid] for cid in (excl, share)} == {
        cid: (cpus, "0-1") for cid, (cpus, _) in before.items()}
    assert d.restart() == []


def test_isolated_requests_take_the_pool_with_most_isolated_cpus(upstream_topologies: dict[str, Topology]) -> None:
    """compareScores rule 7: for a container that prefers isolated CPUs, more isolated capacity wins over
    shared capacity. n4c16 with CPUs 5-7 (NUMA node 1) and 8 (node 2) isolated: node 1."""
    base = upstream_topologies["n4c16"]
    topo = Topology(cpus=base.cpus, isolated=frozenset({5, 6, 7, 8}), node_memory=base.node_memory)
    p = upstream(topo)
    p.allocate("iso", guaranteed("iso", 1000))
    assert p.grants["iso"].kind == "isolated" and p.grants["iso"].pool == "NUMA node #1"
    p.allocate("iso2", guaranteed("iso2", 1000))
    assert p.grants["iso2"].pool == "NUMA node #1"  # 2 isolated left there, 1 in node 2
    p.allocate("iso3", guaranteed("iso3", 1000))
    # One isolated CPU each: none would be left either way, so rule 8 decides: more sliceable capacity.
    assert p.grants["iso3"].pool == "NUMA node #2" and p.grants["iso3"].kind == "isolated"


@pytest.mark.parametrize("seed", range(3))
def test_memory_pressure_keeps_the_runtime_in_sync(upstream_topologies: dict[str, Topology], tmp_path: Path,
                                                   seed: int) -> None:
    """Seeded create/remove/restart sequences on n4c16 with 1 GiB Guaranteed containers on 2 GiB NUMA nodes
    (and on n4c32, 8 NUMA nodes): memory moves up the tree again and again, and the runtime always holds
    what the policy wants; a restart from the cache changes nothing."""
    rng = random.Random(seed)
    topo = upstream_topologies["n4c16" if seed % 3 < 2 else "n4c32"]
    d = Driver(topo, tmp_path, "policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: 750m\n")
    pods = [(d.run_pod(f"p{i}", qos=qos), qos) for i, qos in enumerate(["guaranteed", "burstable", "besteffort"] * 2)]
    live: list[str] = []
    widened = 0
    for step in range(60):
        if live and rng.random() < 0.3:
            d.remove_container(live.pop(rng.randrange(len(live))))
        else:
            pod, qos = rng.choice(pods)
            milli = 0 if qos == "besteffort" else rng.choice([200, 1000, 1500, 2000, 3500, 9500])
            cid = d.create(pod, f"c{step}", milli)
            assert cid is not None
            live.append(cid)
        assert d.runtime_view() == d.rm.placements()
        widened = max(widened, len(d.rm.policy.export_state()["memory_pools"]))
        if step % 20 == 19:
            assert d.restart() == []
    assert widened  # the sequence did move memory up


def test_exclusive_cpus_prefer_high_priority_ones() -> None:
    """Exclusive CPUs are taken preferring high-priority CPUs (upstream resources.go: takeCPUs with the
    request's priority, high for exclusive grants); the reserved CPU is taken at normal priority."""
    from resmgr.topology.model import PRIORITY_HIGH, PRIORITY_NORMAL, CpuInfo
    topology = Topology(cpus={i: CpuInfo(id=i, package=0, die=0, core=i, node=0) for i in range(4)},
                        node_memory={0: 8 << 30})
    topology.priority = {c: PRIORITY_HIGH if c >= 2 else PRIORITY_NORMAL for c in range(4)}
    p = policy_from_yaml("policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 750m\n", topology)
    grant = p.decide(guaranteed("g", 1000))
    assert grant.kind == "exclusive" and grant.exclusive <= {2, 3}, grant
