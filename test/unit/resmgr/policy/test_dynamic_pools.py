"""The dynamic-pools policy: pool choice, sizing by requests and usage, side updates, cache restore."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from unit.resmgr.policy_helpers import burstable, ctr, guaranteed, policy_from_yaml

from resmgr.config import ConfigError
from resmgr.policy.base import RestoreError
from resmgr.policy.dynamic_pools import DYNAMIC_POOL_KEY, pool_sizes
from resmgr.topology import Topology, parse_cpuset

UPSTREAM = Path(__file__).resolve().parents[4] / "test" / "data" / "upstream"
CONFIG = """\
policy:
  Active: dynamic-pools
  ReservedResources:
    cpu: cpuset:0
  dynamic-pools:
    ReservedPoolNamespaces: [monitoring]
    DynamicPoolTypes:
      - Name: pool1
        Namespaces: [pool1]
      - Name: pool2
        Namespaces: ["pool2-*"]
"""


@pytest.fixture
def topo(topologies: dict[str, Topology]) -> Topology:
    return topologies["2s-2n-16c-2t"]  # 128 CPUs


def sizes(p) -> dict[str, int]:
    return {name: len(cpus) for name, cpus in p.pool_cpus().items()}


def check_disjoint_cover(p) -> None:
    pools = p.pool_cpus()
    seen: set[int] = set()
    for cpus in pools.values():
        assert not cpus & seen
        seen |= cpus
    assert seen == set(p.available), "every available CPU belongs to exactly one pool"


def test_pool_sizes_follow_upstreams_rule() -> None:
    # Requests rounded up; the rest by usage, rounded down; the remainder to the busiest pool.
    assert pool_sizes(10, {"shared": 0, "a": 1500, "b": 0}, {"a": 300, "b": 100}, {"a", "b"}) == \
        {"shared": 0, "a": 2 + 6 + 0, "b": 2}
    # No usage known: every left-over CPU goes to shared.
    assert pool_sizes(10, {"shared": 0, "a": 2000}, {}, {"a"}) == {"shared": 8, "a": 2}
    # A populated shared pool whose usage earns it nothing still gets one CPU.
    assert pool_sizes(10, {"shared": 0, "a": 0}, {"a": 900, "shared": 1}, {"a", "shared"}) == {"shared": 1, "a": 9}
    # Requests beyond the node: one CPU per populated pool, then by requests.
    assert pool_sizes(4, {"shared": 0, "a": 8000, "b": 2000, "c": 0}, {}, {"a", "b", "shared"}) == \
        {"shared": 0, "a": 3, "b": 1, "c": 0}


def test_choice_by_annotation_namespace_and_request(topo: Topology) -> None:
    p = policy_from_yaml(CONFIG, topo)
    p.allocate("sys", ctr("sys", ns="kube-system"))
    p.allocate("mon", burstable("mon", 100, ns="monitoring"))
    p.allocate("one", burstable("one", 500, ns="pool1"))
    p.allocate("two", guaranteed("two", 2000, ns="pool2-x"))
    p.allocate("be", ctr("be", ns="pool1"))  # no request, no limit: shared whatever the namespace
    p.allocate("ann", burstable("ann", 100, annotations={DYNAMIC_POOL_KEY: "pool2"}))
    p.allocate("bad", burstable("bad", 100, annotations={DYNAMIC_POOL_KEY: "nosuch"}))
    p.allocate("web", burstable("web", 100))
    pools = {cid: g.pool for cid, g in p.grants.items()}
    assert pools == {"sys": "reserved", "mon": "reserved", "one": "pool1", "two": "pool2", "be": "shared",
                     "ann": "pool2", "bad": "shared", "web": "shared"}
    assert p.placement("sys")[0] == {0} == p.placement("mon")[0]
    assert sizes(p)["pool1"] == 1 and sizes(p)["pool2"] == 3
    assert sizes(p)["shared"] == 127 - 4  # no usage yet: the rest
    check_disjoint_cover(p)
    for cid, g in p.grants.items():
        cpus, mems = p.placement(cid)
        assert cpus == p.pool_cpus()[g.pool] and mems == topo.nodes_of(cpus)


def test_usage_moves_left_over_cpus_and_frees_them_again(topo: Topology) -> None:
    p = policy_from_yaml(CONFIG, topo)
    p.allocate("a", burstable("a", 1000, ns="pool1"))
    p.allocate("b", burstable("b", 1000, ns="pool2-b"))
    p.allocate("s", burstable("s", 100))
    before = p.pool_cpus()
    p.rebalance({"a": 3000, "b": 1000, "s": 0, "gone": 5000})
    assert "gone" not in p.usage
    free = 127 - 1 - 1 - 1  # requests rounded up
    # shared earns 0 by usage but is populated: 1; the rest 3:1 between pool1 and pool2.
    assert sizes(p) == {"reserved": 1, "shared": 1, "pool1": 1 + int((free - 0) * 3 / 4),
                        "pool2": 1 + int((free - 0) * 1 / 4)}
    check_disjoint_cover(p)
    assert before["pool1"] <= p.pool_cpus()["pool1"], "a growing pool keeps its CPUs"
    p.release("a")
    assert "a" not in p.usage
    p.rebalance({})
    assert sizes(p)["pool1"] == 0 and sizes(p)["shared"] == 127 - 1
    check_disjoint_cover(p)


def test_pool_without_cpus_runs_on_reserved(topologies: dict[str, Topology]) -> None:
    p = policy_from_yaml(CONFIG, topologies["this-machine"])  # CPUs 0,1; 0 reserved
    p.allocate("a", burstable("a", 1000, ns="pool1"))
    p.allocate("b", burstable("b", 1000, ns="pool2-b"))
    assert {p.placement("a")[0], p.placement("b")[0]} == {frozenset({1}), frozenset({0})}
    assert not p.pool_cpus()["pool1"] & p.pool_cpus()["pool2"]


def test_needs_reserved_cpus_and_unique_types(topo: Topology) -> None:
    with pytest.raises(ConfigError) as err:
        policy_from_yaml("policy:\n  Active: dynamic-pools\n  ReservedResources:\n    cpu: 0\n", topo)
    assert err.value.field == "policy.ReservedResources.cpu"
    with pytest.raises(ConfigError) as err:
        policy_from_yaml(CONFIG + "      - Name: pool1\n", topo)
    assert "DynamicPoolTypes[2]" in err.value.field


def test_pin_options(topo: Topology) -> None:
    text = CONFIG.replace("    ReservedPoolNamespaces", "    PinCPU: false\n    PinMemory: false\n"
                                                          "    ReservedPoolNamespaces")
    p = policy_from_yaml(text, topo)
    p.allocate("a", burstable("a", 1000, ns="pool1"))
    assert p.placement("a") == (None, None)


def test_restore(topo: Topology) -> None:
    p = policy_from_yaml(CONFIG, topo)
    p.allocate("a", burstable("a", 1000, ns="pool1"))
    p.allocate("s", burstable("s", 100))
    p.rebalance({"a": 5000, "s": 100})
    state, live = p.export_state(), dict(p.containers)
    q = policy_from_yaml(CONFIG, topo)
    q.restore_state(state, live)
    assert q.placements() == p.placements() and q.export_state() == state
    # A container gone while we were down: its pool shrinks back.
    r = policy_from_yaml(CONFIG, topo)
    r.restore_state(state, {"s": live["s"]})
    assert sizes(r)["pool1"] == 0 and sizes(r)["shared"] == 127
    # A config without the pool does not fit; nor do overlapping or reserved CPUs.
    other = CONFIG.split("      - Name: pool1")[0] + "      - Name: other\n"
    with pytest.raises(RestoreError):
        policy_from_yaml(other, topo).restore_state(state, live)
    bad = {**state, "dynamic_pools": [dict(item, cpus="0-3") for item in state["dynamic_pools"]]}
    with pytest.raises(RestoreError):
        policy_from_yaml(CONFIG, topo).restore_state(bad, live)
    with pytest.raises(RestoreError):
        policy_from_yaml(CONFIG, topo).restore_state({**state, "dynamic_pools": [{"cpus": "1"}]}, live)


def test_upstream_sample_applies(topo: Topology) -> None:
    text = (UPSTREAM / "dynamic-pools-md-0.cfg").read_text()
    p = policy_from_yaml(text, topo)
    assert set(p.pool_cpus()) == {"reserved", "shared", "pool1", "pool2"}
    assert p.reserved == {0}
    p.allocate("x", burstable("x", 2000, ns="pool2"))
    assert p.grants["x"].pool == "pool2" and len(p.placement("x")[0]) == 2
    assert yaml.safe_load(text)["policy"]["dynamic-pools"]["PinMemory"] is True
    assert p.placement("x")[1] == topo.nodes_of(p.placement("x")[0])
    assert p.placement("x")[0] <= parse_cpuset("1-127")
