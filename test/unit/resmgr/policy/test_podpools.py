"""The podpools policy: upstream's samples and e2e scenarios (on upstream's n4c16 shape), fill orders,
full pools, the built-in pools, CPU request checks, config errors and cache restore."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fixtures.hypothesis_profiles import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from unit.resmgr.policy import upstream_topologies
from unit.resmgr.policy_helpers import burstable, ctr, guaranteed, policy_from_yaml
from unit.resmgr.rm_driver import Driver

from resmgr.config import ConfigError, validate_config_text
from resmgr.policy import podpools
from resmgr.policy.base import RestoreError
from resmgr.policy.podpools import POOL_KEY
from resmgr.topology import Topology, format_cpuset, parse_cpuset

UPSTREAM = Path(__file__).resolve().parents[4] / "test" / "data" / "upstream"


@pytest.fixture(scope="module")
def n4c16() -> Topology:
    """Upstream's podpools e2e machine: 2 sockets, 4 NUMA nodes of 2 hyperthreaded cores (node = cpu // 4)."""
    return upstream_topologies.n4c16()


def pool(name: str) -> dict[str, str]:
    return {POOL_KEY: name}


def sizes(p, type_name: str) -> list[int]:
    return [len(x.cpus) for x in p.pools.values() if x.type.name == type_name]


def assert_pools_disjoint(p) -> None:
    seen: set[int] = set()
    for x in p.pools.values():
        if x.type.name in ("reserved", "default") and x.cpus & p.reserved:
            continue
        assert not x.cpus & seen, f"{x.name} overlaps another pool"
        seen |= x.cpus


def test_upstream_sample_config(n4c16: Topology) -> None:
    """sample-configs/podpools-policy.cfg: 3 singlecpu pools (3 CPUs), 3 dualcpu pools (50 % of 13 CPUs,
    floor(6.5 / 2) instances) and the 4 CPUs left over as the default pool, as upstream's e2e expects."""
    p = policy_from_yaml((UPSTREAM / "podpools-policy.cfg").read_text(), n4c16)
    assert p.reserved == {15} and p.reserved_pool.cpus == {15}
    assert sizes(p, "singlecpu") == [1, 1, 1] and sizes(p, "dualcpu") == [2, 2, 2]
    assert len(p.default_pool.cpus) == 4
    assert_pools_disjoint(p)
    for x in p.pools.values():
        assert x.cpus <= parse_cpuset("2-15")
        assert x.placement == (x.cpus, n4c16.nodes_of(x.cpus))
    # upstream e2e test01: every container of a pod shares its pool instance's CPUs and memory nodes
    for c in range(3):
        p.allocate(f"s{c}", burstable(f"s{c}", 167, pod="pod0", annotations=pool("singlecpu")))
        p.allocate(f"d{c}", burstable(f"d{c}", 667, pod="pod1", annotations=pool("dualcpu")))
        p.allocate(f"o{c}", ctr(f"o{c}", pod="pod2"))
        p.allocate(f"k{c}", ctr(f"k{c}", pod="pod3", ns="kube-system"))
    assert {p.placement(f"s{c}") for c in range(3)} == {p.pools["singlecpu[0]"].placement}
    assert {p.placement(f"d{c}") for c in range(3)} == {p.pools["dualcpu[0]"].placement}
    assert {p.placement(f"o{c}") for c in range(3)} == {p.default_pool.placement}
    assert {p.placement(f"k{c}") for c in range(3)} == {p.reserved_pool.placement}
    # a pool name no definition has: the default pool
    p.allocate("bad", ctr("bad", annotations=pool("non-existing-pool")))
    assert p.grants["bad"].pool == "default[0]"
    # the pool names are what cri_resmgr_pool_containers reports
    assert {g.pool for g in p.grants.values()} == {"singlecpu[0]", "dualcpu[0]", "default[0]", "reserved[0]"}


def test_upstream_sample_config_layout(n4c16: Topology) -> None:
    """The CPUs of every pool instance, as upstream's e2e (podpools/n4c16/py_consts.var.py) expects them:
    the allocator takes lone threads of the package in use before idle cores, cores in id order, and the
    default pool gets what is left, across NUMA nodes 1 and 3."""
    p = policy_from_yaml((UPSTREAM / "podpools-policy.cfg").read_text(), n4c16)
    layout = {name: format_cpuset(x.cpus) for name, x in p.pools.items()}
    assert layout == {"reserved[0]": "15", "default[0]": "5,12-14",
                      "singlecpu[0]": "2", "singlecpu[1]": "3", "singlecpu[2]": "4",
                      "dualcpu[0]": "6-7", "dualcpu[1]": "8-9", "dualcpu[2]": "10-11"}
    assert p.default_pool.placement == (frozenset({5, 12, 13, 14}), frozenset({1, 3}))


def test_upstream_docs_example(n4c16: Topology) -> None:
    """docs/policy/podpools.md: 95 % of the non-reserved CPUs in dualcpu pools of one pod each."""
    p = policy_from_yaml((UPSTREAM / "podpools-md-0.cfg").read_text(), n4c16)
    assert len(p.reserved) == 1
    assert sizes(p, "dualcpu") == [2] * 7  # floor(15 * 95 / 100 / 2)
    assert len(p.default_pool.cpus) == 1 and not p.default_pool.cpus & p.reserved
    assert_pools_disjoint(p)
    for i in range(7):
        p.allocate(f"c{i}", burstable(f"c{i}", 1200, pod=f"pod{i}", annotations=pool("dualcpu")))
        p.allocate(f"d{i}", burstable(f"d{i}", 800, pod=f"pod{i}", annotations=pool("dualcpu")))
        assert p.placement(f"c{i}") == p.placement(f"d{i}") == p.pools[f"dualcpu[{i}]"].placement
    # MaxPods 1 everywhere: the eighth pod has no room and runs in the default pool
    p.allocate("late", burstable("late", 2000, annotations=pool("dualcpu")))
    assert p.grants["late"].pool == "default[0]"
    # a freed instance takes the next pod
    p.release("c3")
    p.release("d3")
    p.allocate("next", burstable("next", 2000, annotations=pool("dualcpu")))
    assert p.grants["next"].pool == "dualcpu[3]"


def test_upstream_metrics_e2e_config(n4c16: Topology) -> None:
    """upstream e2e test06: 90 % of 15 CPUs in 2-CPU instances of 5 pods (400m per pod)."""
    p = policy_from_yaml("policy:\n  Active: podpools\n  ReservedResources:\n    CPU: 1\n  podpools:\n    Pools:\n"
                         "      - {Name: 400mCPU, Instances: 90 %, CPU: 2, MaxPods: 5}\n", n4c16)
    assert sizes(p, "400mCPU") == [2] * 6 and len(p.default_pool.cpus) == 3
    for i in range(31):
        p.allocate(f"c{i}", burstable(f"c{i}", 400, annotations=pool("400mCPU")))
    assert [len(x.pods) for x in p.pools.values() if x.type.name == "400mCPU"] == [5] * 6
    assert p.grants["c30"].pool == "default[0]"


def test_balanced_fill_order(n4c16: Topology) -> None:
    """upstream e2e test02, singlecpu pools (Balanced by default, MaxPods 2)."""
    p = policy_from_yaml((UPSTREAM / "podpools-policy.cfg").read_text(), n4c16)
    for i in range(6):
        p.allocate(f"pod{i}", ctr(f"pod{i}", annotations=pool("singlecpu")))
    where = {i: p.grants[f"pod{i}"].pool for i in range(6)}
    assert [where[i] for i in range(6)] == ["singlecpu[0]", "singlecpu[1]", "singlecpu[2]"] * 2
    for i in (0, 2, 5):
        p.release(f"pod{i}")
    p.allocate("pod6", ctr("pod6", annotations=pool("singlecpu")))
    assert p.grants["pod6"].pool == "singlecpu[2]"  # the most free room


def test_packed_fill_order(n4c16: Topology) -> None:
    """upstream e2e test02, dualcpu pools (Packed, MaxPods 3)."""
    p = policy_from_yaml((UPSTREAM / "podpools-policy.cfg").read_text(), n4c16)
    for i in range(6):
        p.allocate(f"pod{i}", ctr(f"pod{i}", annotations=pool("dualcpu")))
    assert [p.grants[f"pod{i}"].pool for i in range(6)] == ["dualcpu[0]"] * 3 + ["dualcpu[1]"] * 3
    for i in (0, 1, 5):
        p.release(f"pod{i}")
    p.allocate("pod6", ctr("pod6", annotations=pool("dualcpu")))
    assert p.grants["pod6"].pool == "dualcpu[1]"  # the least free room


def test_first_free_fill_order_and_full_pools(n4c16: Topology) -> None:
    text = """\
policy:
  Active: podpools
  ReservedResources:
    cpu: cpuset:0
  podpools:
    Pools:
      - {Name: ff, CPU: 2, MaxPods: 2, Instances: 3, FillOrder: FirstFree}
      - {Name: closed, CPU: 1, MaxPods: -1}
      - {Name: reserved, MaxPods: 1}
"""
    p = policy_from_yaml(text, n4c16)
    for i in range(3):
        p.allocate(f"a{i}", ctr(f"a{i}", annotations=pool("ff")))
    assert [p.grants[f"a{i}"].pool for i in range(3)] == ["ff[0]", "ff[0]", "ff[1]"]
    p.release("a0")
    p.allocate("a3", ctr("a3", annotations=pool("ff")))
    assert p.grants["a3"].pool == "ff[0]"  # the first with room, not the emptiest
    for i in range(4, 7):
        p.allocate(f"a{i}", ctr(f"a{i}", annotations=pool("ff")))
    assert [p.grants[f"a{i}"].pool for i in range(4, 7)] == ["ff[1]", "ff[2]", "ff[2]"]
    p.allocate("full", ctr("full", annotations=pool("ff")))
    assert p.grants["full"].pool == "default[0]"
    # MaxPods -1: no pods at all
    p.allocate("shut", ctr("shut", annotations=pool("closed")))
    assert p.grants["shut"].pool == "default[0]"
    # the reserved pool's MaxPods: the second kube-system pod runs in the default pool
    p.allocate("k1", ctr("k1", ns="kube-system"))
    p.allocate("k2", ctr("k2", ns="kube-system"))
    assert (p.grants["k1"].pool, p.grants["k2"].pool) == ("reserved[0]", "default[0]")
    # an annotation wins over the kube-system namespace
    p.allocate("k3", ctr("k3", ns="kube-system", annotations={f"{POOL_KEY}/pod": "closed"}))
    assert p.grants["k3"].pool == "default[0]"


def test_custom_default_pool(n4c16: Topology) -> None:
    """upstream e2e test07: a default pool of its own 3 CPUs, highperf pools on 100 % of the rest."""
    text = """\
policy:
  Active: podpools
  ReservedResources:
    CPU: cpuset:0
  podpools:
    Pools:
      - Name: default
        CPU: 3
      - Name: highperf
        Instances: 100%
        CPU: 2
        MaxPods: 1
"""
    p = policy_from_yaml(text, n4c16)
    assert len(p.default_pool.cpus) == 3 and not p.default_pool.cpus & {0}
    assert sizes(p, "highperf") == [2] * 6  # (16 - 1 - 3) / 2
    assert_pools_disjoint(p)
    p.allocate("sys", ctr("sys", ns="kube-system"))
    p.allocate("daemon", ctr("daemon", ns="daemons"))
    assert p.placement("sys")[0] == {0}
    assert len(p.placement("daemon")[0]) == 3
    for i in range(4):
        p.allocate(f"hp{i}", guaranteed(f"hp{i}", 2000, annotations=pool("highperf")))
    cpus = [p.placement(f"hp{i}")[0] for i in range(4)]
    assert all(len(c) == 2 for c in cpus) and len(set().union(*cpus)) == 8


def test_default_pool_falls_back_to_reserved_cpus(topologies: dict[str, Topology]) -> None:
    p = policy_from_yaml("policy:\n  Active: podpools\n  ReservedResources:\n    cpu: 1\n  podpools:\n"
                         "    Pools:\n      - {Name: all, CPU: 1, Instances: 100 %}\n", topologies["this-machine"])
    assert p.default_pool.cpus == p.reserved == p.reserved_pool.cpus
    assert sizes(p, "all") == [1]
    assert p.exclusive_sets() == {"all[0]": p.pools["all[0]"].cpus}  # reserved CPUs are nobody's own


def test_unpinned(n4c16: Topology) -> None:
    text = ("policy:\n  Active: podpools\n  podpools:\n    PinCPU: false\n    Pools:\n"
            "      - {Name: a, CPU: 2}\n")
    p = policy_from_yaml(text, n4c16)
    p.allocate("x", ctr("x", annotations=pool("a")))
    assert p.placement("x") == (None, n4c16.nodes_of(p.pools["a[0]"].cpus))
    p = policy_from_yaml(text.replace("PinCPU", "PinMemory"), n4c16)
    p.allocate("x", ctr("x", annotations=pool("a")))
    assert p.placement("x") == (p.pools["a[0]"].cpus, None)


def test_cpu_requests_are_checked_and_logged(n4c16: Topology, caplog: pytest.LogCaptureFixture) -> None:
    """upstream e2e test04: overbooking is logged when it happens, a pod's misaligned request when it leaves."""
    p = policy_from_yaml((UPSTREAM / "podpools-policy.cfg").read_text(), n4c16)
    caplog.set_level(logging.INFO, logger="resmgr.policy")
    p.allocate("a", burstable("a", 1050, pod="pod1", annotations=pool("dualcpu")))
    assert "overbooked" not in caplog.text
    p.allocate("b", burstable("b", 1050, pod="pod1", annotations=pool("dualcpu")))
    assert "overbooked pool dualcpu[0]" in caplog.text and "2100m requested of 2000m" in caplog.text
    caplog.clear()
    p.release("a")
    assert "bad CPU requests" not in caplog.text  # the pod still has a container there
    p.release("b")
    assert "bad CPU requests: pod default/pod1 requested 2100 mCPUs" in caplog.text
    assert "must request 666 mCPUs" in caplog.text
    caplog.clear()
    for i in range(4):  # 4 x 167m is 666m within the margin
        p.allocate(f"c{i}", burstable(f"c{i}", 167, pod="pod6", annotations=pool("dualcpu")))
    for i in range(4):
        p.release(f"c{i}")
    assert "bad CPU requests" not in caplog.text and "overbooked" not in caplog.text


def test_pod_keeps_its_pool_when_placed_again(n4c16: Topology) -> None:
    """A resize releases and allocates a pod's only container: it stays in its instance, whatever the
    fill order would pick for a new pod."""
    p = policy_from_yaml((UPSTREAM / "podpools-policy.cfg").read_text(), n4c16)
    p.allocate("a", ctr("a", pod="pa", annotations=pool("dualcpu")))
    p.allocate("b", ctr("b", pod="pb", annotations=pool("dualcpu")))
    p.allocate("c", ctr("c", pod="pc", annotations=pool("dualcpu")))
    p.allocate("d", ctr("d", pod="pd", annotations=pool("dualcpu")))
    assert p.grants["d"].pool == "dualcpu[1]"
    p.release("d")
    p.allocate("d", burstable("d", 500, pod="pd", annotations=pool("dualcpu")))
    assert p.grants["d"].pool == "dualcpu[1]"  # Packed would have said dualcpu[0] for a new pod
    p.allocate("e", ctr("e", pod="pe", annotations=pool("dualcpu")))
    assert p.grants["e"].pool == "dualcpu[1]"


@pytest.mark.parametrize(("pools", "field", "words"), [
    ("- {Name: reserved, CPU: 2}", "policy.podpools.Pools[0].CPU", "ReservedResources"),
    ("- {Name: reserved, CPU: 1, Instances: 2}", "policy.podpools.Pools[0].Instances", "exactly one"),
    ("- {Name: default, CPU: 1, Instances: 2}", "policy.podpools.Pools[0].Instances", "exactly one"),
    ("- {Name: default, CPU: 16}", "policy.podpools.Pools[0].CPU", "only 15"),
    ("- {Name: user, CPU: 1, Instances: 100 CPUs}", "policy.podpools.Pools[0].Instances", "insufficient CPUs"),
    ("- {Name: user, CPU: 3, Instances: 6}", "policy.podpools.Pools[0].Instances", "insufficient CPUs"),
    ("- {Name: user, CPU: 4, Instances: 10 %}", "policy.podpools.Pools[0].Instances", "no instance"),
    ("- {Name: user, CPU: 3, Instances: 3, FillOrder: Packed}", "policy.podpools.Pools[0].MaxPods",
     "2 instance(s) unreachable"),
    ("- {Name: a, CPU: 7, Instances: 50 %}\n      - {Name: b, CPU: 9}", "policy.podpools.Pools[1].Instances",
     "insufficient CPUs"),
])
def test_config_errors(n4c16: Topology, pools: str, field: str, words: str) -> None:
    text = f"policy:\n  Active: podpools\n  ReservedResources:\n    cpu: 1\n  podpools:\n    Pools:\n      {pools}\n"
    with pytest.raises(ConfigError) as info:
        policy_from_yaml(text, n4c16)
    assert info.value.field == field
    assert words in str(info.value)


def test_needs_reserved_cpus(n4c16: Topology) -> None:
    with pytest.raises(ConfigError) as info:
        policy_from_yaml("policy:\n  Active: podpools\n  ReservedResources:\n    cpu: 0\n", n4c16)
    assert info.value.field == "policy.ReservedResources.cpu"


def test_restore(n4c16: Topology) -> None:
    text = (UPSTREAM / "podpools-policy.cfg").read_text()
    p = policy_from_yaml(text, n4c16)
    containers = {}
    for i, (kind, ns) in enumerate([("dualcpu", "default"), ("dualcpu", "default"), ("singlecpu", "default"),
                                    (None, "default"), (None, "kube-system")]):
        c = burstable(f"c{i}", 300, pod=f"pod{max(i, 1)}", ns=ns, annotations=pool(kind) if kind else {})
        containers[f"c{i}"] = c
        p.allocate(f"c{i}", c)
    state = p.export_state()
    q = policy_from_yaml(text, n4c16)
    q.restore_state(state, containers)
    assert q.placements() == p.placements() and q.export_state() == state
    # the pools' bookkeeping came back too: MaxPods counts the restored pods
    assert {n: dict(x.pods) for n, x in q.pools.items()} == {n: dict(x.pods) for n, x in p.pools.items()}

    def restore(config: str, cached=state) -> None:
        policy_from_yaml(config, n4c16).restore_state(cached, containers)

    with pytest.raises(RestoreError, match="not a pool of this config"):  # dualcpu[0] got other CPUs
        restore(text.replace("Instances: 3 CPUs", "Instances: 5 CPUs"))
    with pytest.raises(RestoreError, match="MaxPods"):
        restore(text.replace("MaxPods: 3", "MaxPods: -1"))
    with pytest.raises(RestoreError, match="no podpools pools"):
        restore(text, {"grants": state["grants"]})
    with pytest.raises(RestoreError, match="different pools"):
        split = {**state, "grants": {**state["grants"], "c1": {**state["grants"]["c1"], "pool": "dualcpu[1]"}}}
        restore(text, split)
    with pytest.raises(RestoreError, match="pool type"):
        wrong = {**state, "grants": {**state["grants"], "c3": {**state["grants"]["c3"], "pool": "dualcpu[2]"}}}
        restore(text, wrong)


def test_through_the_resource_manager(n4c16: Topology, tmp_path: Path) -> None:
    """Restart keeps every pod in its instance; a config push keeps them too while their instances stay,
    re-places them (the runtime gets the updates) when not, and is refused if it does not fit the node."""
    text = (UPSTREAM / "podpools-policy.cfg").read_text()
    d = Driver(n4c16, tmp_path, text)
    pods = [d.run_pod(f"p{i}", annotations=pool("dualcpu")) for i in range(4)]
    cids = [d.create(pods[i], f"c{i}", 500) for i in range(4)]
    side = d.create(pods[3], "side", 100)
    placed = d.rm.placements()
    assert placed[side] == placed[cids[3]] != placed[cids[0]]
    assert d.restart() == [] and d.rm.placements() == placed
    assert d.rm.policy.pools["dualcpu[0]"].pods == {pods[0]: 1, pods[1]: 1, pods[2]: 1}
    # one more dualcpu instance: the running ones keep their CPUs, nobody moves
    assert d.rm.set_config(validate_config_text(text.replace("Instances: 50 %", "Instances: 4"))) == []
    assert d.rm.placements() == placed
    # singlecpu takes 5 CPUs: the dualcpu instances get other CPUs and their pods follow
    d.runtime.apply(d.rm.set_config(validate_config_text(text.replace("Instances: 3 CPUs", "Instances: 5 CPUs"))))
    assert d.runtime_view() == d.rm.placements() != placed
    assert [d.rm.policy.grants[c].pool for c in [*cids, side]] == ["dualcpu[0]"] * 3 + ["dualcpu[1]"] * 2
    with pytest.raises(ConfigError, match="insufficient CPUs"):
        d.rm.set_config(validate_config_text(text.replace("Instances: 50 %", "Instances: 6")))
    assert len(sizes(d.rm.policy, "singlecpu")) == 5


AGENT_CONFIG = "policy:\n  Active: podpools\n  ReservedResources:\n    CPU: 1\n  podpools:\n    Pools:\n" \
               "      - {{Name: {name}, Instances: {instances}, CPU: {cpu}, MaxPods: {maxpods}}}\n"


def test_config_updates_keep_available_and_reserved(n4c16: Topology, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """upstream e2e podpools test05 (agent updates config): Available/ReservedResources are fixed when the
    policy is created; config updates re-apply only the pool definitions. Started on the sample config
    (available 2-15, reserved 15), an agent config with ``ReservedResources: CPU: 1`` and no
    AvailableResources keeps both: reserved stays CPU 15 (not CPU 0) and pools are cut from 2-14."""
    d = Driver(n4c16, tmp_path, (UPSTREAM / "podpools-policy.cfg").read_text())
    pods = [d.run_pod("pod0", namespace="kube-system"), d.run_pod("pod1"),
            d.run_pod("pod2", annotations=pool("singlecpu"))]
    pods += [d.run_pod(f"pod{i}", annotations=pool("dualcpu")) for i in range(3, 7)]
    cids = [d.create(pod, f"pod{i}c0", 0 if i < 2 else 1000) for i, pod in enumerate(pods)]

    def cpus(i: int) -> frozenset[int]:
        assert d.runtime_view() == d.rm.placements()
        return parse_cpuset(d.runtime.cpusets[cids[i]][0])

    def push(name: str, cpu: int, maxpods: int, instances: str) -> None:
        text = AGENT_CONFIG.format(name=name, cpu=cpu, maxpods=maxpods, instances=instances)
        d.runtime.apply(d.rm.set_config(validate_config_text(text)))

    assert cpus(0) == {15} and [cpus(i) for i in range(3, 7)] == [{6, 7}] * 3 + [{8, 9}]
    push("dualcpu", 2, 2, "100 %")
    assert cpus(0) == {15} and d.rm.policy.reserved == {15}  # reserved remains the same
    assert len(cpus(1)) == 1 and cpus(2) == cpus(1)  # 13 CPUs, 6 dualcpu instances: 1 left for default
    dual = [cpus(i) for i in range(3, 7)]
    assert all(len(c) == 2 for c in dual) and len(frozenset().union(*dual)) == 8
    assert all(x.cpus <= parse_cpuset("2-15") for x in d.rm.policy.pools.values())
    with pytest.raises(ConfigError):  # borked: the pools stay as they are
        push("borked", 130, 2, "1")
    assert cpus(0) == {15} and d.rm.policy.pools.keys() >= {"dualcpu[5]"}
    with pytest.raises(ConfigError, match="insufficient CPUs"):  # 7 x 2 CPUs fit 15 CPUs, not the 13 kept
        push("dualcpu", 2, 2, "7")
    assert cpus(0) == {15} and d.rm.policy.pools.keys() >= {"dualcpu[5]"}
    push("singlecpu", 1, 1, "100 %")  # no CPU left over: the default pool is the reserved CPU
    assert cpus(0) == cpus(1) == {15} and len(cpus(2)) == 1 and 15 not in cpus(2)
    assert [cpus(i) for i in range(3, 7)] == [{15}] * 4
    push("dualcpu", 2, 1, "2")
    assert cpus(0) == {15} and len(cpus(1)) == 9 and cpus(2) == cpus(1)
    assert sorted(len(cpus(i)) for i in range(3, 7)) == [2, 2, 9, 9]
    # a restart (a new process) creates the policy again: now the config's resources count
    monkeypatch.setattr(podpools, "PROCESS_TOKEN", "after-restart")
    d.restart()
    assert d.rm.policy.reserved == {0} and cpus(0) == {0}
    assert d.runtime_view() == d.rm.placements()


POD_STEP = st.tuples(st.booleans(), st.integers(0, 5), st.sampled_from([None, "pp", "one", "closed", "nope"]),
                     st.sampled_from(["default", "kube-system"]), st.sampled_from([0, 250, 1000]))
SMALL = """\
policy:
  Active: podpools
  ReservedResources:
    cpu: 1
  podpools:
    Pools:
      - {Name: pp, CPU: 2, MaxPods: 2, Instances: 3}
      - {Name: one, CPU: 1, MaxPods: 1, Instances: 2 CPUs, FillOrder: FirstFree}
      - {Name: closed, CPU: 1, MaxPods: -1}
      - {Name: reserved, MaxPods: 1}
"""


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(POD_STEP, min_size=1, max_size=30))
def test_pods_stay_whole_and_pools_keep_their_limits(n4c16: Topology, steps) -> None:
    """Whatever comes and goes: a pod's containers share one instance, no instance holds more pods than
    MaxPods (the default pool takes the rest), the bookkeeping matches the grants, and removing
    everything leaves every pool empty."""
    p = policy_from_yaml(SMALL, n4c16)
    pods: dict[int, tuple[dict[str, str], str]] = {}
    n = 0
    for add, pod, kind, ns, milli in steps:
        live = sorted(p.containers)
        if add or not live:
            ann, ns = pods.setdefault(pod, (pool(kind) if kind else {}, ns))  # a pod keeps its annotation
            n += 1
            p.allocate(f"c{n}", burstable(f"c{n}", milli, pod=f"pod{pod}", ns=ns, annotations=ann))
        else:
            p.release(live[pod % len(live)])
        by_pod: dict[str, set[str]] = {}
        for cid, g in p.grants.items():
            by_pod.setdefault(p.containers[cid].pod_id, set()).add(g.pool)
        assert all(len(names) == 1 for names in by_pod.values()), by_pod
        for x in p.pools.values():
            if x is not p.default_pool:
                assert len(x.pods) <= max(x.type.max_pods, 0) or x.type.max_pods == 0, x.name
            members = {cid for cid, g in p.grants.items() if g.pool == x.name}
            assert set(x.members) == members
            assert x.requested == sum(p.containers[cid].request_milli for cid in members)
            assert sum(x.pods.values()) == len(members)
    for cid in sorted(p.containers):
        p.release(cid)
    assert all(not x.members and not x.pods and x.requested == 0 for x in p.pools.values())
