"""dynamic-pools on real containerd: pools resize with their containers' requests and the moved containers'
host cpusets follow; the usage sampler reads the real containers' cgroups; the pool gauges scraped from
/metrics name the cpusets the host enforces.

This machine has 2 CPUs: with CPU 0 reserved, the one CPU left goes to the shared pool until a pool
with requests takes it. (How usage divides left-over CPUs is covered on fake cgroup trees in
test/unit/resmgr/manager/test_cpu_usage.py: one free CPU leaves nothing to divide.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.metrics_client import scrape_unix
from fixtures.placement import FRONTENDS
from fixtures.seed_configs import DYNAMIC_POOLS_APP
from prometheus_client.parser import text_string_to_metric_families

from devland.waiting import eventually
from resmgr.manager.cpu_usage import Rebalancer, UsageSampler
from resmgr.relay.metrics import RelayMetrics, serve_metrics_socket

pytestmark = pytest.mark.integration

CONFIG = DYNAMIC_POOLS_APP
BUSY = ["sh", "-c", "while :; do :; done"]


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_pools_follow_requests_on_the_host(node_factory) -> None:
    node = node_factory(CONFIG)
    sys_ctr = node.run("sys", "burstable", namespace="kube-system")
    be = node.run("be", "besteffort")
    assert node.cgroups([sys_ctr, be]) == {sys_ctr: ("0", "0"), be: ("1", "0")}
    # A pool with requests takes the free CPU; the shared pool, left without one, runs on the reserved CPU.
    app = node.run("app", "burstable", namespace="app")
    assert node.rm.policy.grants[app].pool == "app"
    assert node.containerd.cgroup_cpuset(app) == "1"
    assert eventually(lambda: node.cgroups([be]) == {be: ("0", "0")})
    assert node.in_sync([sys_ctr, be, app])
    # Gone again: the CPU returns to the shared pool, and its container with it.
    node.remove(app)
    assert eventually(lambda: node.cgroups([be]) == {be: ("1", "0")})
    assert node.in_sync([sys_ctr, be])


def test_usage_is_read_from_the_real_cgroups_and_scraped_pools_match_the_host(node_factory, tmp_path: Path) -> None:
    node = node_factory(CONFIG)
    busy = node.run("busy", "besteffort", command=BUSY)
    idle = node.run("idle", "besteffort")
    sampler = UsageSampler()  # the host's /sys/fs/cgroup
    parents = {c.id: pod.cgroup_parent for c, pod in node.rm.running()}
    assert set(parents) == {busy, idle} and all(parents.values())
    assert sampler.sample(parents.items()) == {}  # first reading
    readings: list[dict[str, int]] = []

    def busy_shows() -> bool:
        readings.append(sampler.sample(parents.items()))
        return set(readings[-1]) == {busy, idle} and readings[-1][busy] > 100 > readings[-1][idle]
    assert eventually(busy_shows, timeout=30), readings[-3:]
    # Handed to the policy: with one free CPU there is nothing to divide, nothing moves, all stays in sync.
    sent: list = []
    rebalancer = Rebalancer(node.rm, lambda updates, why: sent.append(updates), interval=0, sampler=sampler)
    rebalancer.run_once()
    assert node.rm.policy.usage.get(busy, 0) >= 0 and sent == []
    assert node.in_sync([busy, idle])

    metrics = RelayMetrics()
    metrics.watch_pools(node.rm.pool_stats)
    server = serve_metrics_socket(metrics, str(tmp_path / "metrics.sock"))
    try:
        answer = scrape_unix(str(tmp_path / "metrics.sock"))
    finally:
        server.shutdown()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    info = {s.labels["pool"]: s.labels for f in text_string_to_metric_families(body.decode())
            if f.name == "cri_resmgr_pool_cpuset_info" for s in f.samples}
    assert info["shared"]["cpus"] == node.containerd.cgroup_cpuset(busy) == node.containerd.cgroup_cpuset(idle)
    assert info["shared"]["mems"] == node.containerd.cgroup_mems(busy)
    assert info["reserved"]["cpus"] == "0" and info["app"]["cpus"] == ""
