"""Benchmark: CRI calls directly against containerd vs through the cri-resmgr relay (`make bench-relay`).

Measures added latency (Version), ListContainers and ListContainerStats with 110 containers, the
pod-start sequence, and the relay's RSS and CPU under kubelet-like relist traffic (ListPodSandbox,
ListContainers, ListContainerStats once a second). Direct and relayed samples are interleaved so
machine noise hits both alike. The LAST line printed is the summary:

    relay: added_p50_ms=<x> added_p99_ms=<y> podstart_ratio=<r> rss_mb=<m> idle_cpu_pct=<c>
           concurrent8_ratio=<a> concurrent32_ratio=<b> max_request_mib=<s> idle_rss_mb=<i>
           soak_rss_growth_pct=<g> soak_failed_calls=<f> containerd=<version> build=<onedir|onefile|venv|exe>

By default it measures what a node runs: the unpacked (one-dir) build that the installer ships as a release
(hacks/build-executable.sh, `make build-exe`: _out/bin/cri-resmgr.dir/cri-resmgr; the bench builds it first when
its sources changed, in seconds when they did not) on containerd 2 (setup step containerd2), as current Gardener
nodes run it: one process, nothing unpacked at start. The one-file build (RELAY_BENCH_EXE=onefile) runs as a
small bootloader process and the relay as its child; every RSS and CPU figure is the whole process tree's
(bootloader + relay), and the start-up lines show the split.

concurrentN_ratio: wall time of N pod starts at once on one connection (as kubelet's), through
the relay over direct. max_request_mib: the largest CreateContainer that passes the relay, tried
in steps up to just under containerd's 16 MiB limit (reported as 16); it runs last, so that its
16 MiB buffers are in none of the RSS figures. idle_rss_mb: the RSS after start and a few
hundred Version calls, before any container exists. rss_mb: the largest RSS during the relist
window, with 110 containers. soak_rss_growth_pct: the 32-client mix of test/bench/relay_load.py
(28 unary callers, 3 event streams, 1 pod churner) runs for a 1-minute warm-up, then for the soak;
the growth is the soak's largest RSS over the RSS at its start, in percent. soak_failed_calls: calls
of the mix that did not get through (UNAVAILABLE, INTERNAL, ...; the runtime's own answers such as
NOT_FOUND for a container the churner just removed do not count); target 0. containerd: the version of the
containerd both sides ran against, as `containerd --version` prints it. build: what ran as the relay
(onedir: the shipped build; onefile: its one-file form; venv: the venv's `cri-resmgr`; exe: RELAY_BENCH_EXE's
executable).

Targets (reported, not asserted): added_p50_ms <= 0.10, podstart_ratio <= 1.02, rss_mb <= 30,
idle_cpu_pct <= 0.5, concurrentN_ratio <= 1.10, max_request_mib >= 16, soak_rss_growth_pct <= 5.
Environment: CRI_RESMGR_TEST_CONTAINERD=debian runs it against Debian's containerd 1.6 instead of
containerd 2; RELAY_BENCH_EXE=onefile runs the one-file build, RELAY_BENCH_EXE=venv the venv's `cri-resmgr` (the
Python sources of this checkout, no bootloader) instead of the one-dir build, and RELAY_BENCH_EXE=<path>
another cri-resmgr executable, as is;
RELAY_BENCH_BASELINE=<commit> also builds that commit's one-dir build (in a worktree under the dev cache) and
measures Version and pod starts through both builds in the same run, interleaved; the summary then has a
second line, `baseline: added_p50_ms=.. baseline_added_p50_ms=.. podstart_ratio=.. baseline_podstart_ratio=..`,
which tells a change of the code from a change of the machine;
RELAY_BENCH_ARGS adds cri-resmgr flags (to compare options); RELAY_BENCH_IDLE_S sets the relist window
(default 30 s); RELAY_BENCH_SOAK_S the soak (default 300 s, after the 60 s warm-up; RELAY_BENCH_WARMUP_S
changes that).
"""

from __future__ import annotations

import atexit
import os
import shlex
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from bench.relay_load import LoadMix, container_config, pod_config, soak
from cri_api.v1 import api_pb2, api_pb2_grpc
from fixtures.containerd import CONTAINERD2, Containerd, running_containerd, runtime_from_env
from integration.relay.relay_process import RelayProcess, cri_resmgr_executable

from devland.hacks import build_executable, build_revision
from devland.procfs import descendants, private_kib, rss_kib, tree_cpu_seconds, tree_rss_kib
from devland.tools import Tools

CONTAINERS = 110
PODS = 22  # 5 containers each
# Pod starts vary by +-20% on a busy machine; 40 interleaved pairs keep the median's noise near 2%.
PODSTART_PAIRS = 40
TARGETS = {"added_p50_ms": 0.10, "podstart_ratio": 1.02, "rss_mb": 30, "idle_cpu_pct": 0.5,
           "concurrent8_ratio": 1.10, "concurrent32_ratio": 1.10, "soak_rss_growth_pct": 5}
CONCURRENT_ROUNDS = 3
REQUEST_MIB = (1, 2, 4, 8, 16)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(call, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        call()
        out.append(time.perf_counter() - t)
    return out


def interleaved(*calls, rounds: int, per_round: int) -> list[list[float]]:
    """Each call's timings, the calls taking turns in rounds (the first round in order, the next reversed, ...)."""
    out: list[list[float]] = [[] for _ in calls]
    order = list(range(len(calls)))
    for _ in range(rounds):
        for i in order:
            out[i] += timed(calls[i], per_round)
        order.reverse()
    return out


EXE_ENV = "RELAY_BENCH_EXE"
ONEDIR, ONEFILE, VENV, EXE = "onedir", "onefile", "venv", "exe"


def relay_build(choice: str) -> tuple[str, str]:
    """(executable, build) for RELAY_BENCH_EXE's value: unset or "onedir" the unpacked build that nodes run
    (hacks/build-executable.sh's OUTPUT.dir/, brought up to date first), "onefile" its one-file build; "venv"
    the venv's cri-resmgr; anything else a path to run as it is."""
    if choice in ("", ONEDIR):
        onefile = build_executable()
        return str(onefile.with_name(onefile.name + ".dir") / "cri-resmgr"), ONEDIR
    if choice == ONEFILE:
        return str(build_executable()), ONEFILE
    if choice == VENV:
        return cri_resmgr_executable(), VENV
    return choice, EXE


BASELINE_ENV = "RELAY_BENCH_BASELINE"


def compare_baseline(revision: str, containerd: Containerd, workdir: Path, extra: list[str],
                     direct: api_pb2_grpc.RuntimeServiceStub, via: api_pb2_grpc.RuntimeServiceStub) -> str:
    """Version latency and pod starts through this build and ``revision``'s one-dir build, side by side in
    the same run (each against direct calls); the relay of ``revision`` is stopped before anything else runs.
    Returns the comparison's summary line."""
    executable = build_revision(revision)
    base = RelayProcess(workdir / "baseline", containerd.socket, args=extra, executable=executable).start()
    channel = grpc.insecure_channel(base.endpoint)
    try:
        old = api_pb2_grpc.RuntimeServiceStub(channel)
        req = api_pb2.VersionRequest()
        timed(lambda: old.Version(req), 300)
        print(f"  baseline {revision}: {executable}, pid {base.pid}", flush=True)
        d, new_t, old_t = interleaved(lambda: direct.Version(req), lambda: via.Version(req),
                                      lambda: old.Version(req), rounds=30, per_round=150)
        report("Version (this build)", d, new_t)
        report(f"Version ({revision})", d, old_t)
        pods, ids = pod_starts({"d": direct, "n": via, "o": old}, "baseline-", containerd.busybox_image)
        for pod in ids["n"]:  # removed through this build's relay, so its state stays as without a baseline
            via.StopPodSandbox(api_pb2.StopPodSandboxRequest(pod_sandbox_id=pod))
            via.RemovePodSandbox(api_pb2.RemovePodSandboxRequest(pod_sandbox_id=pod))
        containerd.remove_all()
    finally:
        channel.close()
        base.stop()
    d50 = statistics.median(d)
    pod50 = statistics.median(pods["d"])
    return (f"baseline: added_p50_ms={(statistics.median(new_t) - d50) * 1e3:.3f} "
            f"baseline_added_p50_ms={(statistics.median(old_t) - d50) * 1e3:.3f} "
            f"podstart_ratio={statistics.median(pods['n']) / pod50:.3f} "
            f"baseline_podstart_ratio={statistics.median(pods['o']) / pod50:.3f} baseline={revision}")


def rss_mb(pid: int) -> float:
    """The RSS of ``pid`` and every process below it: a one-file build's bootloader and its relay."""
    return tree_rss_kib(pid) / 1024


def rss_split(pid: int) -> str:
    """Each process's share of rss_mb, and how much of it is its own (the rest: shared libraries' pages)."""
    return " + ".join(f"pid {p} {rss_kib(p) / 1024:.1f} MB (private {private_kib(p) / 1024:.1f})"
                      for p in [pid, *descendants(pid)])


@pytest.fixture(scope="module")
def bench_containerd(tools: Tools) -> Iterator[Containerd]:
    """containerd 2 as current Gardener nodes run it, or the runtime CRI_RESMGR_TEST_CONTAINERD names."""
    with running_containerd(tools, "ctrd-", runtime=runtime_from_env(default=CONTAINERD2)) as ctrd:
        yield ctrd


def start_pod(stub: api_pb2_grpc.RuntimeServiceStub, name: str, image: str, containers: int = 1) -> str:
    config = pod_config(name)
    pod_id = stub.RunPodSandbox(api_pb2.RunPodSandboxRequest(config=config), timeout=120).pod_sandbox_id
    for i in range(containers):
        cid = stub.CreateContainer(api_pb2.CreateContainerRequest(
            pod_sandbox_id=pod_id, config=container_config(f"c{i}", image), sandbox_config=config),
            timeout=120).container_id
        stub.StartContainer(api_pb2.StartContainerRequest(container_id=cid), timeout=120)
    return pod_id


def pod_starts(stubs: dict[str, api_pb2_grpc.RuntimeServiceStub], prefix: str,
               image: str) -> tuple[dict[str, list[float]], dict[str, list[str]]]:
    """PODSTART_PAIRS pod starts through each of ``stubs`` in turn, who goes first alternating: the seconds each
    took and the pods' ids, by the stubs' tags."""
    seconds: dict[str, list[float]] = {tag: [] for tag in stubs}
    ids: dict[str, list[str]] = {tag: [] for tag in stubs}
    order = list(stubs.items())
    for i in range(PODSTART_PAIRS):
        for tag, stub in order if i % 2 else order[::-1]:
            t = time.perf_counter()
            ids[tag].append(start_pod(stub, f"{prefix}{tag}{i}", image))
            seconds[tag].append(time.perf_counter() - t)
    return seconds, ids


def concurrent_starts(stub: api_pb2_grpc.RuntimeServiceStub, n: int, tag: str, image: str) -> float:
    """Wall time of ``n`` pod starts at once over one channel; the pods are removed afterwards."""
    ids: list[str] = []
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            ids.append(start_pod(stub, f"conc-{tag}-{i}", image))
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t
    for pod_id in ids:
        stub.StopPodSandbox(api_pb2.StopPodSandboxRequest(pod_sandbox_id=pod_id), timeout=120)
        stub.RemovePodSandbox(api_pb2.RemovePodSandboxRequest(pod_sandbox_id=pod_id), timeout=120)
    if errors:
        raise errors[0]
    return wall


def concurrent_ratio(direct, via, n: int, image: str, *, via_name: str = "relay", direct_name: str = "direct",
                     rounds: int = CONCURRENT_ROUNDS) -> float:
    """The median wall time of ``n`` pod starts at once through ``via`` over ``direct``'s (``rounds`` interleaved
    pairs, who goes first alternating). The line printed also shows the spread of the rounds' own ratios."""
    d, r = [], []
    for i in range(rounds):
        order = [(direct, d, "d"), (via, r, "r")]
        for stub, out, tag in order if i % 2 else order[::-1]:
            out.append(concurrent_starts(stub, n, f"{tag}{n}-{i}", image))
    ratio = statistics.median(r) / statistics.median(d)
    per_round = sorted(b / a for a, b in zip(d, r, strict=True))
    print(f"  {n} pod starts at once: {direct_name} {statistics.median(d):.2f}s {via_name} "
          f"{statistics.median(r):.2f}s ratio {ratio:.3f} ({rounds} rounds; the rounds' own ratios "
          f"{per_round[0]:.2f}..{per_round[-1]:.2f})", flush=True)
    return ratio


def max_request_mib(via, image: str) -> float:
    """The largest CreateContainer (in MiB, by annotations) the relay passes; 0 if none."""
    config = pod_config("max-request")
    pod_id = via.RunPodSandbox(api_pb2.RunPodSandboxRequest(config=config), timeout=120).pod_sandbox_id
    passed = 0.0
    try:
        for mib in REQUEST_MIB:
            size = mib * 1024 * 1024 - 64 * 1024  # headroom for the rest of the message
            ctr = container_config(f"big{mib}", image)
            for i in range(size // 1000):
                ctr.annotations[f"a{i}"] = "x" * 990
            t = time.perf_counter()
            try:
                via.CreateContainer(api_pb2.CreateContainerRequest(pod_sandbox_id=pod_id, config=ctr,
                                                                   sandbox_config=config), timeout=60)
            except grpc.RpcError as err:
                print(f"  CreateContainer of {mib} MiB failed: {err.code().name}", flush=True)
                break
            print(f"  CreateContainer of {mib} MiB passed in {time.perf_counter() - t:.2f}s", flush=True)
            passed = float(mib)
    finally:
        via.StopPodSandbox(api_pb2.StopPodSandboxRequest(pod_sandbox_id=pod_id), timeout=120)
        via.RemovePodSandbox(api_pb2.RemovePodSandboxRequest(pod_sandbox_id=pod_id), timeout=120)
    return passed


def report(name: str, direct: list[float], relayed: list[float]) -> None:
    d50, r50 = statistics.median(direct) * 1e3, statistics.median(relayed) * 1e3
    d99, r99 = percentile(direct, 0.99) * 1e3, percentile(relayed, 0.99) * 1e3
    print(f"  {name:<22} direct p50={d50:8.3f}ms p99={d99:8.3f}ms | relay p50={r50:8.3f}ms p99={r99:8.3f}ms "
          f"| added p50={r50 - d50:7.3f}ms ratio={r50 / d50:5.2f}", flush=True)


# The soak alone is 6 minutes by default; the whole run takes 20 on a busy machine.
@pytest.mark.timeout(int(os.environ.get("RELAY_BENCH_SOAK_S", "300")) + 2400)
def test_bench_relay(bench_containerd: Containerd) -> None:
    containerd = bench_containerd
    workdir = Path(tempfile.mkdtemp(prefix="bench-relay-", dir="/tmp"))
    extra = shlex.split(os.environ.get("RELAY_BENCH_ARGS", ""))
    idle_window = float(os.environ.get("RELAY_BENCH_IDLE_S", "30"))
    soak_s = float(os.environ.get("RELAY_BENCH_SOAK_S", "300"))
    warmup_s = float(os.environ.get("RELAY_BENCH_WARMUP_S", "60"))
    executable, build = relay_build(os.environ.get(EXE_ENV, ""))
    relay = RelayProcess(workdir, containerd.socket, args=extra, executable=executable).start()
    big = [("grpc.max_send_message_length", 32 << 20), ("grpc.max_receive_message_length", 32 << 20)]
    direct_ch = grpc.insecure_channel(containerd.endpoint, options=big)
    relay_ch = grpc.insecure_channel(relay.endpoint, options=big)
    direct, via = api_pb2_grpc.RuntimeServiceStub(direct_ch), api_pb2_grpc.RuntimeServiceStub(relay_ch)
    containerd_version = containerd.version
    print(f"\nbench-relay: {build} build {relay.argv[0]}, pid {relay.pid}, flags {extra or 'default'}, "
          f"containerd {containerd_version}", flush=True)
    try:
        for stub in (direct, via):  # warm up channels and the relay's method handlers
            timed(lambda s=stub: s.Version(api_pb2.VersionRequest()), 300)
        idle_rss = rss_mb(relay.pid)
        print(f"  idle rss {idle_rss:.1f} MB (after start and 300 Version calls: {rss_split(relay.pid)})", flush=True)

        version_req = api_pb2.VersionRequest()
        baseline = os.environ.get(BASELINE_ENV, "")
        if baseline:
            baseline_line = compare_baseline(baseline, containerd, workdir, extra, direct, via)
        d_version, r_version = interleaved(lambda: direct.Version(version_req), lambda: via.Version(version_req),
                                           rounds=20, per_round=150)
        report("Version", d_version, r_version)

        print(f"  creating {PODS} pods with {CONTAINERS} running containers ...", flush=True)
        started = time.monotonic()
        for p in range(PODS):
            start_pod(direct, f"bench-{p}", containerd.busybox_image, CONTAINERS // PODS)
        listed = len(direct.ListContainers(api_pb2.ListContainersRequest()).containers)
        print(f"  {listed} containers running after {time.monotonic() - started:.1f}s", flush=True)
        assert listed >= CONTAINERS

        list_req = api_pb2.ListContainersRequest()
        report("ListContainers(110)", *interleaved(lambda: direct.ListContainers(list_req),
                                                   lambda: via.ListContainers(list_req), rounds=10, per_round=30))
        stats_req = api_pb2.ListContainerStatsRequest()
        report("ListContainerStats(110)", *interleaved(lambda: direct.ListContainerStats(stats_req),
                                                       lambda: via.ListContainerStats(stats_req),
                                                       rounds=5, per_round=10))

        pods, _ = pod_starts({"d": direct, "r": via}, "podstart-", containerd.busybox_image)
        d_pod, r_pod = pods["d"], pods["r"]
        report("pod start (run+create+start)", d_pod, r_pod)
        podstart_ratio = statistics.median(r_pod) / statistics.median(d_pod)
        conc8 = concurrent_ratio(direct, via, 8, containerd.busybox_image)
        conc32 = concurrent_ratio(direct, via, 32, containerd.busybox_image)
        # Kubelet-like relist: every second ListPodSandbox, ListContainers, ListContainerStats.
        time.sleep(1)
        cpu0, wall0 = tree_cpu_seconds(relay.pid), time.monotonic()
        rss = rss_mb(relay.pid)
        deadline = wall0 + idle_window
        next_tick = wall0
        while next_tick < deadline:
            via.ListPodSandbox(api_pb2.ListPodSandboxRequest())
            via.ListContainers(api_pb2.ListContainersRequest())
            via.ListContainerStats(api_pb2.ListContainerStatsRequest())
            rss = max(rss, rss_mb(relay.pid))
            next_tick += 1
            time.sleep(max(0.0, next_tick - time.monotonic()))
        idle_cpu_pct = (tree_cpu_seconds(relay.pid) - cpu0) / (time.monotonic() - wall0) * 100
        print(f"  relist traffic for {idle_window:.0f}s: relay cpu {idle_cpu_pct:.2f}% of a core, "
              f"rss max {rss:.1f} MB (at the end: {rss_split(relay.pid)})", flush=True)

        print(f"  32-client mix: {warmup_s:.0f}s warm-up, then a {soak_s:.0f}s soak ...", flush=True)
        mix = LoadMix(relay.endpoint, containerd.busybox_image).start()
        try:
            soak(lambda: rss_mb(relay.pid), warmup_s, progress=lambda line: print(line, flush=True))
            calls0 = mix.calls
            first, last, peak = soak(lambda: rss_mb(relay.pid), soak_s,
                                     progress=lambda line: print(line, flush=True))
            calls = mix.calls - calls0
        finally:
            mix.stop()
        soak_growth = (peak - first) / first * 100
        print(f"  soak: rss {first:.1f} -> {last:.1f} MB (max {peak:.1f}), growth {soak_growth:.2f}%, "
              f"{calls} calls ({calls / soak_s:.0f}/s), {mix.failures} failed {mix.errors[:3]}", flush=True)

        # Last: 16 MiB requests leave big buffers behind, which must not count in the RSS figures.
        max_mib = max_request_mib(via, containerd.busybox_image)

        added_p50 = (statistics.median(r_version) - statistics.median(d_version)) * 1e3
        added_p99 = (percentile(r_version, 0.99) - percentile(d_version, 0.99)) * 1e3
        values = {"added_p50_ms": added_p50, "added_p99_ms": added_p99, "podstart_ratio": podstart_ratio,
                  "rss_mb": rss, "idle_cpu_pct": idle_cpu_pct, "concurrent8_ratio": conc8,
                  "concurrent32_ratio": conc32, "soak_rss_growth_pct": soak_growth}
        for key, target in TARGETS.items():
            print(f"  target {key} <= {target}: {'met' if values[key] <= target else 'NOT met'} "
                  f"({values[key]:.3f})", flush=True)
        print(f"  target max_request_mib >= 16: {'met' if max_mib >= 16 else 'NOT met'} ({max_mib:g})", flush=True)
        line = (f"relay: added_p50_ms={added_p50:.3f} added_p99_ms={added_p99:.3f} "
                f"podstart_ratio={podstart_ratio:.3f} rss_mb={rss:.1f} idle_cpu_pct={idle_cpu_pct:.2f} "
                f"concurrent8_ratio={conc8:.3f} concurrent32_ratio={conc32:.3f} max_request_mib={max_mib:g} "
                f"idle_rss_mb={idle_rss:.1f} soak_rss_growth_pct={soak_growth:.2f} soak_failed_calls={mix.failures} "
                f"containerd={containerd_version} build={build}")
        if baseline:
            line += "\n" + baseline_line
        print(line, flush=True)
        # pytest prints its own summary after the test; repeat the line at exit so it is the LAST line.
        atexit.register(print, line, flush=True)
    finally:
        direct_ch.close()
        relay_ch.close()
        relay.stop()
        containerd.remove_all()
        shutil.rmtree(workdir, ignore_errors=True)
