"""cri-resmgr-agent-probe against a live and a missing agent."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from kubernetes import client
from unit.venv_scripts import run

from resmgr.agent.server import AgentServicer, serve_agent
from resmgr.agent.unix_grpc import stop_unix


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
                               "policy.Active: unknown policy 'bogus'")
    r = run("cri-resmgr-agent-probe", "-query", "config-status", "-agent-socket", sock)
    assert r.returncode == 1
    assert r.stderr.strip() == f"unhealthy: {status['config-status']}"
    assert len(r.stderr.strip().splitlines()) == 1


def test_probe_without_agent(tmp_path: Path):
    r = run("cri-resmgr-agent-probe", "--query", "config-status", "--agent-socket", str(tmp_path / "none.sock"),
            "--timeout", "2")
    assert r.returncode == 1 and "cannot reach cri-resmgr-agent" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
