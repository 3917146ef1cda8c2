"""`make demo DEMO_ARGS=--mode=nri` (hacks/demo.py --mode nri) runs end to end on the local landscape: cri-resmgr as
containerd 2's NRI plugin on every node, kubelet never repointed, the same pinned pod, config change and restored
nodes as the relay's demo (test_demo.py), plus a live switch to the relay and back and the plugin killed while pods
start (the demo's steps 4a-4c). A file of its own, so that it runs in the other landscape group, on its shared
landscape."""

from __future__ import annotations

import pytest
from e2e.local.test_demo import run_demo

from devland.demo import NRI


@pytest.mark.timeout(1200)
def test_demo_in_nri_mode_runs_end_to_end(landscape, tmp_path, capsys):
    out = run_demo(landscape, tmp_path, capsys, NRI)
    assert "3. NRI plugin on every node, kubelet untouched" in out
    assert "containerd's own: nothing repointed" in out
    assert "4a. live switch to the relay" in out and "every node on relay in" in out
    assert "every node on nri in" in out and "demo-pinned kept container" in out
    assert "4c. NRI plugin killed while pods start" in out and "all Running; the plugin restarted" in out
