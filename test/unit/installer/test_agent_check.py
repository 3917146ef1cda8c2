"""The node record says "installed" only while cri-resmgr-agent answers healthy on its socket."""

from __future__ import annotations

from pathlib import Path

import noderecord
from installer.agent_check import agent_check, gated_by_agent
from installer.host import resolve_in_root


def recording() -> tuple[list[tuple[str, str]], object]:
    written: list[tuple[str, str]] = []
    return written, lambda state, reason: written.append((state, reason))


def test_installed_waits_for_the_agent_then_is_written() -> None:
    written, record = recording()
    answers = iter([(False, "unhealthy: config error"), (True, "ok: config-status healthy")])
    gated = gated_by_agent(record, lambda: next(answers))
    gated(noderecord.INSTALLED, "")
    gated(noderecord.INSTALLED, "")
    assert written == [(noderecord.AGENT_NOT_READY, "unhealthy: config error"), (noderecord.INSTALLED, "")]


def test_other_states_pass_without_asking_the_agent() -> None:
    written, record = recording()

    def never() -> tuple[bool, str]:
        raise AssertionError("the agent was asked")

    gated = gated_by_agent(record, never)
    for state in (noderecord.DEGRADED, noderecord.INSTALL_FAILED):
        gated(state, "why")
    assert written == [(noderecord.DEGRADED, "why"), (noderecord.INSTALL_FAILED, "why")]


def test_the_socket_is_found_through_the_nodes_symlinks(tmp_path: Path) -> None:
    """On a node /var/run is a symlink to /run: the check must look in the host's /run, not the installer's."""
    (tmp_path / "run").mkdir()
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "run").symlink_to("/run")
    healthy, message = agent_check(lambda p: resolve_in_root(tmp_path, p), timeout=1.0)()
    assert not healthy
    assert "cannot reach cri-resmgr-agent" in message
    assert f"{tmp_path}/run/cri-resmgr/agent/cri-resmgr-agent.sock" in message, message
