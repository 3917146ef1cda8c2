"""The real cri-resmgr process running dynamic-pools (usage rebalancer on): its /metrics reports every pool's
CPUs, cpuset and requests as the host cgroups enforce them, through the command line's wiring."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from fixtures.cri_objects import make_container_config, make_pod_config, write_json
from fixtures.seed_configs import DYNAMIC_POOLS_APP
from integration.relay.relay_process import RelayProcess
from prometheus_client.parser import text_string_to_metric_families

from devland.waiting import eventually

pytestmark = pytest.mark.integration

CONFIG = DYNAMIC_POOLS_APP


def pool_samples(text: str) -> dict[str, dict[str, tuple[dict[str, str], float]]]:
    """Metric name -> pool -> (labels, value), for the pool gauges of the exposition."""
    out: dict[str, dict[str, tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("cri_resmgr_pool_"):
            for s in family.samples:
                out.setdefault(s.name, {})[s.labels["pool"]] = (s.labels, s.value)
    return out


def test_cri_resmgr_reports_dynamic_pools(containerd) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="relay-pools-", dir="/tmp"))
    config = workdir / "config.cfg"
    config.write_text(CONFIG)
    relay = RelayProcess(workdir, containerd.socket, args=["--force-config", str(config),
                                                           "--rebalance-interval", "1s"])
    try:
        relay.start()
        cids = {}
        for name, namespace, qos, shares, command in (
                ("be", "default", "besteffort", 2, None),
                ("app", "app", "burstable", 512, ["sh", "-c", "while :; do :; done"])):
            pod = write_json(workdir / f"pod-{name}.json", make_pod_config(name, namespace=namespace, qos=qos))
            pod_id = containerd.crictl("runp", pod, endpoint=relay.endpoint).stdout.strip()
            ctr = write_json(workdir / f"ctr-{name}.json",
                             make_container_config(name, cpu_shares=shares, command=command))
            cids[name] = containerd.crictl("create", pod_id, ctr, pod, endpoint=relay.endpoint).stdout.strip()
            containerd.crictl("start", cids[name], endpoint=relay.endpoint)
        # The app pool's 500m request takes the only free CPU; the shared pool runs on the reserved one.
        assert eventually(lambda: containerd.cgroup_cpuset(cids["be"]) == "0")
        found = pool_samples(relay.metrics_text())
        assert {pool: v for pool, (_, v) in found["cri_resmgr_pool_cpus"].items()} == \
            {"reserved": 1, "shared": 0, "app": 1}
        assert found["cri_resmgr_pool_requested_cpus"]["app"][1] == 0.5
        assert found["cri_resmgr_pool_containers"]["app"][1] == 1
        app_labels = found["cri_resmgr_pool_cpuset_info"]["app"][0]
        assert app_labels["policy"] == "dynamic-pools"
        assert app_labels["cpus"] == containerd.cgroup_cpuset(cids["app"]) == "1"
        assert app_labels["mems"] == containerd.cgroup_mems(cids["app"])
        assert not [e for e in relay.log_entries() if e.get("level") == "error"
                    and "rebalancing" in str(e.get("msg"))]
    finally:
        relay.stop()
        containerd.remove_all()
        shutil.rmtree(workdir, ignore_errors=True)
