"""critest (the CRI validation suite) passes and fails exactly the same specs directly and through the relay."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from integration.relay.relay_process import RelayProcess


def run_critest(critest: str, endpoint: str, workdir: Path, name: str) -> dict[str, str]:
    report = workdir / f"{name}.json"
    r = subprocess.run([critest, "--runtime-endpoint", endpoint, "--image-endpoint", endpoint,
                        f"--ginkgo.json-report={report}", "--ginkgo.no-color"],
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


def test_critest_parity(tools, containerd):
    """Both transports (splice, the default, and grpc) must match critest run directly."""
    workdir = Path(tempfile.mkdtemp(prefix="critest-", dir="/tmp"))
    direct = run_critest(tools.critest, containerd.endpoint, workdir, "direct")
    containerd.remove_all()
    assert direct, "critest ran no specs"
    assert summary(direct).get("passed", 0) > 0, "critest passed nothing directly; the runtime setup is broken"
    print(f"\ncritest direct: {summary(direct)}")
    for transport in ("splice", "grpc"):
        relay = RelayProcess(workdir / transport, containerd.socket, args=["--transport", transport]).start()
        try:
            relayed = run_critest(tools.critest, relay.endpoint, workdir, transport)
        finally:
            relay.stop()
            containerd.remove_all()
        print(f"critest through the relay ({transport}): {summary(relayed)}")
        differences = {k: (direct.get(k), relayed.get(k)) for k in direct.keys() | relayed.keys()
                       if direct.get(k) != relayed.get(k)}
        assert not differences, f"critest results differ (direct, {transport}): {json.dumps(differences, indent=1)}"
    shutil.rmtree(workdir, ignore_errors=True)  # kept for inspection when the comparison fails
