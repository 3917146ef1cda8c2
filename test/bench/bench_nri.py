"""Benchmark: cri-resmgr as containerd 2's NRI plugin against containerd 2 without it (`make bench-nri`).

Two parts, each against a baseline measured in the same run:

* Pod starts: two containerd 2 instances of the same build, both with NRI on; cri-resmgr (``--nri``, the one-dir
  build a node runs, as bench-relay measures it) is registered with one of them. RunPodSandbox + CreateContainer
  + StartContainer over CRI, sequential (pairs interleaved, who goes first alternating) and 8 and 32 at once.
  With pods running, the plugin's RSS (largest seen) and its CPU over an idle window (no events).
* The decision containerd waits for: NriPlugin.serve("CreateContainer") in this process, on a 256-CPU 8-NUMA fake
  topology with 200 containers running (bench-policy's mix, topology-aware): the encoded NRI request in, the
  encoded adjustment out, with the translation, the decision on its own thread and the cache write. Wall time,
  since containerd waits for the answer, not for our CPU; the CreateContainer that containerd sends with no
  plugin costs nothing to compare with, so the whole time is what the plugin adds.

The LAST line printed is the summary:

    nri: podstart_ratio=<r> concurrent8_ratio=<a> concurrent32_ratio=<b> decide_p50_ms=<x> decide_p99_ms=<y>
         rss_mb=<m> idle_cpu_pct=<c> containerd=<version> build=<onedir|onefile|venv|exe>

Targets (issue 28, reported, not asserted): every ratio <= 1.05, decide_p50_ms <= 1, decide_p99_ms <= 3,
rss_mb <= 30, idle_cpu_pct <= 0.5. RELAY_BENCH_EXE chooses the build as in bench-relay; NRI_BENCH_IDLE_S sets the
idle window (default 30 s); NRI_BENCH_DECISIONS the timed decisions (default 2000); NRI_BENCH_ROUNDS the
interleaved rounds of 8 and of 32 pod starts at once on each side (default 8; the ratio is of the medians).
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from bench.bench_policy import MIX, NEW, RUNNING, percentile
from bench.bench_relay import EXE_ENV, concurrent_ratio, relay_build, rss_mb, rss_split, start_pod
from cri_api.v1 import api_pb2, api_pb2_grpc
from fixtures.containerd import CONTAINERD2, Containerd, running_containerd
from fixtures.sysfs_builder import EIGHT_NUMA_256, build_sysfs
from unit.resmgr.cri_requests import create_request, pod_config

from devland.procfs import tree_cpu_seconds
from devland.procs import Process
from devland.tools import Tools
from resmgr.config import validate_config_text
from resmgr.manager.resource_manager import ResourceManager
from resmgr.nri import api_pb2 as nri
from resmgr.nri.plugin import PLUGIN_SERVICE, NriPlugin
from resmgr.options import RELAY_ENVIRONMENT
from resmgr.relay.cri import api_pb2 as cri
from resmgr.relay.metrics import RelayMetrics
from resmgr.topology import discover_topology

PODSTART_PAIRS = 40
# 3 rounds (bench-relay's) let concurrentN_ratio swing by +-15 % between runs (0.93 / 1.15). 8 interleaved rounds
# per N: 10 took bench-nri to 694 s on this 2-core machine under load (other sessions' tests beside it), and each
# 32-pod round costs about 25 s there; with 8, 374 s and 273 s (NRI_BENCH_ROUNDS changes it).
CONCURRENT_ROUNDS = int(os.environ.get("NRI_BENCH_ROUNDS", "8"))
TARGETS = {"podstart_ratio": 1.05, "concurrent8_ratio": 1.05, "concurrent32_ratio": 1.05, "decide_p50_ms": 1.0,
           "decide_p99_ms": 3.0, "rss_mb": 30, "idle_cpu_pct": 0.5}
# What the plugin decides on this 2-CPU machine during the pod starts: static keeps one CPU for the system.
NODE_CONFIG = "policy:\n  Active: static\n  ReservedResources:\n    cpu: 1\n"
DECISION_CONFIG = "policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: 2\n"


@pytest.fixture(scope="module")
def containerds(tools: Tools) -> Iterator[tuple[Containerd, Containerd]]:
    """(with the plugin, without it): containerd 2 twice, NRI on in both."""
    with running_containerd(tools, "ctrd-nri-", runtime=CONTAINERD2, nri=True) as plugged, \
            running_containerd(tools, "ctrd-bare-", runtime=CONTAINERD2, nri=True) as bare:
        yield plugged, bare


class PluginProcess:
    """The cri-resmgr executable in NRI mode, registered with ``ctrd``; ready once containerd synchronized it."""

    def __init__(self, executable: str, ctrd: Containerd, workdir: Path) -> None:
        self.workdir = workdir
        config = workdir / "node.cfg"
        config.write_text(NODE_CONFIG)
        self.proc = Process("cri-resmgr-nri", [
            executable, "--nri", "--nri-socket", str(ctrd.workdir / "nri" / "nri.sock"),
            "--force-config", str(config), "--relay-dir", str(workdir / "state"), "--pid-file", "",
            "--disable-agent", "--metrics-address", "off", "--log-format", "json"], workdir,
            # The environment the node gives the plugin (the nri-plugin chart's env, as the relay's unit has it):
            # the bench used to run it without, with glibc's malloc arena per thread.
            env={**os.environ, **RELAY_ENVIRONMENT})
        self.log = self.proc.log_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def synchronized(self) -> bool:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return any(json.loads(line).get("msg") == "synchronized with the runtime"
                   for line in lines if line.startswith("{"))

    def stop(self) -> None:
        self.proc.stop()


def nri_pod(pod_id: str, config: cri.PodSandboxConfig) -> nri.PodSandbox:
    """The pod as containerd describes it to a plugin (what resmgr.nri.translate reads back)."""
    pod = nri.PodSandbox(id=pod_id, name=config.metadata.name, uid=config.metadata.uid,
                         namespace=config.metadata.namespace)
    pod.labels.update(config.labels)
    pod.annotations.update(config.annotations)
    pod.linux.cgroup_parent = config.linux.cgroup_parent
    return pod


def nri_container(cid: str, request: cri.CreateContainerRequest) -> nri.Container:
    config = request.config
    ctr = nri.Container(id=cid, pod_sandbox_id=request.pod_sandbox_id, name=config.metadata.name,
                        state=nri.CONTAINER_CREATED)
    ctr.labels.update(config.labels)
    ctr.annotations.update(config.annotations)
    res = config.linux.resources
    cpu = ctr.linux.resources.cpu
    if res.cpu_shares:
        cpu.shares.value = res.cpu_shares
    if res.cpu_quota:
        cpu.quota.value = res.cpu_quota
    if res.cpu_period:
        cpu.period.value = res.cpu_period
    if res.memory_limit_in_bytes:
        ctr.linux.resources.memory.limit.value = res.memory_limit_in_bytes
    return ctr


class DecisionNode:
    """A ResourceManager behind an NriPlugin, fed encoded NRI events as containerd sends them."""

    def __init__(self, workdir: Path) -> None:
        topology = discover_topology(build_sysfs(workdir / "sysfs", EIGHT_NUMA_256))
        assert len(topology.cpus) == 256 and len(topology.nodes) == 8
        # As cri-resmgr runs it (resmgr/cli.py): the cache is written by a background thread.
        self.rm = ResourceManager(topology, relay_dir=workdir / "state",
                                  fallback_config=validate_config_text(DECISION_CONFIG), background_save=True)
        self.plugin = NriPlugin(self.rm, RelayMetrics(), lambda updates, reason: None)
        self.late = 0
        self.n = 0

    def call(self, method: str, request) -> bytes:
        return self.plugin.serve(PLUGIN_SERVICE, method, request.SerializeToString())

    def pod(self, namespace: str, qos: str) -> tuple[nri.PodSandbox, cri.PodSandboxConfig]:
        self.n += 1
        config = pod_config(f"{namespace}-{qos}-{self.n}", namespace=namespace, qos=qos)
        pod = nri_pod(f"pod-{self.n}", config)
        self.call("RunPodSandbox", nri.RunPodSandboxRequest(pod=pod))
        return pod, config

    def create(self, pod: tuple[nri.PodSandbox, cri.PodSandboxConfig], milli: int) -> tuple[str, float]:
        """One CreateContainer and StartContainer; the id and the CreateContainer's wall ms."""
        self.n += 1
        cid = f"ctr-{self.n}"
        container = nri_container(cid, create_request(pod[0].id, pod[1], f"c{self.n}", cpu_milli=milli))
        t = time.perf_counter_ns()
        answer = nri.CreateContainerResponse.FromString(
            self.call("CreateContainer", nri.CreateContainerRequest(pod=pod[0], container=container)))
        wall = (time.perf_counter_ns() - t) / 1e6
        self.late += not answer.HasField("adjust")
        container.state = nri.CONTAINER_RUNNING
        self.call("StartContainer", nri.StartContainerRequest(pod=pod[0], container=container))
        return cid, wall

    def remove(self, pod: nri.PodSandbox, cid: str) -> None:
        container = nri.Container(id=cid, pod_sandbox_id=pod.id, state=nri.CONTAINER_STOPPED)
        self.call("StopContainer", nri.StopContainerRequest(pod=pod, container=container))
        self.call("RemoveContainer", nri.RemoveContainerRequest(pod=pod, container=container))


def decision_latency(workdir: Path, decisions: int) -> tuple[float, float]:
    node = DecisionNode(workdir)
    try:
        for i in range(RUNNING):
            namespace, qos, milli = MIX[i % len(MIX)]
            node.create(node.pod(namespace, qos), milli)
        assert len(node.rm.placements()) == RUNNING
        new_pods = {(ns, qos): node.pod(ns, qos) for ns, qos, _ in NEW}
        samples: list[float] = []
        warmup = 50
        gc.collect()
        for i in range(decisions + warmup):
            namespace, qos, milli = NEW[i % len(NEW)]
            pod = new_pods[(namespace, qos)]
            cid, wall = node.create(pod, milli)
            if i >= warmup:
                samples.append(wall)
            node.remove(pod[0], cid)
        assert len(node.rm.placements()) == RUNNING
        # Every answer carried its adjustment: none came after the budget (that would be no placement at all).
        assert node.late == 0, f"{node.late} decisions missed containerd's budget"
    finally:
        node.plugin.close()
        node.rm.close()
    p50, p99 = percentile(samples, 0.50), percentile(samples, 0.99)
    print(f"  CreateContainer through NriPlugin.serve: p50={p50:.3f} ms p99={p99:.3f} ms max={max(samples):.3f} ms "
          f"({len(samples)} decisions, {RUNNING} running, 256 CPUs, load avg {os.getloadavg()[0]:.1f})", flush=True)
    return p50, p99


def podstart_ratio(plugged, bare, image: str) -> float:
    d_pod, p_pod = [], []
    for i in range(PODSTART_PAIRS):
        pair = [(bare, d_pod, "d"), (plugged, p_pod, "p")]
        for stub, out, tag in pair if i % 2 else pair[::-1]:  # alternate who goes first
            t = time.perf_counter()
            start_pod(stub, f"podstart-{tag}{i}", image)
            out.append(time.perf_counter() - t)
    ratio = statistics.median(p_pod) / statistics.median(d_pod)
    print(f"  pod start (run+create+start): without {statistics.median(d_pod) * 1e3:.1f} ms, with the plugin "
          f"{statistics.median(p_pod) * 1e3:.1f} ms, ratio {ratio:.3f}", flush=True)
    return ratio


@pytest.mark.timeout(3600)
def test_bench_nri(containerds: tuple[Containerd, Containerd]) -> None:
    plugged_ctrd, bare_ctrd = containerds
    workdir = Path(tempfile.mkdtemp(prefix="bench-nri-", dir="/tmp"))
    idle_window = float(os.environ.get("NRI_BENCH_IDLE_S", "30"))
    decisions = int(os.environ.get("NRI_BENCH_DECISIONS", "2000"))
    executable, build = relay_build(os.environ.get(EXE_ENV, ""))
    plugin = PluginProcess(executable, plugged_ctrd, workdir)
    channels = [grpc.insecure_channel(c.endpoint) for c in (plugged_ctrd, bare_ctrd)]
    plugged, bare = (api_pb2_grpc.RuntimeServiceStub(ch) for ch in channels)
    version = plugged_ctrd.version
    began = time.monotonic()
    print(f"\nbench-nri: {build} build {executable}, pid {plugin.pid}, containerd {version}", flush=True)
    try:
        plugin.proc.wait_until(plugin.synchronized, "registered with containerd and synchronized", timeout=120)
        print(f"  registered and synchronized; rss {rss_mb(plugin.pid):.1f} MB ({rss_split(plugin.pid)})", flush=True)
        image = plugged_ctrd.busybox_image
        for stub in (plugged, bare):  # warm up: image unpacked, channels and handlers ready
            start_pod(stub, "warmup", image)
        ratio = podstart_ratio(plugged, bare, image)
        rss = rss_mb(plugin.pid)
        conc8 = concurrent_ratio(bare, plugged, 8, image, via_name="plugin", direct_name="without",
                                 rounds=CONCURRENT_ROUNDS)
        conc32 = concurrent_ratio(bare, plugged, 32, image, via_name="plugin", direct_name="without",
                                  rounds=CONCURRENT_ROUNDS)
        rss = max(rss, rss_mb(plugin.pid))
        running = len(plugged.ListContainers(api_pb2.ListContainersRequest()).containers)
        # Idle: containers running, no events; what a node pays for the plugin between pod starts.
        cpu0, wall0 = tree_cpu_seconds(plugin.pid), time.monotonic()
        deadline = wall0 + idle_window
        while time.monotonic() < deadline:
            rss = max(rss, rss_mb(plugin.pid))
            time.sleep(1)
        idle_cpu_pct = (tree_cpu_seconds(plugin.pid) - cpu0) / (time.monotonic() - wall0) * 100
        print(f"  idle for {idle_window:.0f}s with {running} containers: plugin cpu {idle_cpu_pct:.2f}% of a core, "
              f"rss max {rss:.1f} MB (at the end: {rss_split(plugin.pid)})", flush=True)
        p50, p99 = decision_latency(workdir / "decisions", decisions)

        values = {"podstart_ratio": ratio, "concurrent8_ratio": conc8, "concurrent32_ratio": conc32,
                  "decide_p50_ms": p50, "decide_p99_ms": p99, "rss_mb": rss, "idle_cpu_pct": idle_cpu_pct}
        for key, target in TARGETS.items():
            print(f"  target {key} <= {target}: {'met' if values[key] <= target else 'NOT met'} "
                  f"({values[key]:.3f})", flush=True)
        print(f"  bench-nri took {time.monotonic() - began:.0f}s (after the containerds started)", flush=True)
        line = (f"nri: podstart_ratio={ratio:.3f} concurrent8_ratio={conc8:.3f} concurrent32_ratio={conc32:.3f} "
                f"decide_p50_ms={p50:.3f} decide_p99_ms={p99:.3f} rss_mb={rss:.1f} idle_cpu_pct={idle_cpu_pct:.2f} "
                f"containerd={version} build={build}")
        print(line, flush=True)
        # pytest prints its own summary after the test; repeat the line at exit so it is the LAST line.
        atexit.register(print, line, flush=True)
    finally:
        for ch in channels:
            ch.close()
        plugin.stop()
        for ctrd in (plugged_ctrd, bare_ctrd):
            ctrd.remove_all()
        shutil.rmtree(workdir, ignore_errors=True)
