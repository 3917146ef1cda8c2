"""`make demo`'s steps (devland/demo.py, which hacks/demo.py runs) end to end on the shared landscape: enable,
rollout through real kubelets, pinned pod, config change, disable with every node restored. The demo's step 0
(its own landscape up) is the shared landscape's start-up (conftest.py), which checks at the end of the session
that nothing is left; the demo deletes its pods, so the scenarios after it find the landscape as it was."""

from __future__ import annotations

import re

import pytest

from devland import Landscape
from devland.demo import RELAY, Demo


def run_demo(landscape: Landscape, tmp_path, capsys: pytest.CaptureFixture[str], mode: str = RELAY) -> str:
    """The demo's steps in ``mode`` on ``landscape``; its whole output, after the checks every mode shares."""
    rc = Demo(tmp_path, mode=mode, landscape=landscape).run()
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert rc == 0, out[-6000:]
    assert "demo: all steps passed" in out
    # The summary names the real components and shows the pinned cpuset and the restored nodes.
    assert "Kubernetes v1." in out and "gardener-resource-manager v1." in out and "docker-registry" in out
    assert re.search(r"Gardener v1\.\d+\.\d+ ", out), "the summary names the Gardener version"
    assert "cpuset.cpus=" in out and "identical" in out
    # The agent's placement Events on the pinned pod and on its unpinned twin (issue 29 item 3).
    assert "Event CPUsPinned: container " in out and "Event NotPinned: container " in out
    assert "9. the demo's pods deleted" in out
    assert "FAILED" not in out
    with landscape.inside():
        pods = landscape.shoot.get_json("pods", "-n", "default")["items"]
    assert not [p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith("demo-")]
    return out


@pytest.mark.timeout(1200)
def test_demo_runs_end_to_end(landscape, tmp_path, capsys):
    out = run_demo(landscape, tmp_path, capsys)
    assert "every node on the relay in" in out
