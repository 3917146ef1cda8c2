"""The client cri-resmgr uses to ask cri-resmgr-agent for cluster operations on its node (no grpcio)."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf.message import Message

from resmgr.proto import agent_pb2
from resmgr.rpc.unixrpc import RpcError, UnaryClient

PATCH_TYPES = ("strategic", "merge", "json")
AGENT_SERVICE = agent_pb2.DESCRIPTOR.services_by_name["Agent"]


class AgentError(RuntimeError):
    """The agent could not be reached or refused the operation; the message says which."""


class AgentClient:
    def __init__(self, socket_path: str, *, timeout: float = 10.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._client = UnaryClient(socket_path)

    def close(self) -> None:
        self._client.close()

    def _call(self, name: str, request: Message) -> Any:
        try:
            return self._client.call_method(AGENT_SERVICE, name, request, self.timeout)
        except RpcError as err:
            raise AgentError(f"{name} on agent socket {self.socket_path}: {err}") from None

    def get_node(self) -> dict[str, Any]:
        return json.loads(self._call("GetNode", agent_pb2.GetNodeRequest()).node_json)

    def patch_node(self, patch: dict[str, Any] | list[Any], patch_type: str = "strategic") -> None:
        if patch_type not in PATCH_TYPES:
            raise ValueError(f"unknown patch type {patch_type!r}; use one of {', '.join(PATCH_TYPES)}")
        self._call("PatchNode", agent_pb2.PatchNodeRequest(patch_type=patch_type, patch=json.dumps(patch).encode()))

    def update_node_capacity(self, capacities: dict[str, str]) -> None:
        self._call("UpdateNodeCapacity", agent_pb2.UpdateNodeCapacityRequest(capacities=capacities))

    def set_node_resources(self, wanted: dict[str, Any]) -> None:
        """Publish exactly ``wanted`` ({"capacity", "labels", "taints"}, see Policy.node_resources) on the node."""
        taints = [agent_pb2.NodeTaint(key=t["key"], value=t.get("value", ""), effect=t["effect"])
                  for t in wanted.get("taints", [])]
        self._call("SetNodeResources", agent_pb2.SetNodeResourcesRequest(
            capacity=wanted.get("capacity", {}), labels=wanted.get("labels", {}), taints=taints))

    def health_check(self, query: str = "") -> str:
        """"" when healthy, else the agent's one-line reason."""
        return self._call("HealthCheck", agent_pb2.HealthCheckRequest(query=query)).error
