"""crictl drives real containerd through the cri-resmgr relay: the full pod/container lifecycle."""

from __future__ import annotations

import json
import os
import re
import stat

from fixtures.cri_objects import make_container_config, make_pod_config, write_json
from integration.relay.relay_process import metric_value

from devland.waiting import eventually


def test_relay_socket_and_pid_file(relay):
    mode = os.stat(relay.socket).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o660
    # The relay writes its pid file just after it starts serving, which is what the fixture waited for.
    assert eventually(relay.pid_file.exists)
    assert relay.pid_file.read_text().strip() == str(relay.pid)


def test_version_and_info_match_direct(containerd, relay):
    direct = containerd.crictl("version").stdout
    relayed = containerd.crictl("version", endpoint=relay.endpoint).stdout
    assert relayed == direct
    assert "RuntimeName:  containerd" in relayed


def test_images(containerd, relay):
    direct = json.loads(containerd.crictl("images", "-o", "json").stdout)
    relayed = json.loads(containerd.crictl("images", "-o", "json", endpoint=relay.endpoint).stdout)
    assert relayed == direct
    inspect = json.loads(containerd.crictl("inspecti", containerd.busybox_image, endpoint=relay.endpoint).stdout)
    assert containerd.busybox_image in inspect["status"]["repoTags"]
    info = containerd.crictl("imagefsinfo", endpoint=relay.endpoint)
    assert "usedBytes" in info.stdout


def test_pod_lifecycle_through_relay(containerd, relay, tmp_path):
    ep = relay.endpoint
    pod_cfg = write_json(tmp_path / "pod.json", make_pod_config("relay-lc"))
    ctr_cfg = write_json(tmp_path / "ctr.json", make_container_config("c", cpuset_cpus="0"))
    pod_id = containerd.crictl("runp", pod_cfg, endpoint=ep).stdout.strip()
    cid = containerd.crictl("create", pod_id, ctr_cfg, pod_cfg, endpoint=ep).stdout.strip()
    containerd.crictl("start", cid, endpoint=ep)

    pods = json.loads(containerd.crictl("pods", "-o", "json", endpoint=ep).stdout)["items"]
    assert [p["id"] for p in pods if p["metadata"]["name"] == "relay-lc"] == [pod_id]
    ps = json.loads(containerd.crictl("ps", "-o", "json", endpoint=ep).stdout)["containers"]
    assert [(c["id"], c["state"]) for c in ps if c["id"] == cid] == [(cid, "CONTAINER_RUNNING")]
    # The same view directly from containerd.
    assert json.loads(containerd.crictl("ps", "-o", "json").stdout)["containers"] == ps

    out = containerd.crictl("exec", "-s", cid, "sh", "-c", "echo hello-from-$((6*7))", endpoint=ep)
    assert out.stdout.strip() == "hello-from-42"
    failing = containerd.crictl("exec", "-s", cid, "sh", "-c", "exit 3", endpoint=ep, check=False)
    assert failing.returncode != 0

    stats = json.loads(containerd.crictl("stats", "-o", "json", cid, endpoint=ep).stdout)["stats"]
    assert stats[0]["attributes"]["id"] == cid and "cpu" in stats[0]
    pod_stats = containerd.crictl("statsp", "-o", "json", pod_id, endpoint=ep)
    assert pod_id in pod_stats.stdout

    assert containerd.cgroup_cpuset(cid) == "0"
    containerd.crictl("update", "--cpuset-cpus", "1", cid, endpoint=ep)
    assert containerd.cgroup_cpuset(cid) == "1"
    inspect = json.loads(containerd.crictl("inspect", cid, endpoint=ep).stdout)
    assert inspect["status"]["state"] == "CONTAINER_RUNNING"

    containerd.crictl("stop", "-t", "1", cid, endpoint=ep)
    ps = json.loads(containerd.crictl("ps", "-a", "-o", "json", endpoint=ep).stdout)["containers"]
    assert [c["state"] for c in ps if c["id"] == cid] == ["CONTAINER_EXITED"]
    containerd.crictl("rm", cid, endpoint=ep)
    containerd.crictl("stopp", pod_id, endpoint=ep)
    containerd.crictl("rmp", pod_id, endpoint=ep)
    assert pod_id not in containerd.crictl("pods", "-q").stdout
    assert cid not in containerd.crictl("ps", "-a", "-q").stdout

    methods = ("RunPodSandbox", "CreateContainer", "StartContainer", "UpdateContainerResources", "StopContainer",
               "RemoveContainer", "StopPodSandbox", "RemovePodSandbox", "ExecSync", "ListContainerStats")

    def unseen() -> list[str]:
        metrics = relay.metrics_text()
        return [m for m in methods if metric_value(metrics, f'cri_resmgr_requests_total{{code="OK",method="{m}"}}') < 1]
    # A call is counted when it completes, which can be a moment after the client has its answer.
    assert eventually(lambda: not unseen()), unseen()

    # The force config dumps the state-changing calls in full and ListContainers in short. The relay counts a
    # call before it writes its entry: wait for the last call's (crictl rmp's RemovePodSandbox), so that no
    # entry is still being written when the file is read.
    dump = relay.workdir / "state" / "dump.jsonl"

    def dumped() -> list[str]:
        methods = []
        for line in dump.read_text().splitlines():
            try:
                methods.append(json.loads(line)["method"])
            except ValueError:  # the line being written
                pass
        return methods
    assert eventually(lambda: "RemovePodSandbox" in dumped()), dumped()
    entries = [json.loads(line) for line in dump.read_text().splitlines()]
    by_method = {}
    for entry in entries:
        by_method.setdefault(entry["method"], []).append(entry)
    create = by_method["CreateContainer"][-1]
    assert 'cpuset_cpus: "0"' in create["request"] and cid in create["response"]
    assert any(cid in e["request"] and 'cpuset_cpus: "1"' in e["request"]
               for e in by_method["UpdateContainerResources"])
    assert "ListContainers" in by_method and "\n" not in by_method["ListContainers"][0]["request"]
    assert "Version" not in by_method and "ExecSync" not in by_method
    assert all(e["latency_ms"] >= 0 and e["ts"].endswith("Z") for e in entries)


def test_runtime_errors_pass_through_unchanged(containerd, relay):
    direct = containerd.crictl("inspect", "no-such-container", check=False)
    relayed = containerd.crictl("inspect", "no-such-container", endpoint=relay.endpoint, check=False)
    assert direct.returncode != 0 and relayed.returncode == direct.returncode
    assert "not found" in relayed.stderr.lower()

    def rpc_error(stderr: str) -> str:
        # From the first rpc error on, without the times crictl's log lines carry (klog's header, logrus'
        # time="..."): the two calls may fall in different seconds (seen in CI).
        text = stderr[stderr.index("rpc error:"):]
        text = re.sub(r'time="[^"]*"', "", text)
        return re.sub(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ ", "", text, flags=re.M).strip()
    assert rpc_error(relayed.stderr) == rpc_error(direct.stderr)
