"""The real cri-resmgr on real containerd: a container's cgroup cpuset changed behind the relay's back shows in
cri_resmgr_placement_drift_containers after the next resync look, and cri_resmgr_unpinned_containers counts the
containers the policy gave no CPUs of their own, by reason."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from fixtures.containerd import CGROUP_ROOT
from fixtures.cri_objects import make_container_config, make_pod_config, write_json
from integration.relay.relay_process import RelayProcess, metric_value

from devland.waiting import eventually

pytestmark = pytest.mark.integration

# This machine has CPUs 0 and 1: CPU 0 reserved (the shared pool), CPU 1 for one Guaranteed container.
STATIC = "policy:\n  Active: static\n  ReservedResources:\n    cpu: cpuset:0\n"
DRIFT = "cri_resmgr_placement_drift_containers"


def test_drift_behind_the_relays_back_is_seen_at_the_next_resync(containerd) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="relay-drift-", dir="/tmp"))
    config = workdir / "config.cfg"
    config.write_text(STATIC)
    relay = RelayProcess(workdir, containerd.socket, args=["--force-config", str(config), "--resync-period", "1"])
    try:
        relay.start()
        cids = {}
        for name, qos, resources in (
                ("g", "guaranteed", {"cpu_shares": 1024, "cpu_quota": 100_000, "cpu_period": 100_000,
                                     "memory_limit": 64 << 20}),
                ("be", "besteffort", {"cpu_shares": 2})):
            pod = write_json(workdir / f"pod-{name}.json", make_pod_config(name, qos=qos))
            pod_id = containerd.crictl("runp", pod, endpoint=relay.endpoint).stdout.strip()
            ctr = write_json(workdir / f"ctr-{name}.json", make_container_config(name, **resources))
            cids[name] = containerd.crictl("create", pod_id, ctr, pod, endpoint=relay.endpoint).stdout.strip()
            containerd.crictl("start", cids[name], endpoint=relay.endpoint)
        assert containerd.cgroup_cpuset(cids["g"]) == "1" and containerd.cgroup_cpuset(cids["be"]) == "0"
        text = relay.metrics_text()
        assert metric_value(text, 'cri_resmgr_unpinned_containers{reason="not-guaranteed"}') == 1
        assert metric_value(text, 'cri_resmgr_unpinned_containers{reason="fractional-cpu"}') == 0
        assert any(line.startswith(DRIFT + " ") for line in text.splitlines()) and metric_value(text, DRIFT) == 0

        # Something writes the Guaranteed container's cgroup directly: containerd's record still says "1".
        cgroup = CGROUP_ROOT / "cpuset" / containerd.container_cgroup(cids["g"]).lstrip("/") / "cpuset.cpus"
        cgroup.write_text("0-1\n")
        assert containerd.cgroup_cpuset(cids["g"]) == "0-1"
        assert eventually(lambda: metric_value(relay.metrics_text(), DRIFT) == 1), relay.metrics_text()
        assert [e for e in relay.log_entries() if "other CPUs than the policy decided" in str(e.get("msg"))]

        cgroup.write_text("1\n")  # put back: the next look finds none
        assert eventually(lambda: metric_value(relay.metrics_text(), DRIFT) == 0)
    finally:
        relay.stop()
        containerd.remove_all()
        shutil.rmtree(workdir, ignore_errors=True)
