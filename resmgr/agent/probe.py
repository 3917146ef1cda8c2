"""Command line of cri-resmgr-agent-probe: ask the agent's HealthCheck and exit 0 or 1."""

from __future__ import annotations

import argparse
import sys

import grpc

from resmgr.agent.unix_grpc import rpc_error_text, unix_channel
from resmgr.options import DEFAULT_AGENT_SOCKET
from resmgr.proto import agent_pb2, agent_pb2_grpc

DESCRIPTION = """\
cri-resmgr-agent-probe asks the local cri-resmgr-agent for its health over the
Agent API and prints one line: exit 0 when healthy, 1 with the reason otherwise
(including when the agent cannot be reached). The agent DaemonSet uses it as its
readiness probe with '-query config-status', which fails while the node's
ConfigMap is invalid or was rejected by cri-resmgr, naming the ConfigMap and the
problem.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cri-resmgr-agent-probe", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-query", "--query", default="",
                   help="what to check: 'config-status' (the node's config is valid and active) or "
                        "'' (the agent answers; default)")
    p.add_argument("-agent-socket", "--agent-socket", default=DEFAULT_AGENT_SOCKET,
                   help=f"the agent's socket (default: {DEFAULT_AGENT_SOCKET})")
    p.add_argument("-timeout", "--timeout", type=float, default=5.0, help="seconds to wait for the agent")
    return p


def probe(socket_path: str, query: str, timeout: float) -> tuple[int, str]:
    """(exit code, one-line message)."""
    channel = unix_channel(socket_path)
    try:
        reply = agent_pb2_grpc.AgentStub(channel).HealthCheck(agent_pb2.HealthCheckRequest(query=query),
                                                               timeout=timeout)
    except grpc.RpcError as err:
        return 1, f"unhealthy: cannot reach cri-resmgr-agent on {socket_path}: {rpc_error_text(err)}"
    finally:
        channel.close()
    if reply.error:
        return 1, "unhealthy: " + " ".join(reply.error.split())
    return 0, f"ok: {query or 'agent'} healthy"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rc, message = probe(args.agent_socket, args.query, args.timeout)
    (sys.stdout if rc == 0 else sys.stderr).write(message + "\n")
    return rc
