"""The cri-resmgr executable releases an exited container's CPUs once a relist through it shows the exit.

This is the whole wiring (command line, the config plane's hook around the resource manager, the splice
transport, the exit watcher) on this machine's 2 CPUs under static with one reserved CPU. ``crictl ps -a``
through the relay stands in for kubelet's relist; nothing else tells the relay that a container exited.
"""

from __future__ import annotations

import json

from fixtures.cri_objects import make_container_config, make_pod_config, write_json
from integration.relay.relay_process import running_relay

from devland.waiting import eventually

STATIC = "policy:\n  Active: static\n  ReservedResources:\n    cpu: 1\n"
PERIOD = 100_000


def test_an_exit_seen_in_a_relist_gives_the_exclusive_cpu_back(containerd, tmp_path) -> None:
    with running_relay(containerd, "--force-config", STATIC, prefix="relay-exits-") as relay:
        def crictl(*args: str) -> str:
            return containerd.crictl(*args, endpoint=relay.endpoint).stdout.strip()

        be_pod = write_json(tmp_path / "be-pod.json", make_pod_config("be"))
        be = crictl("create", crictl("runp", be_pod),
                    write_json(tmp_path / "be.json", make_container_config("be", cpu_shares=2)), be_pod)
        crictl("start", be)
        g_pod = write_json(tmp_path / "g-pod.json", make_pod_config("g", qos="guaranteed"))
        g_cfg = make_container_config("g", command=["sh", "-c", "sleep 1"], cpu_shares=1024, cpu_quota=PERIOD,
                                      cpu_period=PERIOD, memory_limit=64 << 20)
        g = crictl("create", crictl("runp", g_pod), write_json(tmp_path / "g.json", g_cfg), g_pod)
        crictl("start", g)
        assert containerd.cgroup_cpuset(g) == "1"
        assert eventually(lambda: containerd.cgroup_cpuset(be) == "0")

        def relisted_exited() -> bool:  # kubelet's relist: ListContainers of all containers, through the relay
            listed = json.loads(crictl("ps", "-a", "-o", "json"))["containers"]
            return any(c["id"] == g and c["state"] == "CONTAINER_EXITED" for c in listed)

        assert eventually(relisted_exited, timeout=30)
        assert eventually(lambda: containerd.cgroup_cpuset(be) == "0-1"), "the exited container kept CPU 1"
        log = "\n".join(json.dumps(e) for e in relay.log_entries())
        assert "exited: releasing its resources" in log
