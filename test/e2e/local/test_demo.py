"""`make demo` (hacks/demo.py) runs end to end on the local landscape: enable, rollout through real
kubelets, pinned pod, config change, disable with every node restored, nothing left running."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from devland import build_images

REPO = Path(__file__).resolve().parents[3]


def run_demo(tmp_path: Path, *args: str) -> str:
    """hacks/demo.py with ``args`` on images built for it; its whole output, after the checks every mode shares."""
    images = build_images(tmp_path / "images")
    r = subprocess.run([sys.executable, str(REPO / "hacks" / "demo.py"), "--images-dir", str(images), *args],
                       capture_output=True, text=True, timeout=900, cwd=str(REPO))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert "demo: all steps passed" in out
    # The summary names the real components and shows the pinned cpuset and the restored nodes.
    assert "Kubernetes v1." in out and "gardener-resource-manager v1." in out and "docker-registry" in out
    assert re.search(r"Gardener v1\.\d+\.\d+ ", out), "the summary names the Gardener version"
    assert "cpuset.cpus=" in out and "identical" in out and "nothing left" in out
    # The agent's placement Events on the pinned pod and on its unpinned twin (issue 29 item 3).
    assert "Event CPUsPinned: container " in out and "Event NotPinned: container " in out
    assert "FAILED" not in out
    return out


@pytest.mark.timeout(1200)
def test_demo_runs_end_to_end(tools, tmp_path):
    out = run_demo(tmp_path)
    assert "every node on the relay in" in out
