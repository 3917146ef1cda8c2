"""Benchmark: the CreateContainer decision on a 256-CPU, 8-NUMA fake topology (`make bench-policy`).

For each policy (topology-aware, static, balloons) the resource manager is filled with 200
running containers (Guaranteed with whole and fractional CPUs, Burstable, BestEffort,
kube-system), then CreateContainer's ``before`` hook (resource estimation, the policy
decision, side-update computation and the request rewrite) is timed for a rotating mix of
new containers; each is then bound and removed again so 200 stay running. The LAST line is

    policy: decide_p50_ms=<x> decide_p99_ms=<y> cpus=256 containers=200

reporting the slowest policy's p50 and p99 of the decision's thread CPU time. CPU time is
used because these 2-core machines are shared and loaded: wall-clock p99 mostly measures
how long the scheduler kept the process off a CPU. Wall-clock percentiles are printed too.
Target (reported, not asserted): p99 <= 0.5 ms.
POLICY_BENCH_ITERATIONS sets the timed decisions per policy (default 2000).
"""

from __future__ import annotations

import atexit
import gc
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from cri_api.v1 import api_pb2
from fixtures.sysfs_builder import EIGHT_NUMA_256, build_sysfs
from unit.resmgr.cri_requests import create_request, pod_config

from resmgr.config import validate_config_text
from resmgr.manager.resource_manager import ResourceManager
from resmgr.topology import discover_topology

RUNNING = 200
TARGET_P99_MS = 0.5  # issue 18: <= 0.5 ms on 256 CPUs with 200 containers
CONFIGS = {
    "topology-aware": "policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: 2\n",
    "static": "policy:\n  Active: static\n  ReservedResources:\n    cpu: 2\n",
    "balloons": """\
policy:
  Active: balloons
  ReservedResources:
    cpu: 2
  balloons:
    BalloonTypes:
      - Name: app
        Namespaces: ["app-*"]
        MinCPUs: 2
        MaxCPUs: 16
      - Name: fixed
        Namespaces: [fixed]
        MinCPUs: 4
        MaxCPUs: 4
        MinBalloons: 2
""",
    "dynamic-pools": """\
policy:
  Active: dynamic-pools
  ReservedResources:
    cpu: 2
  dynamic-pools:
    DynamicPoolTypes:
      - Name: app
        Namespaces: ["app-*"]
      - Name: fixed
        Namespaces: [fixed]
""",
}
# memtier: the same 256 CPUs with a PMEM node beside each NUMA node; app-a pods ask for PMEM, app-b ones cold-start.
CONFIGS["memtier"] = "policy:\n  Active: memtier\n  ReservedResources:\n    cpu: 2\n"
SHAPES = {"memtier": replace(EIGHT_NUMA_256, pmem_node_kb=64 * 1024 * 1024)}
POD_ANNOTATIONS = {"memtier": {"app-a": {"memory-type.cri-resource-manager.intel.com/pod": "pmem,dram"},
                               "app-b": {"cold-start.cri-resource-manager.intel.com/pod": "duration: 1h"}}}
# podpools: app-* pods in 2-CPU pool instances of 4 pods (half the node), fixed pods in 1-CPU ones of 2.
CONFIGS["podpools"] = """\
policy:
  Active: podpools
  ReservedResources:
    cpu: 2
  podpools:
    Pools:
      - {Name: app, CPU: 2, MaxPods: 4, Instances: 50 %}
      - {Name: fixed, CPU: 1, MaxPods: 2, Instances: 32 CPUs, FillOrder: Packed}
"""
POD_ANNOTATIONS["podpools"] = {ns: {"pool.podpools.cri-resource-manager.intel.com": pool}
                               for ns, pool in (("app-a", "app"), ("app-b", "app"), ("fixed", "fixed"))}
CONFIGS["static-plus"] = "policy:\n  Active: static-plus\n  ReservedResources:\n    cpu: 2\n"
# static-pools: CMK's layout on 256 CPUs, the default (shared) pool as 30 lists of 8 CPUs that containers spread over.
CONFIGS["static-pools"] = "policy:\n  Active: static-pools\n  static-pools:\n    pools:\n" + \
    "      exclusive:\n        exclusive: true\n        cpuLists: [" + \
    ", ".join(f"{{Cpuset: '{c}', Socket: 0}}" for c in range(8, 16)) + "]\n" + \
    "      infra:\n        cpuLists: [{Cpuset: '0-7', Socket: 0}]\n" + \
    "      shared:\n        cpuLists: [" + \
    ", ".join(f"{{Cpuset: '{c}-{c + 7}', Socket: {c // 128}}}" for c in range(16, 256, 8)) + "]\n"
# topology-aware with upstream's implicit pod co-location affinity: every decision evaluates it against all
# 200 running containers (the cost of container affinity annotations with a node-wide scope).
CONFIGS["topology-aware-affinity"] = ("policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: 2\n"
                                      "  topology-aware:\n    ColocatePods: true\n")
# (namespace, QoS, milli-CPU) of the running mix, repeated to RUNNING containers.
MIX = [("default", "guaranteed", 1000), ("default", "guaranteed", 2500), ("default", "burstable", 500),
       ("default", "besteffort", 0), ("app-a", "burstable", 750), ("app-b", "guaranteed", 1000),
       ("kube-system", "burstable", 100), ("default", "burstable", 250), ("fixed", "burstable", 200),
       ("default", "besteffort", 0)]
NEW = [("default", "guaranteed", 2000), ("default", "burstable", 500), ("default", "besteffort", 0),
       ("app-a", "burstable", 1000)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Node:
    def __init__(self, topology, relay_dir: Path, config_text: str,
                 annotations: dict[str, dict[str, str]] | None = None) -> None:
        # As cri-resmgr runs it (resmgr/cli.py): the cache is written by a background thread; encoding stays
        # in the decision and is timed.
        self.rm = ResourceManager(topology, relay_dir=relay_dir, fallback_config=validate_config_text(config_text),
                                  background_save=True)
        self.pods: dict[str, tuple[str, api_pb2.PodSandboxConfig]] = {}
        self.annotations = annotations or {}  # namespace -> pod annotations
        self.n = 0

    def pod(self, namespace: str, qos: str) -> tuple[str, api_pb2.PodSandboxConfig]:
        key = f"{namespace}-{qos}-{self.n}"
        self.n += 1
        cfg = pod_config(key, namespace=namespace, qos=qos, annotations=self.annotations.get(namespace))
        req = api_pb2.RunPodSandboxRequest(config=cfg)
        self.rm.before("RunPodSandbox", req)
        self.rm.after("RunPodSandbox", req, api_pb2.RunPodSandboxResponse(pod_sandbox_id=f"pod-{key}"))
        return f"pod-{key}", cfg

    def create(self, pod: tuple[str, api_pb2.PodSandboxConfig], milli: int) -> tuple[str, float, float]:
        """Create one container; returns (id, thread CPU ms, wall ms) of the ``before`` decision."""
        self.n += 1
        req = create_request(pod[0], pod[1], f"c{self.n}", cpu_milli=milli)
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        result = self.rm.before("CreateContainer", req)
        cpu, wall = (time.thread_time_ns() - c0) / 1e6, (time.perf_counter_ns() - w0) / 1e6
        cid = f"ctr-{self.n}"
        self.rm.after("CreateContainer", result.request or req, api_pb2.CreateContainerResponse(container_id=cid))
        return cid, cpu, wall

    def remove(self, cid: str) -> None:
        for method, req, resp in (
                ("StopContainer", api_pb2.StopContainerRequest(container_id=cid), api_pb2.StopContainerResponse()),
                ("RemoveContainer", api_pb2.RemoveContainerRequest(container_id=cid),
                 api_pb2.RemoveContainerResponse())):
            self.rm.before(method, req)
            self.rm.after(method, req, resp)


def bench_one(name: str, topology, workdir: Path, iterations: int) -> tuple[float, float]:
    if name in SHAPES:
        topology = discover_topology(build_sysfs(workdir / f"sysfs-{name}", SHAPES[name]))
    node = Node(topology, workdir / name, CONFIGS[name], POD_ANNOTATIONS.get(name))
    for i in range(RUNNING):
        namespace, qos, milli = MIX[i % len(MIX)]
        node.create(node.pod(namespace, qos), milli)
    assert len(node.rm.placements()) == RUNNING
    new_pods = {(ns, qos): node.pod(ns, qos) for ns, qos, _ in NEW}
    cpu_samples: list[float] = []
    wall_samples: list[float] = []
    warmup = 50
    gc.collect()
    for i in range(iterations + warmup):
        namespace, qos, milli = NEW[i % len(NEW)]
        cid, cpu, wall = node.create(new_pods[(namespace, qos)], milli)
        if i >= warmup:
            cpu_samples.append(cpu)
            wall_samples.append(wall)
        node.remove(cid)
    assert len(node.rm.placements()) == RUNNING
    p50, p99 = percentile(cpu_samples, 0.50), percentile(cpu_samples, 0.99)
    print(f"  {name}: decide cpu p50={p50:.3f} ms p99={p99:.3f} ms | wall p50="
          f"{percentile(wall_samples, 0.50):.3f} ms p99={percentile(wall_samples, 0.99):.3f} ms "
          f"({len(cpu_samples)} decisions, {RUNNING} running, load avg {os.getloadavg()[0]:.1f})", flush=True)
    return p50, p99


def test_bench_policy_decision() -> None:
    iterations = int(os.environ.get("POLICY_BENCH_ITERATIONS", "2000"))
    workdir = Path(tempfile.mkdtemp(prefix="bench-policy-"))
    topology = discover_topology(build_sysfs(workdir / "sysfs", EIGHT_NUMA_256))
    assert len(topology.cpus) == 256 and len(topology.nodes) == 8
    print(f"\nbench-policy: {topology.describe()}", flush=True)
    results = {name: bench_one(name, topology, workdir, iterations) for name in CONFIGS}
    p50 = max(r[0] for r in results.values())
    p99 = max(r[1] for r in results.values())
    slowest = max(results, key=lambda n: results[n][1])
    print(f"  target decide_p99_ms <= {TARGET_P99_MS}: {'met' if p99 <= TARGET_P99_MS else 'NOT met'} "
          f"(slowest policy: {slowest})", flush=True)
    line = f"policy: decide_p50_ms={p50:.3f} decide_p99_ms={p99:.3f} cpus=256 containers={RUNNING}"
    print(line, flush=True)
    # pytest prints its own summary after the test; repeat the line at exit so it is the LAST line.
    atexit.register(print, line, flush=True)
