"""The pool gauges (cri_resmgr_pool_cpus, _cpuset_info, _requested_cpus): fed from the resource manager's
pool_stats at scrape time, for every pool-based policy, parsed by prometheus_client's own parser."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.seed_configs import DYNAMIC_POOLS_APP
from prometheus_client.parser import text_string_to_metric_families
from unit.resmgr.rm_driver import Driver

from resmgr.relay.metrics import RelayMetrics
from resmgr.topology import Topology, parse_cpuset

CONFIGS = {
    "static": "policy:\n  Active: static\n  ReservedResources:\n    cpu: cpuset:0,64\n",
    "topology-aware": "policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: cpuset:0\n",
    "balloons": "policy:\n  Active: balloons\n  ReservedResources:\n    cpu: 1\n  balloons:\n    BalloonTypes:\n"
                "      - Name: app\n        Namespaces: [app]\n        MinCPUs: 2\n",
    "dynamic-pools": DYNAMIC_POOLS_APP,
    "podpools": "policy:\n  Active: podpools\n  ReservedResources:\n    cpu: 1\n  podpools:\n    Pools:\n"
                "      - {Name: app, CPU: 2, Instances: 3}\n",
}


def gauges(metrics: RelayMetrics) -> dict[str, dict[frozenset, float]]:
    out: dict[str, dict[frozenset, float]] = {}
    for family in text_string_to_metric_families(metrics.registry.exposition().decode()):
        assert family.type in ("gauge", "counter", "histogram")
        for s in family.samples:
            out.setdefault(s.name, {})[frozenset(s.labels.items())] = s.value
    return out


@pytest.mark.parametrize("policy", sorted(CONFIGS))
def test_pool_gauges_follow_the_policy(policy: str, topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, CONFIGS[policy])
    metrics = RelayMetrics()
    metrics.watch_pools(d.rm.pool_stats)
    d.create(d.run_pod("web", qos="burstable"), "c", 1500)
    d.create(d.run_pod("app", namespace="app", qos="guaranteed"), "c", 3000)
    d.create(d.run_pod("sys", namespace="kube-system", qos="burstable"), "c", 250)
    found = gauges(metrics)
    name, stats = d.rm.pool_stats()
    assert name == policy and stats
    cpus_of = {labels: v for labels, v in found["cri_resmgr_pool_cpus"].items()}
    info = found["cri_resmgr_pool_cpuset_info"]
    requested = found["cri_resmgr_pool_requested_cpus"]
    pools = d.rm.policy.pool_cpus()
    assert len(cpus_of) == len(pools) == len(info) == len(requested)
    for pool, cpus in pools.items():
        labels = frozenset({"policy": policy, "pool": pool}.items())
        assert cpus_of[labels] == len(cpus)
        milli = sum(d.rm.policy.containers[cid].request_milli for cid, g in d.rm.policy.grants.items()
                    if g.pool == pool)
        assert requested[labels] == milli / 1000
        (cpuset_labels,) = [dict(k) for k in info if dict(k)["pool"] == pool]
        assert parse_cpuset(cpuset_labels["cpus"]) == cpus
        assert parse_cpuset(cpuset_labels["mems"]) == d.rm.topology.nodes_of(cpus)
    # Every container's pool is exported, with the requests of the containers in it.
    for cid, g in d.rm.policy.grants.items():
        assert frozenset({"policy": policy, "pool": g.pool}.items()) in cpus_of, (cid, g.pool)
    assert sum(requested.values()) == pytest.approx(1.5 + 3 + 0.25)


def test_pool_gauges_move_with_a_resize(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, CONFIGS["dynamic-pools"])
    metrics = RelayMetrics()
    metrics.watch_pools(d.rm.pool_stats)
    app = frozenset({"policy": "dynamic-pools", "pool": "app"}.items())
    shared = frozenset({"policy": "dynamic-pools", "pool": "shared"}.items())
    assert gauges(metrics)["cri_resmgr_pool_cpus"][app] == 0
    assert gauges(metrics)["cri_resmgr_pool_cpus"][shared] == 127
    d.create(d.run_pod("app", namespace="app", qos="burstable"), "c", 2500)
    assert gauges(metrics)["cri_resmgr_pool_cpus"][app] == 3
    assert gauges(metrics)["cri_resmgr_pool_cpus"][shared] == 124


def test_a_failing_source_leaves_the_pool_gauges_out() -> None:
    metrics = RelayMetrics()

    def broken() -> tuple:
        raise RuntimeError("resource manager gone")
    metrics.watch_pools(broken)
    metrics.observe("Version", "OK", 0.001)
    found = gauges(metrics)
    assert "cri_resmgr_pool_cpus" not in found and "cri_resmgr_pool_cpuset_info" not in found
    assert found["cri_resmgr_requests_total"]
