"""`make demo` (hacks/demo.py) runs end to end: enable, pinned pod, disable with the node restored."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_demo_runs_end_to_end(tools):
    r = subprocess.run([sys.executable, str(REPO / "hacks" / "demo.py")], capture_output=True, text=True,
                       timeout=600, cwd=str(REPO))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "demo: all steps passed" in out
    # The summary table shows the pinned cpuset read from the host cgroup and the restored node.
    assert "cpuset.cpus=" in out and "identical" in out
    assert "FAILED" not in out
