"""The balloons policy: seed and upstream samples, reserved and default balloons, growing and shrinking."""

from __future__ import annotations

import functools
import random
from pathlib import Path

import pytest
from fixtures.seed_configs import SEED_BALLOONS, UPSTREAM_BALLOONS
from unit.resmgr.policy_helpers import burstable, ctr, guaranteed, policy_from_yaml
from unit.resmgr.rm_driver import Driver

from resmgr.config import validate_config_text
from resmgr.policy.balloons import options_key
from resmgr.policy.cpu_tree import CpuTree, TreeAllocationError, to_mask, to_set
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
    p.allocate("a4", burstable("a4", 6000, ns="app-z"))  # MaxBalloons reached, no room: left alone
    assert "a4" not in p.grants and p.placement("a4") == (None, None)
    p.release("a2")
    p.release("a4")
    assert len(p.balloons[b.name].cpus) == 2
    p.release("a1")
    p.release("a3")
    assert not [x for x in p.balloons.values() if x.type == "app"]
    assert len(p._free) == 255  # everything but the reserved CPU came back


# -- upstream's e2e scenarios (test/e2e/policies.test-suite/balloons), replayed on the policy -----------------------
ANNOTATION = "balloon.balloons.cri-resource-manager.intel.com"
# test/e2e/policies.test-suite/balloons/cri-resmgr.cfg (CPU classes left out)
UPSTREAM_E2E = """\
policy:
  Active: balloons
  AvailableResources:
    CPU: cpuset:1-15
  ReservedResources:
    CPU: 1
  balloons:
    PinCPU: true
    PinMemory: true
    BalloonTypes:
      - Name: two-cpu
        MinCPUs: 2
        MaxCPUs: 2
        AllocatorPriority: 0
        PreferNewBalloons: true
      - Name: three-cpu
        Namespaces:
          - "three"
        MinCPUs: 3
        AllocatorPriority: 1
        PreferSpreadingPods: true
      - Name: four-cpu
        MinCPUs: 4
        MaxCPUs: 8
        MinBalloons: 1
        AllocatorPriority: 2
      - Name: five-cpu
        MaxCPUs: 5
        AllocatorPriority: 3
        PreferSpreadingPods: true
        PreferNewBalloons: true
"""


def pod(p, name: str, milli: list[int], *, ns: str = "default", balloon: str | None = None,
        qos=burstable) -> list[str]:
    """One pod's containers allocated in order (``<name>c<i>``) as upstream's balloons-busybox makes them:
    ``qos`` with the CPU request, BestEffort where it is 0."""
    annotations = {ANNOTATION: balloon} if balloon else None
    cids = []
    for i, m in enumerate(milli):
        cid = f"{name}c{i}"
        make = qos if m else ctr
        p.allocate(cid, make(cid, m, ns=ns, pod=name, annotations=annotations) if m else
                   make(cid, ns=ns, pod=name, annotations=annotations))
        cids.append(cid)
    return cids


def cpus(p, cid: str) -> frozenset[int]:
    return p.placement(cid)[0]


def cores(topo: Topology, cpuset: frozenset[int]) -> set:
    return {topo.core_of(c) for c in cpuset}


def test_basic_placement_spreads_pods_when_asked(upstream_topologies: dict[str, Topology]) -> None:
    """Upstream n4c16/test01-basic-placement: a pod's containers share a balloon, unless its type prefers
    spreading pods; then each container gets its own instance."""
    p = policy_from_yaml(UPSTREAM_E2E, upstream_topologies["n4c16"])
    pod0 = pod(p, "pod0", [0, 0], ns="kube-system")
    assert cpus(p, pod0[0]) == cpus(p, pod0[1]) == p.reserved and len(p.reserved) == 1
    pod1 = pod(p, "pod1", [100, 100], balloon="two-cpu")
    assert cpus(p, pod1[0]) == cpus(p, pod1[1]) and len(cpus(p, pod1[0])) == 2
    pod2 = pod(p, "pod2", [100], balloon="two-cpu")  # PreferNewBalloons: another instance
    assert len(cpus(p, pod2[0])) == 2 and not cpus(p, pod2[0]) & cpus(p, pod1[0])
    pod3 = pod(p, "pod3", [1500, 1500], ns="three")  # fits one three-cpu instance, spreading or not
    assert cpus(p, pod3[0]) == cpus(p, pod3[1]) and len(cpus(p, pod3[0])) == 3
    for cid in [*pod0, *pod1, *pod2, *pod3]:
        p.release(cid)
    pod4 = pod(p, "pod4", [3000, 3000, 3000], balloon="four-cpu")
    assert cpus(p, pod4[0]) == cpus(p, pod4[1]) and len(cpus(p, pod4[0])) == 6
    assert len(cpus(p, pod4[2])) == 4 and not cpus(p, pod4[2]) & cpus(p, pod4[0])
    for cid in pod4:
        p.release(cid)
    pod5 = pod(p, "pod5", [1250, 1250, 1250], balloon="five-cpu")  # PreferSpreadingPods: one instance each
    sets = [cpus(p, cid) for cid in pod5]
    assert [len(s) for s in sets] == [2, 2, 2] and len(set().union(*sets)) == 6
    assert len({p.grants[cid].pool for cid in pod5}) == 3


def test_prefer_new_balloons_fills_the_empty_minballoons_first(topologies: dict[str, Topology]) -> None:
    """Upstream's sample config: full-core-turbo has MinBalloons 2 and PreferNewBalloons; the first two pods
    take the two instances made at start, only the third makes a new one."""
    p = policy_from_yaml(UPSTREAM_BALLOONS, topologies["8numa-256"])
    first = [b.name for b in p.balloons.values() if b.type == "full-core-turbo"]
    assert first == ["full-core-turbo[0]", "full-core-turbo[1]"]
    for i in range(3):
        p.allocate(f"hp{i}", burstable(f"hp{i}", 500, ns="highperf"))
    assert [p.grants[f"hp{i}"].pool for i in range(3)] == [*first, "full-core-turbo[2]"]


MAXBALLOONS = """\
policy:
  Active: balloons
  ReservedResources:
    CPU: 1
  balloons:
    PinCPU: true
    PinMemory: true
    BalloonTypes:
      - Name: singleton
        MinCPUs: 2
        MaxCPUs: 2
        MinBalloons: 1
        MaxBalloons: 1
      - Name: dynamictwo
        MaxCPUs: 1
        MaxBalloons: 2
"""


def test_no_suitable_balloon_leaves_the_container_alone(upstream_topologies: dict[str, Topology]) -> None:
    """Upstream n4c16/test07-maxballoons: a container no instance can take fails there ("no suitable balloon
    instance available"); here it gets no grant and runs unpinned, and no balloon is overcommitted.
    (Upstream's config misspells PreferNewBalloons for dynamictwo, so it does not prefer new balloons.)"""
    p = policy_from_yaml(MAXBALLOONS, upstream_topologies["n4c16"])
    pod0 = pod(p, "pod0", [1500], balloon="singleton", qos=guaranteed)
    assert len(cpus(p, pod0[0])) == 2
    pod1 = pod(p, "pod1", [500], balloon="singleton", qos=guaranteed)
    assert cpus(p, pod1[0]) == cpus(p, pod0[0])
    full = pod(p, "full", [100], balloon="singleton", qos=guaranteed)
    assert full[0] not in p.grants and p.placement(full[0]) == (None, None)
    assert p.balloons["singleton[0]"].requested == 2000
    p.release(full[0])
    pod2 = pod(p, "pod2", [800], balloon="dynamictwo", qos=guaranteed)
    assert len(cpus(p, pod2[0])) == 1
    pod3 = pod(p, "pod3", [600], balloon="dynamictwo", qos=guaranteed)
    assert len(cpus(p, pod3[0])) == 1 and not cpus(p, pod3[0]) & cpus(p, pod2[0])
    pod4 = pod(p, "pod4", [300], balloon="dynamictwo", qos=guaranteed)
    assert cpus(p, pod4[0]) == cpus(p, pod3[0])
    pod5 = pod(p, "pod5", [300], balloon="dynamictwo", qos=guaranteed)
    assert pod5[0] not in p.grants and p.placement(pod5[0]) == (None, None)
    assert sorted(b.requested for b in p.balloons.values() if b.type == "dynamictwo") == [800, 900]


NUMA = """\
policy:
  Active: balloons
  AvailableResources:
    CPU: cpuset:0-15
  ReservedResources:
    CPU: 1
  balloons:
    PinCPU: true
    PinMemory: true
    BalloonTypes:
      - Name: fit-in-numa
        Namespaces:
          - "*"
        MinCPUs: 0
        MaxCPUs: 4
        AllocatorPriority: 0
        PreferNewBalloons: false
"""


def test_balloons_fill_a_numa_node_and_keep_one_cpu(upstream_topologies: dict[str, Topology]) -> None:
    """Upstream n4c16/test08-numa: a BestEffort container still gets a CPU of its own; the balloon grows with
    its Guaranteed containers up to MaxCPUs, then a new balloon starts; kube-system stays on the reserved
    CPUs although the type's namespaces are "*"."""
    p = policy_from_yaml(NUMA, upstream_topologies["n4c16"])
    system = pod(p, "sys", [0], ns="kube-system")
    assert cpus(p, system[0]) == p.reserved
    pod0 = pod(p, "pod0", [0])
    assert len(cpus(p, pod0[0])) == 1 and not cpus(p, pod0[0]) & p.reserved
    guaranteed_pods = [pod(p, f"pod{i}", [1000], qos=guaranteed)[0] for i in (1, 2, 3, 4)]
    assert len(cpus(p, pod0[0])) == 4
    assert all(cpus(p, cid) == cpus(p, pod0[0]) for cid in guaranteed_pods)
    pod5 = pod(p, "pod5", [0])
    assert cpus(p, pod5[0]) == cpus(p, pod0[0])
    pod6 = pod(p, "pod6", [1000], qos=guaranteed)
    assert len(cpus(p, pod6[0])) == 1 and not cpus(p, pod6[0]) & cpus(p, pod0[0])
    for cid in guaranteed_pods[:3]:
        p.release(cid)
    assert len(cpus(p, pod0[0])) == 1 and cpus(p, pod0[0]) == cpus(p, guaranteed_pods[3]) == cpus(p, pod5[0])
    p.release(guaranteed_pods[3])  # BestEffort only: still one CPU
    assert len(cpus(p, pod0[0])) == 1 and not cpus(p, pod0[0]) & (p.reserved | cpus(p, pod6[0]))


NAMESPACE = """\
policy:
  Active: balloons
  ReservedResources:
    CPU: 1
  balloons:
    PinCPU: true
    PinMemory: true
    BalloonTypes:
      - Name: nsballoon
        Namespaces:
          - "*"
        MinCPUs: 2
        MaxCPUs: 4
        PreferPerNamespaceBalloon: true
"""


def test_prefer_per_namespace_balloon(upstream_topologies: dict[str, Topology]) -> None:
    """Upstream n4c16/test05-namespace: each namespace gets its own balloon while CPUs last; a full balloon
    gets a sibling for the same namespace; then the balanced fill takes over."""
    p = policy_from_yaml(NAMESPACE, upstream_topologies["n4c16"])
    pod0 = pod(p, "pod0", [0, 0])
    assert cpus(p, pod0[0]) == cpus(p, pod0[1]) and len(cpus(p, pod0[0])) == 2
    pod1 = pod(p, "pod1", [0, 0], ns="e2e-a")
    assert cpus(p, pod1[0]) == cpus(p, pod1[1]) and len(cpus(p, pod1[0])) == 2
    assert not cpus(p, pod1[0]) & cpus(p, pod0[0])
    pod2 = pod(p, "pod2", [2000, 2000], qos=guaranteed)
    assert cpus(p, pod2[0]) == cpus(p, pod2[1]) == cpus(p, pod0[0]) and len(cpus(p, pod2[0])) == 4
    assert not cpus(p, pod2[0]) & cpus(p, pod1[0])
    pod3 = pod(p, "pod3", [100, 100], qos=guaranteed)  # nsballoon[0] is full: another one for "default"
    assert cpus(p, pod3[0]) == cpus(p, pod3[1]) and len(cpus(p, pod3[0])) == 2
    pod4 = pod(p, "pod4", [2000, 2000], ns="e2e-b", qos=guaranteed)
    assert cpus(p, pod4[0]) == cpus(p, pod4[1]) and len(cpus(p, pod4[0])) == 4
    pod5 = pod(p, "pod5", [100, 100], ns="e2e-c", qos=guaranteed)
    assert cpus(p, pod5[0]) == cpus(p, pod5[1]) and len(cpus(p, pod5[0])) == 2
    sets = [cpus(p, x[0]) for x in (pod1, pod2, pod3, pod4, pod5)]
    assert sum(map(len, sets)) == len(set().union(*sets)) == 14
    pod6 = pod(p, "pod6", [100, 100], ns="e2e-d", qos=guaranteed)  # no CPUs for another balloon
    assert cpus(p, pod6[0]) == cpus(p, pod6[1]) and p.grants[pod6[0]].pool in {p.grants[x[0]].pool for x in
                                                                               (pod1, pod2, pod3, pod4, pod5)}


DYNAMIC = """\
policy:
  Active: balloons
  ReservedResources:
    cpu: cpuset:31
  balloons:
    AllocatorTopologyBalancing: true
    BalloonTypes:
      - Name: dynamic
        MaxCPUs: 32
        MaxBalloons: 8
        PreferNewBalloons: true
"""


def test_topology_balancing_spreads_balloons_one_per_numa_node(upstream_topologies: dict[str, Topology]) -> None:
    """Upstream n4c32/test01-dynamic-baloons (8 NUMA nodes of 4 CPUs): 8 balloons of 3 CPUs land one per
    NUMA node; inflating one by 2 CPUs crosses into the sibling NUMA node of its die, by 4 into the other
    die of its package, never the other package."""
    topo = upstream_topologies["n4c32"]
    p = policy_from_yaml(DYNAMIC, topo)
    first = [pod(p, f"pod{i}", [3000], balloon="dynamic", qos=guaranteed)[0] for i in range(8)]
    nodes = [topo.nodes_of(cpus(p, cid)) for cid in first]
    assert all(len(cpus(p, cid)) == 3 for cid in first)
    assert all(len(n) == 1 for n in nodes) and len(set().union(*nodes)) == 8

    def spans(cid: str) -> tuple[int, int, int]:
        cs = cpus(p, cid)
        return (len(topo.nodes_of(cs)), len({topo.cpus[c].die_key for c in cs}),
                len({topo.cpus[c].package for c in cs}))

    pod8 = pod(p, "pod8", [2000], balloon="dynamic", qos=guaranteed)
    assert len(cpus(p, pod8[0])) == 5 and spans(pod8[0]) == (2, 1, 1)
    p.release(pod8[0])
    assert [len(cpus(p, cid)) for cid in first] == [3] * 8
    pod9 = pod(p, "pod9", [4000], balloon="dynamic", qos=guaranteed)
    assert len(cpus(p, pod9[0])) == 7 and spans(pod9[0]) == (4, 2, 1)


ALLOCATOR_OPTS = """\
policy:
  Active: balloons
  ReservedResources:
    CPU: 1
  balloons:
    AllocatorTopologyBalancing: true
    PreferSpreadOnPhysicalCores: true
    BalloonTypes:
      - Name: policydefaults
        MinCPUs: 2
        MinBalloons: 2
      - Name: topo1cores0
        MinCPUs: 2
        MinBalloons: 2
        PreferSpreadOnPhysicalCores: false
      - Name: topo0cores1
        AllocatorTopologyBalancing: false
        PreferSpreadOnPhysicalCores: true
      - Name: topo0cores0
        AllocatorTopologyBalancing: false
        PreferSpreadOnPhysicalCores: false
      - Name: topo1cores1
        AllocatorTopologyBalancing: true
        PreferSpreadOnPhysicalCores: true
"""


def test_allocator_options_per_balloon_type(upstream_topologies: dict[str, Topology]) -> None:
    """Upstream n4c16/test10-allocator-opts: PreferSpreadOnPhysicalCores puts a balloon's CPUs on separate
    cores; without it a balloon packs both threads of a core; type settings override the policy's."""
    topo = upstream_topologies["n4c16"]
    p = policy_from_yaml(ALLOCATOR_OPTS, topo)
    pod0 = pod(p, "pod0", [100], balloon="policydefaults", qos=guaranteed)
    assert len(cpus(p, pod0[0])) == 2 and len(cores(topo, cpus(p, pod0[0]))) == 2
    pod1 = pod(p, "pod1", [100], balloon="topo1cores0", qos=guaranteed)
    assert len(cpus(p, pod1[0])) == 2 and len(cores(topo, cpus(p, pod1[0]))) == 1
    pod2 = pod(p, "pod2", [1000, 1000], balloon="topo1cores1", qos=guaranteed)
    assert cpus(p, pod2[0]) == cpus(p, pod2[1]) and len(cpus(p, pod2[0])) == 2
    assert len(cores(topo, cpus(p, pod2[0]))) == 2
    pod3 = pod(p, "pod3", [1000, 1000], balloon="topo0cores0", qos=guaranteed)
    assert cpus(p, pod3[0]) == cpus(p, pod3[1]) and len(cpus(p, pod3[0])) == 2
    assert len(cores(topo, cpus(p, pod3[0]))) == 1


UPDATE_CONFIGMAP = """\
policy:
  Active: balloons
  AvailableResources:
    CPU: cpuset:0,4-15
  ReservedResources:
    CPU: 1
  balloons:
    PinCPU: true
    PinMemory: true
    BalloonTypes:
      - Name: btype0
        MinCPUs: 2
        MaxCPUs: 2
        AllocatorPriority: 0
        CPUClass: classA
        PreferNewBalloons: true
      - Name: btype1
        Namespaces: [btype1ns0]
        MinCPUs: 1
        MaxCPUs: 0
        AllocatorPriority: 1
        CPUClass: classB
        PreferSpreadingPods: true
      - Name: btype2
        Namespaces: ["*"]
        MinCPUs: 4
        MaxCPUs: 8
        MinBalloons: 1
        AllocatorPriority: 2
        CPUClass: classC
"""


def without_type(text: str, name: str) -> str:
    start = text.index(f"      - Name: {name}\n")
    end = text.find("      - Name:", start + 1)
    return text[:start] + (text[end:] if end >= 0 else "")


def test_config_change_assigns_every_container_again(upstream_topologies: dict[str, Topology], tmp_path: Path) -> None:
    """Upstream n4c16/test06-update-configmap: a config that changes the balloons rebuilds them and assigns
    every container again, so a pod goes back to its annotated balloon type when the type comes back; a
    change of CPU classes only moves nobody."""
    d = Driver(upstream_topologies["n4c16"], tmp_path, UPDATE_CONFIGMAP)
    pods = [d.run_pod("pod0", qos="guaranteed", annotations={ANNOTATION: "btype0"}),
            d.run_pod("pod1", namespace="btype1ns0", qos="guaranteed"),
            d.run_pod("pod2", namespace="e2e-balloons-test06", qos="guaranteed")]
    cids = [d.create(pid, f"pod{i}c0", 1000) for i, pid in enumerate(pods)]

    def pools() -> list[str]:
        return [d.rm.policy.grants[cid].pool for cid in cids]

    def apply(text: str) -> None:
        d.runtime.apply(d.rm.set_config(validate_config_text(text), source="agent"))
        assert d.runtime_view() == d.rm.placements()

    assert pools() == ["btype0[0]", "btype1[0]", "btype2[0]"]
    apply(without_type(without_type(UPDATE_CONFIGMAP, "btype0"), "btype1"))
    assert pools()[1:] == ["btype2[0]", "btype2[0]"]  # pod0's type is gone (upstream: undefined)
    apply(without_type(UPDATE_CONFIGMAP, "btype1"))
    assert pools() == ["btype0[0]", "btype2[0]", "btype2[0]"]
    placed = d.rm.placements()
    classes_only = without_type(UPDATE_CONFIGMAP, "btype1").replace("classC", "classB").replace("classA", "classC")
    apply(classes_only)
    assert pools() == ["btype0[0]", "btype2[0]", "btype2[0]"] and d.rm.placements() == placed


# -- the CPU tree (upstream's cputree.go) -------------------------------------------------------------------------
def test_tree_grows_from_the_deepest_node_that_fits(upstream_topologies: dict[str, Topology]) -> None:
    """Upstream's TestResizeCpus "first allocations" on 2 packages x 2 dies x 2 NUMA nodes x 2 cores x 2
    threads: the CPUs offered for n new CPUs are the smallest topology element with n free CPUs."""
    topo = upstream_topologies["n4c32"]
    tree = CpuTree(topo)
    sizes = {n: len(tree.grow(frozenset(), topo.online, n)) for n in (1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32)}
    assert sizes == {1: 1, 2: 2, 3: 4, 4: 4, 5: 8, 7: 8, 8: 8, 9: 16, 15: 16, 16: 16, 17: 32, 31: 32, 32: 32}
    with pytest.raises(TreeAllocationError, match="not enough free CPUs"):
        tree.grow(frozenset(), topo.online, 33)


def test_tree_balancing_spreads_and_packing_packs(upstream_topologies: dict[str, Topology]) -> None:
    """Upstream's "spread allocations": 8 one-CPU sets land on 8 different NUMA nodes; "pack allocations":
    growing one set CPU by CPU fills a core, then its NUMA node, then its die."""
    topo = upstream_topologies["n4c32"]
    spread, free, sets = CpuTree(topo, balancing=True), set(topo.online), []
    for _ in range(8):
        new = spread.grow(frozenset(), free, 1)
        free -= new
        sets.append(new)
    assert len({topo.node_of(min(s)) for s in sets}) == 8
    pack, free, mine = CpuTree(topo), set(topo.online), frozenset()
    spans = []
    for _ in range(5):
        new = pack.grow(mine, free, 1)
        free -= new
        mine |= new
        spans.append((len(cores(topo, mine)), len(topo.nodes_of(mine)), len({topo.cpus[c].die_key for c in mine})))
    assert spans == [(1, 1, 1), (1, 1, 1), (2, 1, 1), (2, 1, 1), (3, 2, 1)]


def _reference_choice(tree: CpuTree, current: int, free: int, delta: int) -> int:
    """Upstream's resizeCpus literally: every tree node with its attributes, filtered and sorted."""
    nodes = []

    def walk(depth: int, i: int, cur_path: tuple, free_path: tuple) -> None:
        mask = tree.levels[depth].masks[i]
        cur, fr = (mask & current).bit_count(), (mask & free).bit_count()
        if (delta > 0 and fr < delta) or (delta < 0 and cur + delta < 0):
            return
        cur_path, free_path = cur_path + (cur,), free_path + (fr,)
        nodes.append((depth, cur_path, free_path, tree.levels[depth].names[i], mask))
        if depth + 1 < len(tree.levels):
            for child in tree.levels[depth].children[i]:
                walk(depth + 1, child, cur_path, free_path)

    walk(0, 0, (), ())

    def compare(a: tuple, b: tuple) -> int:
        if a[0] != b[0]:
            return -1 if a[0] > b[0] else 1
        for x, y in zip(a[1], b[1], strict=True):
            if x != y:
                return (-1 if x > y else 1) if delta > 0 else (-1 if x < y else 1)
        for x, y in zip(a[2], b[2], strict=True):
            if x != y:
                return (-1 if x > y else 1) if delta > 0 and tree.balancing else (-1 if x < y else 1)
        if a[3] == b[3]:
            return 0
        return (-1 if a[3] < b[3] else 1) if delta > 0 else (-1 if a[3] > b[3] else 1)

    best = sorted(nodes, key=functools.cmp_to_key(compare))[0]
    return best[4] & (free if delta > 0 else current)


@pytest.mark.parametrize("balancing", [False, True])
@pytest.mark.parametrize("spread", [False, True])
def test_tree_choices_equal_upstreams_sort(upstream_topologies: dict[str, Topology], balancing: bool,
                                           spread: bool) -> None:
    """The tree's pruned walk chooses what sorting every node with upstream's comparison chooses."""
    topo = upstream_topologies["n4c32"]
    tree = CpuTree(topo, balancing=balancing, spread_cores=spread)
    rng = random.Random(26)
    for _ in range(300):
        owner = {cpu: rng.choice(["free", "free", "mine", "other"]) for cpu in topo.online}
        current = to_mask(c for c, o in owner.items() if o == "mine")
        free = to_mask(c for c, o in owner.items() if o == "free")
        delta = rng.choice([1, 1, 2, 3, 4, 5])
        if free.bit_count() >= delta:
            assert tree._grow_from(current, free, delta) == _reference_choice(tree, current, free, delta)
        if current:
            assert tree.shrink(to_set(current), to_set(free), 1) == to_set(_reference_choice(tree, current, free, -1))


def test_a_container_left_alone_stays_so_across_a_restart(upstream_topologies: dict[str, Topology],
                                                           tmp_path: Path) -> None:
    """A restart restores what was decided: a container no balloon could take stays unpinned even if a balloon
    has room by then (found by the policy state machine once balloons stopped overcommitting)."""
    d = Driver(upstream_topologies["n4c16"], tmp_path, MAXBALLOONS)
    annotations = {ANNOTATION: "singleton"}
    pods = [d.run_pod(f"pod{i}", qos="guaranteed", annotations=annotations) for i in range(3)]
    first, second, full = (d.create(pid, "c", milli) for pid, milli in zip(pods, (1500, 500, 100), strict=True))
    assert d.rm.placements()[full] == (None, None) and d.runtime.cpusets[full] == ("", "")
    d.remove_container(second)
    placements, state = d.rm.placements(), d.rm.policy.export_state()
    assert d.restart() == []
    assert d.rm.placements() == placements and d.rm.policy.export_state() == state
    d.remove_container(full)
    d.remove_container(first)
    assert not d.rm.policy.export_extra().get("left_alone")


@pytest.mark.parametrize(("a", "b", "changes"), [
    ({"ReservedPoolNamespaces": ["ns0"]}, {"ReservedPoolNamespaces": []}, True),
    ({"ReservedPoolNamespaces": ["ns0"]}, {"ReservedPoolNamespaces": ["ns1"]}, True),
    ({"IdleCPUClass": "icc0"}, {"IdleCPUClass": "icc1"}, False),
    ({"BalloonTypes": [{"Name": "a", "CPUClass": "x"}]}, {"BalloonTypes": [{"Name": "a", "CPUClass": "y"}]}, False),
    ({"BalloonTypes": [{"Name": "a"}]}, {"BalloonTypes": [{"Name": "a"}, {"Name": "b"}]}, True),
    ({"BalloonTypes": [{"Name": "a", "MinCPUs": 1}]}, {"BalloonTypes": [{"Name": "a", "MinCPUs": 2}]}, True),
    ({"AllocatorTopologyBalancing": False}, {"AllocatorTopologyBalancing": True}, True),
])
def test_what_changes_the_balloons(a: dict, b: dict, changes: bool) -> None:
    """Upstream's TestChangesBalloons: only CPU class names may change without assigning containers again."""
    assert (options_key(a) != options_key(b)) is changes


def test_options_written_out_as_their_defaults_change_nothing() -> None:
    assert options_key({}) == options_key({"PinCPU": True, "AllocatorTopologyBalancing": False,
                                           "ReservedPoolNamespaces": ["kube-system"], "BalloonTypes": []})
    assert options_key({"BalloonTypes": [{"Name": "a"}]}) == options_key(
        {"BalloonTypes": [{"Name": "a", "MinCPUs": 0, "PreferNewBalloons": False, "Namespaces": []}]})
    assert options_key({}) != options_key({"PinCPU": False})
    # a type's allocator options left out take the policy's; written out they do not
    assert options_key({"BalloonTypes": [{"Name": "a"}]}) != options_key(
        {"BalloonTypes": [{"Name": "a", "AllocatorTopologyBalancing": False}]})
