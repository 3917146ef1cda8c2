"""Memory per pool (topology_memory): upstream's filter, reservations below a grant, and widening."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from unit.resmgr.policy_helpers import burstable, ctr, guaranteed

from resmgr.policy.memory_tiers import DEFAULT, MemoryType
from resmgr.policy.topology_memory import MemoryAccounting, memory_amount
from resmgr.topology.model import CpuInfo, Topology

GIB = 1 << 30
DRAM, PMEM = MemoryType.DRAM, MemoryType.PMEM


@dataclass(eq=False)
class FakePool:
    name: str
    ancestors: list[Any] = field(default_factory=list)
    below: frozenset[str] = frozenset()


def tree(sizes: dict[int, int], pmem: dict[int, int] | None = None) -> MemoryAccounting:
    """A root over one leaf per DRAM node (sizes: node -> bytes); ``pmem``: PMEM node -> the leaf's node."""
    pmem = pmem or {}
    root = FakePool("root", below=frozenset(f"leaf{n}" for n in sizes))
    pools = {"root": root, **{f"leaf{n}": FakePool(f"leaf{n}", ancestors=[root]) for n in sizes}}
    topo = Topology(cpus={n: CpuInfo(id=n, package=0, die=0, core=n, node=n) for n in sizes},
                    node_memory={**sizes, **{n: 2 * GIB for n in pmem}})
    memsets = {f"leaf{n}": {DRAM: frozenset({n}), PMEM: frozenset(p for p, near in pmem.items() if near == n),
                            MemoryType.HBM: frozenset()} for n in sizes}
    memsets["root"] = {DRAM: frozenset(sizes), PMEM: frozenset(pmem), MemoryType.HBM: frozenset()}
    return MemoryAccounting(topo, pools, memsets)


def test_amounts_follow_the_qos_class() -> None:
    assert memory_amount(guaranteed("g", 1000)) == GIB
    b = burstable("b", 100)
    b.memory_request = 5
    assert memory_amount(b) == 5
    b.memory_limit = 7
    assert memory_amount(b) == 7
    assert memory_amount(ctr("be")) == 0


def test_pools_that_cannot_hold_the_request_are_left_out() -> None:
    """Upstream's TestMemoryLimitFiltering: 10000 bytes fit a 10001-byte node, not a 9999-byte one; with
    two 6000-byte leaves only their 12000-byte root holds it."""
    one = tree({0: 10001})
    assert one.fits("leaf0", 10000, DEFAULT, False)
    assert not tree({0: 9999}).fits("leaf0", 10000, DEFAULT, False)
    two = tree({0: 6000, 1: 6000})
    assert [p for p in two.pools if two.fits(p, 10000, DEFAULT, False)] == ["root"]


def test_a_cold_start_must_fit_in_pmem() -> None:
    m = tree({0: 4 * GIB}, pmem={1: 0})
    assert m.fits("leaf0", 3 * GIB, DEFAULT, False)  # 2 GiB PMEM + 1 GiB DRAM
    assert not m.fits("leaf0", 3 * GIB, DEFAULT, True)
    assert m.fits("leaf0", 2 * GIB, DEFAULT, True)
    assert not m.fits("leaf0", 3 * GIB, PMEM, False)  # PMEM only
    assert m.allocate("c", "leaf0", 3 * GIB, DEFAULT) == []
    assert m.grants["c"].amounts == (2 * GIB, GIB, 0)  # PMEM first, as upstream


def test_a_root_grant_moves_leaf_grants_up_when_they_no_longer_fit() -> None:
    """The example in upstream's allocatePool: workloads of 1 GiB and 0.5 GiB on two 2 GiB leaves, then
    1.5 GiB on the root. The first leaf's reservations (1.5 GiB) exceed its free 1 GiB: its workload moves
    to the root; that adds 1 GiB to the reservations of both leaves, and the second leaf's 2.5 GiB exceed
    its free 1.5 GiB: its workload moves up too. Releasing the root grant gives the reservations back."""
    m = tree({0: 2 * GIB, 1: 2 * GIB})
    assert m.allocate("wl1", "leaf0", GIB, DEFAULT) == []
    assert m.allocate("wl2", "leaf1", GIB // 2, DEFAULT) == []
    assert m.state(["leaf0", "leaf1"]) == {"leaf0": {"free": [0, GIB, 0], "extra": [0, 0, 0]},
                                           "leaf1": {"free": [0, 3 * GIB // 2, 0], "extra": [0, 0, 0]}}
    assert m.allocate("wl3", "root", 3 * GIB // 2, DEFAULT) == ["wl1", "wl2"]
    assert {cid: m.pool_of(cid) for cid in ("wl1", "wl2", "wl3")} == {"wl1": "root", "wl2": "root", "wl3": "root"}
    assert m.state() == {"root": {"free": [0, GIB, 0], "extra": [0, 0, 0]},
                         "leaf0": {"free": [0, 2 * GIB, 0], "extra": [0, 3 * GIB, 0]},
                         "leaf1": {"free": [0, 2 * GIB, 0], "extra": [0, 3 * GIB, 0]}}
    m.release("wl3")
    assert m.state(["leaf0"]) == {"leaf0": {"free": [0, 2 * GIB, 0], "extra": [0, 3 * GIB // 2, 0]}}


def test_a_small_root_grant_moves_nothing() -> None:
    m = tree({0: 2 * GIB, 1: 2 * GIB})
    m.allocate("wl1", "leaf0", GIB, DEFAULT)
    assert m.allocate("wl3", "root", GIB, DEFAULT) == []
    assert m.pool_of("wl1") == "leaf0"


def test_without_node_memory_nothing_is_accounted() -> None:
    root = FakePool("root")
    topo = Topology(cpus={0: CpuInfo(id=0, package=0, die=0, core=0, node=0)})
    m = MemoryAccounting(topo, {"root": root}, {"root": {DRAM: frozenset({0})}})
    assert not m.enabled and m.fits("root", 1 << 60, DEFAULT, False)
