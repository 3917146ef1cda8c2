"""Memory tiers in topology-aware (upstream's memtier): memory types per pool, the memory-type and
cold-start annotations, cold start state in the cache, and the resource manager's cold start timer."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from fixtures.sysfs_builder import TWO_SOCKETS_PMEM, build_sysfs
from unit.resmgr.policy_helpers import burstable, ctr, guaranteed, policy_from_yaml
from unit.resmgr.rm_driver import Driver

from devland.waiting import eventually
from resmgr.durations import parse_go_duration
from resmgr.policy.memory_tiers import (
    ALL,
    MemoryType,
    attach_memory_nodes,
    cold_start_preference,
    format_memory_type,
    memory_type_preference,
    parse_memory_type,
)
from resmgr.relay.hooks import ContainerUpdate
from resmgr.topology import Topology, discover_topology, parse_cpuset

MT = "memory-type.cri-resource-manager.intel.com"
CS = "cold-start.cri-resource-manager.intel.com"
MEMTIER = "policy:\n  Active: memtier\n  ReservedResources:\n    cpu: 1\n  memtier:\n    PinMemory: true\n"


def memtier(topo: Topology):
    return policy_from_yaml(MEMTIER, topo)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_pmem_nodes_join_the_closest_dram_pool(topologies: dict[str, Topology]) -> None:
    topo = topologies["2s-pmem"]
    assert attach_memory_nodes(topo, [0, 1, 2, 3]) == {0: {4}, 1: {5}, 2: {6}, 3: {7}}
    p = memtier(topo)
    assert p.name == "topology-aware"
    assert {name: sorted(pool.mems) for name, pool in p.pools.items() if name.startswith("NUMA")} == {
        "NUMA node #0": [0, 4], "NUMA node #1": [1, 5], "NUMA node #2": [2, 6], "NUMA node #3": [3, 7]}
    assert p.pools["socket #1"].mems == {2, 3, 6, 7} and p.pools["root"].mems == frozenset(range(8))
    # Without an annotation a container gets its pool's DRAM and PMEM (upstream's default).
    p.allocate("a", burstable("a", 500))
    cpus, mems = p.placement("a")
    node = next(n for n in (0, 1, 2, 3) if cpus <= topo.nodes[n])
    assert mems == {node, node + 4}


def test_without_tiers_nothing_changes(topologies: dict[str, Topology]) -> None:
    p = memtier(topologies["2s-2n-16c-2t"])
    p.allocate("a", burstable("a", 500, annotations={MT: "pmem", CS: "duration: 10s"}))
    grant = p.grants["a"]
    assert p.placement("a") is p._pool_placement[grant.pool]  # the shared placement object, untouched
    assert p.cold_starts() == {}


@pytest.mark.parametrize(("annotation", "nodes"), [
    ("dram", {0}), ("pmem", {4}), ("DRAM,PMEM", {0, 4}), ("hbm", {8}), ("mixed", {0, 4, 8}), ("dram,hbm", {0, 8}),
])
def test_memory_type_annotation_picks_the_nodes(topologies: dict[str, Topology], annotation: str,
                                                nodes: set[int]) -> None:
    topo = topologies["2s-pmem-hbm"]
    p = memtier(topo)
    p.allocate("g", guaranteed("g", 2000, annotations={f"{MT}/container.g": annotation}))
    cpus, mems = p.placement("g")
    node = next(n for n in (0, 1, 2, 3) if cpus <= topo.nodes[n])
    assert mems == {n + node for n in nodes}  # the DRAM node's own PMEM (+4) and HBM (+8)


def test_a_missing_type_falls_back_to_dram(topologies: dict[str, Topology]) -> None:
    p = memtier(topologies["2s-pmem"])
    p.allocate("h", burstable("h", 100, annotations={f"{MT}/pod": "hbm"}))
    cpus, mems = p.placement("h")
    assert len(mems) == 1 and mems <= {0, 1, 2, 3}


def test_annotation_forms() -> None:
    c = ctr("c", annotations={f"{MT}/container.c": "pmem", f"{MT}/pod": "dram"})
    assert memory_type_preference(c) == MemoryType.PMEM  # per container wins over per pod
    assert memory_type_preference(ctr("c", annotations={f"{MT}/pod": "dram"})) == MemoryType.DRAM
    # upstream's deprecated pod annotation: a YAML map per container, or one value for all
    dep = "cri-resource-manager.intel.com/memory-type"
    assert memory_type_preference(ctr("c", annotations={dep: "c: dram,pmem\nother: hbm\n"})) == \
        MemoryType.DRAM | MemoryType.PMEM
    assert memory_type_preference(ctr("x", annotations={dep: "c: dram\n"})) is None
    assert memory_type_preference(ctr("c", annotations={dep: "hbm"})) == MemoryType.HBM
    assert memory_type_preference(ctr("c", annotations={f"{MT}/pod": "fast"})) is None  # invalid: logged, ignored
    assert parse_memory_type("") is None and parse_memory_type("mixed") == ALL
    with pytest.raises(ValueError, match="unknown memory type 'ssd'"):
        parse_memory_type("dram,ssd")
    assert format_memory_type(MemoryType.DRAM | MemoryType.HBM) == "DRAM,HBM"


@pytest.mark.parametrize(("value", "seconds"), [
    ("duration: 60s", 60.0), ("Duration: 1m30s", 90.0), ("duration: 1h", 3600.0), ("duration: 0", 0.0),
    ("duration: 2h", 0.0), ("duration: -1s", 0.0), ("duration: soon", 0.0), ("{}", 0.0), ("[", 0.0),
    ("duration: 1500000000", 1.5),  # a number is nanoseconds, as Go's Duration
])
def test_cold_start_durations(value: str, seconds: float) -> None:
    assert cold_start_preference(ctr("c", annotations={f"{CS}/container.c": value})) == seconds


def test_deprecated_cold_start_annotation() -> None:
    dep = {"cri-resource-manager.intel.com/cold-start": "c:\n  duration: 30s\n"}
    assert cold_start_preference(ctr("c", annotations=dep)) == 30.0
    assert cold_start_preference(ctr("other", annotations=dep)) == 0.0
    assert parse_go_duration("1.5s") == 1.5 and parse_go_duration("250ms") == 0.25
    with pytest.raises(ValueError):
        parse_go_duration("5 s")


def test_pools_with_the_requested_type_rank_first(tmp_path: Path) -> None:
    root = build_sysfs(tmp_path, TWO_SOCKETS_PMEM)
    node_dir = root / "sys/devices/system/node"
    for n in (6, 7):  # socket #1's PMEM is gone
        shutil.rmtree(node_dir / f"node{n}")
    (node_dir / "has_memory").write_text("0-5\n")
    topo = discover_topology(root)
    p = memtier(topo)
    assert p.pools["socket #1"].mems == {2, 3}
    # Fill socket #0 so that without the annotation the emptier socket #1 would win.
    p.allocate("busy", burstable("busy", 6000, annotations={f"{MT}/pod": "pmem"}))
    for i in range(4):
        p.allocate(f"pm{i}", burstable(f"pm{i}", 500, annotations={f"{MT}/pod": "pmem"}))
        assert p.placement(f"pm{i}")[1] <= {4, 5}, p.grants[f"pm{i}"].pool
    p.allocate("plain", burstable("plain", 500))
    assert p.placement("plain")[1] <= {2, 3}


def test_cold_start_begins_on_pmem_and_widens(topologies: dict[str, Topology]) -> None:
    p = memtier(topologies["2s-pmem"])
    p.memory.clock = clock = Clock()
    p.allocate("c", guaranteed("c", 1000, annotations={f"{CS}/container.c": "duration: 60s"}))
    cpus, mems = p.placement("c")
    node = next(iter(mems)) - 4
    assert mems == {node + 4} and cpus <= p.topology.nodes[node]  # PMEM only while cold
    assert p.cold_starts() == {"c": 1060.0}
    clock.now = 2000.0  # a re-placement (resize) keeps the deadline, does not restart the cold period
    p.release("c")
    p.allocate("c", guaranteed("c", 2000, annotations={f"{CS}/container.c": "duration: 60s"}))
    assert p.cold_starts() == {"c": 1060.0}
    assert p.finish_cold_start("c") and not p.finish_cold_start("c")
    assert p.placement("c")[1] == {node, node + 4}
    assert p.cold_starts() == {}
    # A DRAM-only container cannot cold start (upstream: only DRAM+PMEM requests do).
    p.allocate("d", burstable("d", 100, annotations={f"{MT}/pod": "dram", f"{CS}/pod": "duration: 60s"}))
    assert "d" not in p.cold_starts()
    p.release("c")
    assert p.cold_starts() == {}  # a stopped container's cold start is dropped


def test_movable_pmem_turns_cold_start_off(tmp_path: Path) -> None:
    topo = discover_topology(build_sysfs(tmp_path, replace(TWO_SOCKETS_PMEM, pmem_normal=False)))
    p = memtier(topo)
    p.allocate("c", burstable("c", 100, annotations={f"{CS}/pod": "duration: 60s"}))
    assert p.cold_starts() == {} and len(p.placement("c")[1]) == 2
    p.allocate("pm", burstable("pm", 100, annotations={f"{MT}/pod": "pmem"}))
    mems = p.placement("pm")[1]
    assert len(mems) == 2 and len(mems & {0, 1, 2, 3}) == 1  # DRAM added to a PMEM-only request


def test_cold_start_state_survives_a_restore(topologies: dict[str, Topology]) -> None:
    topo = topologies["2s-pmem"]
    p = memtier(topo)
    cold = {f"{CS}/pod": "duration: 60s"}
    p.allocate("a", burstable("a", 100, annotations=cold))
    p.allocate("b", burstable("b", 100, annotations=cold))
    p.finish_cold_start("b")
    state, placements = p.export_state(), p.placements()
    assert set(state["memory"]["cold_start_until"]) == {"a"}
    q = memtier(topo)
    q.restore_state(state, dict(p.containers))
    assert q.placements() == placements and q.cold_starts() == p.cold_starts()
    # Garbage in the cache is dropped, not fatal; containers restored without a cold start state
    # (garbage, or a cache written before memory tiers) have been running: none starts cold now.
    for memory in ({"cold_start_until": {"a": "soon"}, "cold_start_done": "b"}, None):
        state["memory"] = memory
        r = memtier(topo)
        r.restore_state(state, dict(p.containers))
        assert r.cold_starts() == {} and all(len(mems) == 2 for _, mems in r.placements().values())


def test_resource_manager_sends_the_update_when_the_cold_start_ends(tmp_path: Path,
                                                                     topologies: dict[str, Topology]) -> None:
    d = Driver(topologies["2s-pmem"], tmp_path, MEMTIER)
    pod = d.run_pod("p", qos="guaranteed", annotations={f"{CS}/pod": "duration: 50ms"})
    sent: list[ContainerUpdate] = []
    cid = d.create(pod, "c", 1000)
    assert cid is not None
    mems = parse_cpuset(d.runtime_view()[cid][1])
    assert len(mems) == 1 and mems <= {4, 5, 6, 7}  # created on PMEM only
    d.rm.outbox.bind(lambda updates, why: sent.extend(updates))
    assert eventually(lambda: bool(sent), timeout=30)
    assert [(u.container_id, u.reason) for u in sent] == [(cid, "cold start done")]
    assert parse_cpuset(sent[0].cpuset_mems) == mems | {next(iter(mems)) - 4}
    assert d.rm.placements()[cid][1] == sent[0].cpuset_mems
    assert d.rm.finish_cold_start(cid) == []  # once only
    d.rm.close()


def test_cold_start_resumes_after_a_restart(tmp_path: Path, topologies: dict[str, Topology]) -> None:
    d = Driver(topologies["2s-pmem"], tmp_path, MEMTIER)
    pod = d.run_pod("p", qos="burstable", annotations={f"{CS}/pod": "duration: 1h"})
    cid = d.create(pod, "c", 500)
    assert cid is not None and cid in d.rm.policy.cold_starts()
    due = d.rm.policy.cold_starts()[cid]
    d.restart()
    assert d.rm.policy.cold_starts() == {cid: due}  # the same wall-clock deadline, from the cache
    assert len(parse_cpuset(d.rm.placements()[cid][1])) == 1
    updates = d.rm.finish_cold_start(cid)
    assert len(updates) == 1 and len(parse_cpuset(updates[0].cpuset_mems)) == 2
    d.restart()
    assert d.rm.policy.cold_starts() == {} and len(parse_cpuset(d.rm.placements()[cid][1])) == 2
    d.rm.close()


UPSTREAM = Path(__file__).resolve().parents[4] / "test" / "data" / "upstream"


@pytest.mark.parametrize("alias", ["topology-aware", "memtier"])
@pytest.mark.parametrize("name", sorted(p.name for p in UPSTREAM.glob("topology-aware*.cfg")))
def test_upstream_samples_apply_with_memory_tiers(name: str, alias: str, topologies: dict[str, Topology]) -> None:
    """Upstream's topology-aware samples, also as memtier (its section renamed), on the PMEM+HBM topology."""
    text = (UPSTREAM / name).read_text()
    if alias == "memtier":
        text = text.replace("Active: topology-aware", "Active: memtier").replace("  topology-aware:", "  memtier:")
    p = policy_from_yaml(text, topologies["2s-pmem-hbm"])
    p.allocate("plain", burstable("plain", 500))
    p.allocate("pm", guaranteed("pm", 2000, annotations={f"{MT}/pod": "pmem"}))
    plain, pm = p.placement("plain")[1], p.placement("pm")[1]
    if p.opts.pin_memory:
        assert plain and plain <= set(range(8)) and plain & {4, 5, 6, 7}  # DRAM + PMEM by default
        assert pm and pm <= {4, 5, 6, 7}
    else:
        assert plain is None and pm is None
