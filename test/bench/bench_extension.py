"""Benchmark of the extension operator against a real kube-apiserver.

Measures (operator running as a real process):
- reconcile_p50_s: one Extension, config changed and annotated with reconcile,
  until status says Succeeded for the new generation (render + secret + MR included);
- converge_100_s: 100 Extensions created at once, until all are Succeeded;
- rss_mb: peak RSS of the operator process during the run.
Targets (DESIGN): <= 1 s, <= 60 s, <= 150 MB. The LAST line printed is
`extension: reconcile_p50_s=<x> converge_100_s=<y> rss_mb=<z>`.
"""

from __future__ import annotations

import atexit
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "extension"))

from extension_operator_process import Operator, SeedClient  # noqa: E402
from fixtures.seed_api import default_shoot  # noqa: E402

TARGETS = {"reconcile_p50_s": 1.0, "converge_100_s": 60.0, "rss_mb": 150.0}
SAMPLES = 15
COUNT = 100


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cluster_body(ns: str) -> dict:
    return {"apiVersion": "extensions.gardener.cloud/v1alpha1", "kind": "Cluster", "metadata": {"name": ns},
            "spec": {"shoot": default_shoot(ns), "seed": {"kind": "Seed", "metadata": {"name": "local"}},
                     "cloudProfile": {"kind": "CloudProfile", "metadata": {"name": "local"}}}}


def make_shoot(seed: SeedClient, ns: str) -> None:
    from kubernetes import client

    seed.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(
        name=ns, labels={"gardener.cloud/role": "shoot"})))
    seed.custom.create_cluster_custom_object("extensions.gardener.cloud", "v1alpha1", "clusters", cluster_body(ns))


def done(ex: dict | None, generation: int | None = None) -> bool:
    status = (ex or {}).get("status") or {}
    ok = (status.get("lastOperation") or {}).get("state") == "Succeeded"
    return ok and (generation is None or status.get("observedGeneration") == generation)


def test_bench_extension(seed_api, tools, tmp_path):
    seed = SeedClient(seed_api)
    cfg_ns = "tbench-garden"
    make_shoot(seed, cfg_ns)
    seed.create_configs_configmap(cfg_ns, {"fallback": "policy:\n  Active: none\n",
                                           "default": "policy:\n  Active: topology-aware\n"})
    # Same environment as the chart's Deployment (MALLOC_ARENA_MAX, see the chart).
    # Cluster-wide like in production (one watch stream, not one per namespace).
    op = Operator(seed_api, tools, tmp_path, None, configmap_namespace=cfg_ns, env={"MALLOC_ARENA_MAX": "2"},
                  extra_args=["--health-interval", "30", "--heartbeat-interval", "30",
                              "--max-concurrent-reconciles", "10"])
    op.start()
    try:
        t0 = time.monotonic()
        out = subprocess.run([tools.helm, "template", "x", "charts/internal/cri-resmgr-installation"],
                             capture_output=True, cwd=str(Path(__file__).resolve().parents[2]), check=True)
        helm_s = time.monotonic() - t0
        print(f"\n  context: one bare `helm template` of the installation chart takes {helm_s:.3f}s "
              f"({len(out.stdout)} bytes)", flush=True)

        # --- reconcile p50 of one Extension -------------------------------------------------------
        ns = "tbench-one"
        make_shoot(seed, ns)
        seed.create_extension(ns, None)
        deadline = time.monotonic() + 60
        while not done(seed.extension(ns)):
            assert time.monotonic() < deadline, op.log_tail()
            time.sleep(0.02)
        samples = []
        for i in range(SAMPLES):
            cpus = 100 + i * 10
            start = time.monotonic()
            ex = seed.patch_extension(ns, {
                "spec": {"providerConfig": {"configs": {
                    "default": f"policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: {cpus}m\n"}}},
                "metadata": {"annotations": {"gardener.cloud/operation": "reconcile"}}})
            gen = ex["metadata"]["generation"]
            deadline = start + 30
            while not done(seed.extension(ns), gen):
                assert time.monotonic() < deadline, op.log_tail()
                time.sleep(0.01)
            samples.append(time.monotonic() - start)
        reconcile_p50 = statistics.median(samples)
        print(f"  reconcile of one Extension over {SAMPLES} config changes: p50 {reconcile_p50:.3f}s "
              f"min {min(samples):.3f}s max {max(samples):.3f}s", flush=True)

        # --- 100 Extensions converge --------------------------------------------------------------
        namespaces = [f"tbench-{i:03d}" for i in range(COUNT)]
        for name in namespaces:
            make_shoot(seed, name)
        start = time.monotonic()
        for i, name in enumerate(namespaces):
            # Distinct configs: every Extension renders and writes its own secret.
            seed.create_extension(name, {"configs": {"force": f"policy:\n  Active: static\n# shoot {i}\n"}})
        created = time.monotonic() - start
        pending = set(namespaces)
        deadline = start + 300
        while pending:
            assert time.monotonic() < deadline, f"{len(pending)} not converged\n{op.log_tail()}"
            items = seed.custom.list_cluster_custom_object("extensions.gardener.cloud", "v1alpha1",
                                                           "extensions")["items"]
            pending -= {e["metadata"]["namespace"] for e in items if done(e)}
            time.sleep(0.2)
        converge = time.monotonic() - start
        missing = [n for n in namespaces if seed.managed_resource(n) is None]
        assert not missing, f"no ManagedResource in {missing[:5]}"
        print(f"  {COUNT} Extensions: created in {created:.1f}s, all Succeeded after {converge:.1f}s", flush=True)

        rss = peak_rss_mb(op.process.pid)
        print(f"  operator peak RSS {rss:.1f} MB", flush=True)
        values = {"reconcile_p50_s": reconcile_p50, "converge_100_s": converge, "rss_mb": rss}
        for key, target in TARGETS.items():
            print(f"  target {key} <= {target}: {'met' if values[key] <= target else 'NOT met'} "
                  f"({values[key]:.3f})", flush=True)
        line = f"extension: reconcile_p50_s={reconcile_p50:.3f} converge_100_s={converge:.1f} rss_mb={rss:.1f}"
        print(line, flush=True)
        # pytest prints its summary after the test; repeat the line at exit so it is the LAST line.
        atexit.register(print, line, flush=True)
    finally:
        op.stop()
