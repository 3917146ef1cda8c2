"""The real containerd answers CRI, and a container pinned to cpuset 0 shows it in the host cgroup."""

from __future__ import annotations

import json

from fixtures.cri_objects import make_container_config, make_pod_config, write_json


def test_cri_version(containerd):
    out = dict(line.split(":", 1) for line in containerd.crictl("version").stdout.splitlines() if ":" in line)
    assert out["RuntimeName"].strip() == "containerd"
    assert out["RuntimeApiVersion"].strip() == "v1"


def test_images_imported(containerd):
    names = {t for img in json.loads(containerd.crictl("images", "-o", "json").stdout)["images"]
             for t in img["repoTags"]}
    assert containerd.busybox_image in names
    assert containerd.pause_image in names


def test_pod_with_cpuset_zero(containerd, tmp_path):
    pod = write_json(tmp_path / "pod.json", make_pod_config("smoke"))
    ctr = write_json(tmp_path / "ctr.json", make_container_config("c", cpuset_cpus="0"))
    pod_id = containerd.crictl("runp", pod).stdout.strip()
    try:
        cid = containerd.crictl("create", pod_id, ctr, pod).stdout.strip()
        containerd.crictl("start", cid)
        state = json.loads(containerd.crictl("inspect", cid).stdout)["status"]["state"]
        assert state == "CONTAINER_RUNNING"
        assert containerd.cgroup_cpuset(cid) == "0"
    finally:
        containerd.crictl("stopp", pod_id, check=False)
        containerd.crictl("rmp", "-f", pod_id, check=False)
