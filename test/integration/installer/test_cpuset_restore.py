"""After uninstall or a fallback no container keeps a cpuset the relay gave it (read from the host cgroups)."""

from __future__ import annotations

from pathlib import Path

from fixtures.cri_objects import make_container_config, make_pod_config, write_json
from integration.relay.relay_process import running_relay

from installer.cpuset_restore import restore_cpusets
from installer.host import CommandRunner, Host

# The relay's policy gives a Guaranteed one-CPU container an exclusive CPU (the reservation is on CPU 0).
POLICY = "policy:\n  Active: static\n  ReservedResources:\n    cpu: cpuset:0\n"


def test_relay_pinned_containers_get_kubelets_cpusets_back(containerd, tmp_path):
    online = Path("/sys/devices/system/cpu/online").read_text().strip()
    with running_relay(containerd, "--fallback-config", POLICY, prefix="relay-restore-") as relay:
        pod_cfg = write_json(tmp_path / "pod.json", make_pod_config("pinned", qos="guaranteed"))
        pod_id = containerd.crictl("runp", pod_cfg, endpoint=relay.endpoint).stdout.strip()
        ctr_cfg = write_json(tmp_path / "ctr.json", make_container_config(
            "pinned", cpu_shares=1024, cpu_quota=100000, cpu_period=100000, memory_limit=64 << 20))
        cid = containerd.crictl("create", pod_id, ctr_cfg, pod_cfg, endpoint=relay.endpoint).stdout.strip()
        containerd.crictl("start", cid, endpoint=relay.endpoint)
        pinned = containerd.cgroup_cpuset(cid)
        assert pinned != online, "the relay did not pin the container; nothing to restore"
        relay.stop()  # as after uninstall: kubelet talks to containerd directly again

        assert restore_cpusets(Host(Path("/"), CommandRunner()), "unix://" + containerd.socket) >= 1
        assert containerd.cgroup_cpuset(cid) == online
        assert containerd.cgroup_mems(cid) == Path("/sys/devices/system/node/online").read_text().strip()
