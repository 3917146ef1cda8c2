"""The dynamic-pools policy: pool choice, sizing by requests and usage, side updates, cache restore."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fixtures.sysfs_builder import Shape, build_sysfs
from unit.resmgr.policy_helpers import burstable, ctr, guaranteed, policy_from_yaml

from resmgr.config import ConfigError
from resmgr.policy.base import RestoreError
from resmgr.policy.dynamic_pools import DYNAMIC_POOL_KEY, pool_sizes
from resmgr.topology import Topology, discover_topology, parse_cpuset

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


# Upstream's e2e topology n4c16: 2 packages x 2 NUMA nodes x 2 cores x 2 threads.
N4C16 = Shape(packages=2, nodes_per_package=2, cores_per_node=2, threads_per_core=2)
E2E = sorted(UPSTREAM.glob("dynamic-pools-e2e-*.cfg"))


@pytest.fixture(scope="module")
def n4c16(tmp_path_factory: pytest.TempPathFactory) -> Topology:
    return discover_topology(build_sysfs(tmp_path_factory.mktemp("n4c16"), N4C16))


def pool_of(p, cid: str) -> frozenset[int]:
    return p.placement(cid)[0]


@pytest.mark.parametrize("path", [UPSTREAM / "dynamic-pools-md-0.cfg", *E2E], ids=lambda p: p.name)
def test_every_upstream_config_applies(path: Path, n4c16: Topology) -> None:
    p = policy_from_yaml(path.read_text(), n4c16)
    configured = [t["Name"] for t in yaml.safe_load(path.read_text())["policy"]["dynamic-pools"]["DynamicPoolTypes"]]
    assert set(p.pool_cpus()) == {"reserved", "shared", *configured}
    for i, name in enumerate(configured):
        p.allocate(f"c{i}", burstable(f"c{i}", 1000, annotations={DYNAMIC_POOL_KEY: name}))
        assert p.grants[f"c{i}"].pool == name
    p.allocate("sys", ctr("sys", ns="kube-system"))
    assert pool_of(p, "sys") == p.reserved
    check_disjoint_cover(p)
    for cid in p.grants:
        assert pool_of(p, cid) and pool_of(p, cid) <= p.available


def test_upstream_e2e_basic_placement(n4c16: Topology) -> None:
    """Upstream's test01-basic-placement, without usage (its checks allow any usage split)."""
    p = policy_from_yaml((UPSTREAM / "dynamic-pools-e2e-cri-resmgr.cfg").read_text(), n4c16)
    assert len(p.available) == 15 and len(p.reserved) == 1
    p.allocate("pod0c0", ctr("pod0c0", ns="kube-system", pod="pod0"))
    p.allocate("pod0c1", ctr("pod0c1", ns="kube-system", pod="pod0"))
    assert pool_of(p, "pod0c0") == pool_of(p, "pod0c1") and len(pool_of(p, "pod0c0")) == 1
    p.allocate("pod1c0", ctr("pod1c0"))
    assert len(pool_of(p, "pod1c0")) == 14
    pool1 = {DYNAMIC_POOL_KEY + "/pod": "pool1"}
    p.allocate("pod2c0", guaranteed("pod2c0", 100, annotations=pool1))
    assert len(pool_of(p, "pod2c0")) >= 1 and len(pool_of(p, "pod1c0")) + len(pool_of(p, "pod2c0")) == 14
    assert not pool_of(p, "pod2c0") & pool_of(p, "pod1c0")
    p.allocate("pod3c0", guaranteed("pod3c0", 1500, annotations=pool1))
    assert pool_of(p, "pod2c0") == pool_of(p, "pod3c0") and len(pool_of(p, "pod3c0")) >= 2
    pool2 = {DYNAMIC_POOL_KEY + "/pod": "pool2"}
    p.allocate("pod4c0", guaranteed("pod4c0", 1500, annotations=pool2, pod="pod4"))
    p.allocate("pod4c1", guaranteed("pod4c1", 1500, annotations=pool2, pod="pod4"))
    assert pool_of(p, "pod4c0") == pool_of(p, "pod4c1") and len(pool_of(p, "pod4c0")) >= 3
    assert len(pool_of(p, "pod1c0")) + len(pool_of(p, "pod3c0")) + len(pool_of(p, "pod4c0")) == 14
    p.allocate("pod5c0", guaranteed("pod5c0", 1500, ns="pool1"))
    assert pool_of(p, "pod5c0") == pool_of(p, "pod3c0") and len(pool_of(p, "pod3c0")) >= 4
    check_disjoint_cover(p)


def test_upstream_e2e_reserved(n4c16: Topology) -> None:
    """Upstream's test04-reserved: reserved namespaces (globs) and the reserved type's own namespace."""
    p = policy_from_yaml((UPSTREAM / "dynamic-pools-e2e-reserved.cfg").read_text(), n4c16)
    assert p.reserved == {0, 1, 2}
    p.allocate("pod0c0", guaranteed("pod0c0", 100, ns="kube-system"))
    p.allocate("pod1c0", guaranteed("pod1c0", 1000, ns="monitor-mypods"))
    p.allocate("pod2c0", guaranteed("pod2c0", 1000, ns="system-logs"))
    p.allocate("pod3c0", guaranteed("pod3c0", 2000, ns="my-exact-name"))
    assert {pool_of(p, c) for c in ("pod0c0", "pod1c0", "pod2c0", "pod3c0")} == {frozenset({0, 1, 2})}
    p.allocate("pod4c0", guaranteed("pod4c0", 2000, annotations={DYNAMIC_POOL_KEY: "full-core"}))
    assert len(pool_of(p, "pod4c0")) == 2 and not pool_of(p, "pod4c0") & p.reserved


def test_cpu_classes_follow_the_pools(n4c16: Topology) -> None:
    p = policy_from_yaml((UPSTREAM / "dynamic-pools-md-0.cfg").read_text(), n4c16)
    assert p.cpu_classes() == {}  # no pool of a classed type owns a CPU yet
    p.allocate("a", burstable("a", 2000, ns="pool1"))
    p.allocate("b", burstable("b", 1000, ns="pool2"))
    assert p.cpu_classes() == {"pool1-cpuclass": p.pool_cpus()["pool1"], "pool2-cpuclass": p.pool_cpus()["pool2"]}
    p.release("a")
    assert p.cpu_classes() == {"pool2-cpuclass": p.pool_cpus()["pool2"]}
