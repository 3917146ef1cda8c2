"""cri-resmgr-agent-probe against a served Agent API, and the agent's command-line errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from kubernetes import client

from resmgr.agent.server import AgentServicer, serve_agent
from resmgr.agent.unix_grpc import stop_unix

BIN = Path(sys.executable).parent


def run(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    exe = shutil.which(script, path=str(BIN))
    assert exe, f"{script} not installed in the venv"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture
def agent_socket():
    status = {"config-status": ""}
    workdir = tempfile.mkdtemp(prefix="agentsock-", dir="/tmp")
    sock = os.path.join(workdir, "agent.sock")

    def health(query: str) -> str:
        return status.get(query, f"unknown health query {query!r}") if query else ""

    server = serve_agent(AgentServicer(client.ApiClient(), "n1", health), sock)
    yield sock, status
    stop_unix(server, sock, grace=0)
    shutil.rmtree(workdir, ignore_errors=True)


def test_probe_healthy_and_unhealthy(agent_socket):
    sock, status = agent_socket
    r = run("cri-resmgr-agent-probe", "-query", "config-status", "-agent-socket", sock)
    assert r.returncode == 0 and r.stdout.startswith("ok"), r.stderr
    status["config-status"] = ("ConfigMap kube-system/cri-resmgr-config.default: invalid config field "
                               "policy.Bogus: unknown field")
    r = run("cri-resmgr-agent-probe", "-query", "config-status", "-agent-socket", sock)
    assert r.returncode == 1
    assert r.stderr.strip() == f"unhealthy: {status['config-status']}"
    assert len(r.stderr.strip().splitlines()) == 1


def test_probe_without_agent(tmp_path: Path):
    r = run("cri-resmgr-agent-probe", "--query", "config-status", "--agent-socket", str(tmp_path / "none.sock"),
            "--timeout", "2")
    assert r.returncode == 1 and "cannot reach cri-resmgr-agent" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


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
