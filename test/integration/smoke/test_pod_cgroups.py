"""A pod run on a test containerd leaves no cgroup on the host once that containerd stops (fixtures/pod_cgroups.py):
runc removes each container's cgroup but not the pod's parent, and those piled up in every landscape kubelet's
view of the host."""

from __future__ import annotations

from fixtures import pod_cgroups
from fixtures.containerd import running_containerd
from fixtures.cri_objects import make_container_config, make_pod_config, write_json


def where(parent: str) -> list[str]:
    return [str(h / parent.strip("/")) for h in pod_cgroups.hierarchies() if (h / parent.strip("/")).is_dir()]


def test_a_removed_pods_cgroup_is_gone_when_its_containerd_stops(tools, tmp_path):
    with running_containerd(tools, "ctrd-cg-") as ctrd:
        config = make_pod_config("cgroups", qos="burstable")
        parent = config["linux"]["cgroup_parent"]
        pod = write_json(tmp_path / "pod.json", config)
        pod_id = ctrd.crictl("runp", pod).stdout.strip()
        cid = ctrd.crictl("create", pod_id, write_json(tmp_path / "c.json", make_container_config("c")), pod).stdout
        ctrd.crictl("start", cid.strip())
        assert where(parent), "runc made the pod's cgroup"
        ctrd.crictl("stopp", pod_id)
        ctrd.crictl("rmp", pod_id)
        assert where(parent), "runc leaves the pod's parent cgroup behind (what the fixture has to remove)"
    assert where(parent) == []


def test_a_running_pods_cgroup_is_kept_and_removed_by_a_later_stop(tools, tmp_path):
    with running_containerd(tools, "ctrd-cg-") as outer:
        config = make_pod_config("outer")
        parent = config["linux"]["cgroup_parent"]
        outer.crictl("runp", write_json(tmp_path / "pod.json", config))
        with running_containerd(tools, "ctrd-cg2-"):
            pass  # another containerd of this process stops while the outer pod runs
        assert where(parent), "a running pod's cgroup stays"
    assert where(parent) == []
