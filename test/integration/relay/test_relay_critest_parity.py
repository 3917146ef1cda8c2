"""critest (the CRI validation suite) passes and fails exactly the same specs directly and through the relay.

critest pulls its test images by fixed upstream names. A local docker-registry (hacks/registry.py) on
loopback holds them, built by hacks/critest_images.py, and the containerd under test resolves every
upstream name to it (certs.d hosts.toml), so the specs run instead of failing on their pulls.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fixtures.containerd import RUNTIMES, Containerd
from integration.relay.relay_process import RelayProcess

from devland.hacks import load_hack
from devland.netns import NetNS
from devland.procs import free_port
from devland.tools import Tools

pytestmark = [pytest.mark.integration, pytest.mark.timeout(3600)]
REPO = Path(__file__).resolve().parents[3]


@contextlib.contextmanager
def critest_runtime(tools: Tools, tar: Path, workdir: Path, runtime: str) -> Iterator[Containerd]:
    """A containerd (``runtime``: Debian's 1.6 or containerd 2) that pulls critest's images from a local
    registry holding them.

    All of it (registry, containerd, its pods' bridge, critest's host ports 12000-12002) lives in a
    network namespace of its own with only loopback, entered by the calling thread: concurrent runs
    cannot answer each other's HTTP checks, and no pull can leave the machine. The registry's storage
    is cached next to the image archive (same input hash): a warm run only checks the references."""
    registry = load_hack("registry")
    netns = NetNS(f"crl-critest-{secrets.token_hex(3)}")
    netns.create([])
    try:
        with netns.entered():
            reg = registry.start(workdir / "registry", f"127.0.0.1:{free_port()}",
                                 storage=tar.with_suffix(".registry"))
            ctrd = Containerd(tools, workdir / "containerd", registry_config_path=workdir / "certs.d",
                              pod_gateway=True, runtime=runtime)
            try:
                refs = registry.archive_tags(tar)
                try:
                    registry.verify(reg.address, refs)
                except registry.RegistryError:
                    registry.push(tar, reg.address)
                    registry.verify(reg.address, refs)
                registry.write_hosts_toml(workdir / "certs.d", reg.address)
                ctrd.start()
                yield ctrd
            finally:
                ctrd.stop()
                assert registry.stop(workdir / "registry")
    finally:
        netns.delete()


def critest_side(tools: Tools, tar: Path, workdir: Path, runtime: str, name: str, runs: int = 1,
                 focus: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """critest ``runs`` times against a containerd (``runtime``) of its own, directly (``name`` "direct") or
    through the relay with the transport ``name``; all specs, or only ``focus``. One result (spec -> state)
    per run."""
    tag = "-rerun" if focus else ""
    with critest_runtime(tools, tar, workdir / f"{name}{tag}-runtime", runtime) as ctrd:
        relay = None if name == "direct" else RelayProcess(workdir / f"{name}{tag}", ctrd.socket,
                                                           args=["--transport", name]).start()
        endpoint = ctrd.endpoint if relay is None else relay.endpoint
        try:
            return [run_critest(tools.critest, endpoint, workdir, f"{name}{tag}{i or ''}", focus)
                    for i in range(runs)]
        finally:
            if relay is not None:
                relay.stop()


# Specs whose result is not a function of the runtime and the transport: containerd decides them by a race
# of its own, so comparing them between two critest runs would make the comparison depend on which side
# lost the race. They are left out here, and test_relay_runtime_races.py checks the relay's part in them
# deterministically (the request reaches the runtime, the answer reaches the client byte for byte).
# - "execSync with timeout": on containerd 1.6.20 the timed-out `sleep` is still listed by the next ExecSync
#   in 9 of 9 isolated runs (directly, splice and grpc alike), yet it passed once through grpc under load.
# - "OOMKilled": containerd 1.6 takes the reason from the kernel's OOM event, which races the task's exit; a
#   status read before the event is handled says "Error". It failed directly once with both relays passing,
#   and once through splice with the direct run passing (a fresh machine, commit 8c07346). Run alone it did
#   not fail at all: 0 of 25 directly and 0 of 25 through splice (critest focused on it, one containerd 1.6.20,
#   load 6-12, 2026-11-26). A rate that low cannot be told apart from a relay defect by comparing pass
#   counts without hundreds of runs per side, so the relay's part is checked deterministically instead.
# They are left out on containerd 2 as well: one rule for both runtimes, and the deterministic checks stand.
NOT_COMPARED = (
    "runtime should support execSync with timeout",
    "runtime should output OOMKilled reason / should terminate with exitCode 137 and reason OOMKilled",
)


def spec_regex(specs: tuple[str, ...]) -> str:
    """One ginkgo --skip or --focus pattern (a regular expression over the spec's full text) for ``specs``;
    ginkgo matches the hierarchy joined by spaces, so our " / " separators become spaces."""
    return "|".join(re.escape(spec.replace(" / ", " ")) for spec in specs)


def run_critest(critest: str, endpoint: str, workdir: Path, name: str, focus: tuple[str, ...] = ()) -> dict[str, str]:
    report = workdir / f"{name}.json"
    r = subprocess.run([critest, "--runtime-endpoint", endpoint, "--image-endpoint", endpoint,
                        f"--ginkgo.json-report={report}", "--ginkgo.no-color",
                        f"--ginkgo.skip={spec_regex(NOT_COMPARED)}",
                        *([f"--ginkgo.focus={spec_regex(focus)}"] if focus else [])],
                       capture_output=True, text=True, timeout=1200, cwd=workdir)
    (workdir / f"{name}.out").write_text(r.stdout + r.stderr)
    assert report.exists(), f"critest via {name} wrote no report:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    specs = {}
    for suite in json.loads(report.read_text()):
        for spec in suite.get("SpecReports") or []:
            if spec.get("LeafNodeType") != "It":
                continue
            key = " / ".join([*(spec.get("ContainerHierarchyTexts") or []), spec.get("LeafNodeText", "")])
            specs[key] = spec["State"]
    return specs


def summary(specs: dict[str, str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for state in specs.values():
        counts[state] = counts.get(state, 0) + 1
    return counts


def failed_on_pull(workdir: Path, name: str) -> list[str]:
    """The specs whose failure message names an image pull (from critest's own report)."""
    out = []
    for suite in json.loads((workdir / f"{name}.json").read_text()):
        for spec in suite.get("SpecReports") or []:
            failure = json.dumps(spec.get("Failure") or {})
            if spec.get("State") == "failed" and ("pull" in failure.lower() or "PullImage" in failure):
                out.append(spec.get("LeafNodeText", ""))
    return out


# A spec whose result differs between the sides is run again alone, this many times on each side (each side
# against a fresh containerd), and the difference counts only if every rerun ends as that side's first run did.
# A relay defect that decides a spec does so on every run; a race inside containerd does not repeat on
# command. The one seen so far: "HostNetwork is false" failed once through splice (CI, commit 0e28f67,
# 2026-11-26) in its AfterEach, where StopPodSandbox got "failed to kill container ...: ttrpc: closed" from
# containerd 1.6 for a container that had exited 37 ms earlier: the kill raced the shim's handling of the exit.
# What this rule cannot see is a relay defect that itself strikes only sometimes; the relay's own concurrency
# and bad-input tests cover those (test_relay_concurrency.py, test_relay_bad_input.py, test_relay_fd_exhaustion.py).
RERUNS = 5


def differing(direct: dict[str, str], relayed: dict[str, str]) -> list[str]:
    return sorted(k for k in direct.keys() | relayed.keys() if direct.get(k) != relayed.get(k))


def lasting_differences(direct: list[dict[str, str]], relayed: list[dict[str, str]]) -> dict[str, tuple]:
    """The specs whose results differ between the sides' first runs (``direct[0]``, ``relayed[0]``) and whose
    every rerun (the rest of each list) ends as that side's first run did: spec -> (direct, relayed)."""
    out = {}
    for spec in differing(direct[0], relayed[0]):
        if all(run.get(spec) == direct[0].get(spec) for run in direct[1:]) and \
                all(run.get(spec) == relayed[0].get(spec) for run in relayed[1:]):
            out[spec] = (direct[0].get(spec), relayed[0].get(spec))
    return out


def test_lasting_differences_are_the_ones_every_rerun_repeats():
    first_direct, first_relayed = {"a": "passed", "b": "passed", "c": "passed"}, \
        {"a": "failed", "b": "failed", "c": "passed"}
    reruns_direct = [{"a": "passed", "b": "passed"}] * 2
    reruns_relayed = [{"a": "failed", "b": "passed"}, {"a": "failed", "b": "failed"}]
    assert lasting_differences([first_direct, *reruns_direct], [first_relayed, *reruns_relayed]) == \
        {"a": ("passed", "failed")}  # b passed once when rerun: a race, not the relay
    # A spec the direct side fails on a rerun is the runtime's race, even if the relayed side always fails it.
    assert lasting_differences([first_direct, {"a": "failed"}], [first_relayed, {"a": "failed"}]) == {}
    # A spec missing on one side stays missing when rerun: a lasting difference.
    assert lasting_differences([{"x": "passed"}, {"x": "passed"}], [{}, {}]) == {"x": ("passed", None)}


def failure_messages(workdir: Path, name: str, specs: list[str]) -> dict[str, str]:
    """critest's own failure message for each of ``specs`` that failed in its run ``name``."""
    out = {}
    for suite in json.loads((workdir / f"{name}.json").read_text()):
        for spec in suite.get("SpecReports") or []:
            key = " / ".join([*(spec.get("ContainerHierarchyTexts") or []), spec.get("LeafNodeText", "")])
            if key in specs and spec.get("State") == "failed":
                out[key] = ((spec.get("Failure") or {}).get("Message") or "")[:400]
    return out


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_critest_parity(tools, runtime):
    """Both transports (splice, the default, and grpc) must match critest run directly, on Debian's
    containerd 1.6 and on containerd 2 as current Gardener nodes run it. The three runs go at once, each
    against a runtime of its own (critest's wall time is mostly waiting)."""
    tar = load_hack("critest_images").build()
    workdir = Path(tempfile.mkdtemp(prefix=f"critest-{runtime}-", dir="/tmp"))
    sides = ("direct", "splice", "grpc")
    with ThreadPoolExecutor(len(sides)) as pool:
        futures = {name: pool.submit(critest_side, tools, tar, workdir, runtime, name) for name in sides}
        results = {name: f.result() for name, f in futures.items()}
    direct = results["direct"][0]
    assert direct, "critest ran no specs"
    assert summary(direct).get("passed", 0) > 0, "critest passed nothing directly; the runtime setup is broken"
    for spec in NOT_COMPARED:  # the skip pattern must still name them, or the race is back in the comparison
        states = {state for key, state in direct.items() if spec in key}
        assert states == {"skipped"}, f"{spec!r} was not skipped: {states or 'not in the report'}"
    pulls = failed_on_pull(workdir, "direct")
    print(f"\ncritest direct ({runtime}): {summary(direct)}; failed on an image pull: {pulls}")
    # The one image no local build can provide: its reference carries the upstream manifest's digest.
    assert pulls == ["public image with digest should be pulled and removed [Conformance]"], pulls
    for transport in sides[1:]:
        print(f"critest through the relay ({transport}): {summary(results[transport][0])}")
    rerun = tuple(sorted({spec for t in sides[1:] for spec in differing(direct, results[t][0])}))
    if rerun:
        print(f"differing specs, each run again {RERUNS} times on every side: {json.dumps(rerun, indent=1)}")
        for transport in sides[1:]:
            print(f"their failures through {transport}: "
                  f"{json.dumps(failure_messages(workdir, transport, list(rerun)), indent=1)}")
        print(f"their failures directly: {json.dumps(failure_messages(workdir, 'direct', list(rerun)), indent=1)}")
        with ThreadPoolExecutor(len(sides)) as pool:
            futures = {name: pool.submit(critest_side, tools, tar, workdir, runtime, name, RERUNS, rerun)
                       for name in sides}
            for name, f in futures.items():
                results[name] += f.result()
        for name in sides:
            print(f"reruns {name}: {[{spec: run.get(spec) for spec in rerun} for run in results[name][1:]]}")
    for transport in sides[1:]:
        differences = lasting_differences(results["direct"], results[transport])
        assert not differences, f"critest results differ (direct, {transport}): {json.dumps(differences, indent=1)}"
    shutil.rmtree(workdir, ignore_errors=True)  # kept for inspection when the comparison fails
