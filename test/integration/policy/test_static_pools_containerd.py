"""static-pools on real containerd (2 CPUs: CPU 1 the one exclusive core, CPU 0 shared and infra): pools chosen by
STP_* env and a cmk isolate command line, the CMK variables and the rewritten command as containerd got them,
through the relay and through NRI (where the rewritten command is the adjustment's args)."""

from __future__ import annotations

import json

import pytest
from fixtures.cri_objects import make_container_config, make_pod_config, write_json
from fixtures.placement import FRONTENDS, SHAPES

from devland.waiting import eventually

pytestmark = pytest.mark.integration

STATIC_POOLS = """policy:
  Active: static-pools
  static-pools:
    pools:
      exclusive:
        exclusive: true
        cpuLists: [{Cpuset: "1", Socket: 0}]
      shared:
        cpuLists: [{Cpuset: "0", Socket: 0}]
      infra:
        cpuLists: [{Cpuset: "0", Socket: 0}]
"""
ONE_CORE = {"intel.com/resources": json.dumps({"containers": {"app": {
    "requests": {"cmk.intel.com/exclusive-cores": "1"}, "limits": {"cmk.intel.com/exclusive-cores": "1"}}}})}


def run(node, pod: str, *, env: dict[str, str] | None = None, command: list[str] | None = None,
        annotations: dict[str, str] | None = None) -> str:
    """A Burstable pod with one container "app", with the env and command a pod spec would give it."""
    pod_cfg = write_json(node.workdir / f"pod-{pod}.json",
                         make_pod_config(pod, namespace="default", qos="burstable", annotations=annotations))
    pod_id = node.crictl("runp", pod_cfg)
    ctr = make_container_config("app", command=command, **SHAPES["burstable"])
    ctr["envs"] = [{"key": k, "value": v} for k, v in (env or {}).items()]
    cid = node.crictl("create", pod_id, write_json(node.workdir / f"ctr-{pod}.json", ctr), pod_cfg)
    node.crictl("start", cid)
    node.pods[cid] = pod_id
    return cid


def created_with(node, cid: str) -> tuple[dict[str, str], list[str]]:
    """The env and command line containerd created the container with: its OCI spec's process, which has the
    relay's edits of the request and NRI's adjustment alike (``info.config`` is the CRI request containerd got,
    kubelet's own under NRI)."""
    process = json.loads(node.crictl("inspect", cid))["info"]["runtimeSpec"]["process"]
    env = dict(e.partition("=")[::2] for e in process.get("env") or [])
    return env, list(process.get("args") or [])


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_static_pools_env_cmk_isolate_and_exclusive_cores(node_factory) -> None:
    node = node_factory(STATIC_POOLS)
    ex = run(node, "ex", env={"STP_POOL": "exclusive"}, annotations=ONE_CORE)
    assert node.containerd.cgroup_cpuset(ex) == "1"
    env, _ = created_with(node, ex)
    assert (env["CMK_CPUS_ASSIGNED"], env["CMK_CPUS_SHARED"], env["CMK_CPUS_INFRA"], env["STP_POOL"]) == \
        ("1", "0", "0", "exclusive")
    # A CMK workload spec: the pool comes from `cmk isolate`, which is dropped (there is no cmk in the image).
    legacy = run(node, "legacy", command=["sh", "-c", "/opt/bin/cmk isolate --conf-dir=/etc/cmk --pool=infra "
                                                      "sleep 3600"])
    assert node.containerd.cgroup_cpuset(legacy) == "0"
    assert created_with(node, legacy)[1] == ["sleep", "3600"]
    assert eventually(lambda: json.loads(node.crictl("inspect", legacy))["status"]["state"] == "CONTAINER_RUNNING")
    plain = run(node, "plain")
    assert node.containerd.cgroup_cpuset(plain) == "0"  # the default pool: shared
    full = run(node, "full", env={"STP_POOL": "exclusive"}, annotations=ONE_CORE)
    assert node.containerd.cgroup_cpuset(full) == "0-1"  # no exclusive core left: left alone
    assert "CMK_CPUS_ASSIGNED" not in created_with(node, full)[0]
    free = run(node, "free", env={"STP_POOL": "infra", "STP_NO_AFFINITY": "1"})
    assert node.containerd.cgroup_cpuset(free) == "0-1"  # the workload pins itself from CMK_CPUS_ASSIGNED
    assert created_with(node, free)[0]["CMK_CPUS_ASSIGNED"] == "0"
    node.remove(ex)
    again = run(node, "again", env={"STP_POOL": "exclusive"}, annotations=ONE_CORE)
    assert node.containerd.cgroup_cpuset(again) == "1"
    assert node.in_sync([legacy, plain, again])
