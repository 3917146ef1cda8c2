"""Whether cri-resmgr-agent works on this node: "installed" in the node record means the relay serves kubelet
and the agent answers its health check (the chart's readiness query) on its socket, not only that its pod
was reported Ready (a restarted kubelet reports that before the first probe has run)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import noderecord
from resmgr.options import AGENT_DIR_AGENT_SOCKET

AgentCheck = Callable[[], tuple[bool, str]]
QUERY = "config-status"  # what the agent's readinessProbe asks (charts/.../agent.yaml)


def agent_check(node_path: Callable[[str], Path], timeout: float = 5.0) -> AgentCheck:
    """A check of the node's agent through its socket: (healthy, one-line message). ``node_path`` maps a node
    path into the installer's view (``Host.path``: the node's /var/run is a symlink to /run, which a plain
    join under the host root would follow into the installer's own /run)."""

    def check() -> tuple[bool, str]:
        from resmgr.agent.probe import probe  # grpcio: loaded only where a node record is written

        rc, message = probe(str(node_path(AGENT_DIR_AGENT_SOCKET)), QUERY, timeout)
        return rc == 0, message

    return check


def gated_by_agent(record: Callable[[str, str], object], check: AgentCheck) -> Callable[[str, str], object]:
    """``record`` where INSTALLED is written only while the agent answers healthy, else AGENT_NOT_READY with why."""

    def gated(state: str, reason: str) -> object:
        if state == noderecord.INSTALLED:
            healthy, message = check()
            if not healthy:
                return record(noderecord.AGENT_NOT_READY, message)
        return record(state, reason)

    return gated
