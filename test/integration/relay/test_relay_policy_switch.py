"""A live policy switch on real containerd: running containers move between policies without restarting.

The config plane pushes a config whose policy differs from the active one; the resource manager
starts the new policy, places every running container under it and sends the cgroup changes
through the relay's ordered UpdateContainerResources path. The cgroups are read from the host.
"""

from __future__ import annotations

import json

from fixtures.cri_objects import make_container_config, make_pod_config, write_json
from integration.relay.test_relay_concurrency import start_pod

from devland.waiting import eventually
from resmgr.config import check_config_text, validate_config_text
from resmgr.configplane.rm_applier import ResourceManagerApplier
from resmgr.manager.resource_manager import ResourceManager
from resmgr.topology import discover_topology

TOPOLOGY_AWARE = "policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: cpuset:0\n"
BALLOONS = """\
policy:
  Active: balloons
  ReservedResources:
    cpu: cpuset:0
  balloons:
    BalloonTypes:
      - Name: all
        Namespaces: ['*']
        MinCPUs: 1
"""


def test_live_switch_moves_running_containers_and_back(containerd, inproc_relay, tmp_path):
    rm = ResourceManager(discover_topology("/"), relay_dir=tmp_path / "state", cache_fsync=False,
                         fallback_config=validate_config_text(TOPOLOGY_AWARE))
    relay = inproc_relay(rm)
    applier = ResourceManagerApplier(rm, relay.interceptor.apply_updates)
    ep = relay.endpoint
    # A kube-system pod annotated for the balloon "all": topology-aware runs it on the reserved CPU, balloons in
    # that balloon (without the annotation balloons keeps kube-system on the reserved CPUs too, as upstream).
    pod_cfg = write_json(tmp_path / "ks-pod.json", make_pod_config(
        "ks", namespace="kube-system", annotations={"balloon.balloons.cri-resource-manager.intel.com": "all"}))
    pod_id = containerd.crictl("runp", pod_cfg, endpoint=ep).stdout.strip()
    ctr_cfg = write_json(tmp_path / "ks-ctr.json", make_container_config("ks"))
    ks = containerd.crictl("create", pod_id, ctr_cfg, pod_cfg, endpoint=ep).stdout.strip()
    containerd.crictl("start", ks, endpoint=ep)
    _, app = start_pod(containerd, ep, tmp_path, "app", "burstable")

    def pid(cid: str) -> int:
        return json.loads(containerd.crictl("inspect", cid).stdout)["info"]["pid"]

    def cgroups_follow_policy() -> bool:
        return all(containerd.cgroup_cpuset(cid) == rm.placements()[cid][0] for cid in (ks, app))

    pids = {ks: pid(ks), app: pid(app)}
    assert containerd.cgroup_cpuset(ks) == "0"  # topology-aware: kube-system on the reserved CPU
    for config, policy, ks_cpus in ((BALLOONS, "balloons", "1"), (TOPOLOGY_AWARE, "topology-aware", "0")):
        assert applier.apply_config(check_config_text(config).sections, f"switch to {policy}") is None
        assert rm.policy.name == policy
        assert eventually(cgroups_follow_policy, timeout=60), {c: containerd.cgroup_cpuset(c) for c in (ks, app)}
        assert containerd.cgroup_cpuset(ks) == ks_cpus
        assert {ks: pid(ks), app: pid(app)} == pids, "a container was restarted"
        # Persisted: a restart keeps the switched-to policy.
        assert json.loads((tmp_path / "state" / "cache").read_text())["policy"] == policy
