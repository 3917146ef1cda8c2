"""cri-resmgr-agent's command line: clear errors before anything starts."""

from __future__ import annotations

import os
from pathlib import Path

from unit.venv_scripts import run


def test_agent_needs_node_name():
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    r = run("cri-resmgr-agent", env=env)
    assert r.returncode == 2 and "NODE_NAME is not set" in r.stderr


def test_agent_reports_bad_kubeconfig(tmp_path: Path):
    bad = tmp_path / "kubeconfig"
    bad.write_text("this: is: not: a kubeconfig")
    env = {**os.environ, "NODE_NAME": "n1"}
    r = run("cri-resmgr-agent", "--kubeconfig", str(bad), "--agent-socket", str(tmp_path / "a.sock"), env=env)
    assert r.returncode == 2 and "cannot configure the Kubernetes client" in r.stderr
    env.pop("KUBERNETES_SERVICE_HOST", None)
    r = run("cri-resmgr-agent", "--agent-socket", str(tmp_path / "a.sock"), env=env)
    assert r.returncode == 2 and "in-cluster" in r.stderr


def test_help_gives_the_whole_precedence():
    from resmgr.agent.cli import build_parser

    text = " ".join(build_parser().format_help().split())
    assert ("cri-resmgr-config.node.$NODE_NAME, cri-resmgr-config.pool.$POOL (POOL is the node's label "
            "worker.gardener.cloud/pool, set by Gardener), cri-resmgr-config.group.$GROUP") in text
    assert "node > pool > group > default" in text
