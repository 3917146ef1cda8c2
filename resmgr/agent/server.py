"""The Agent gRPC service (resmgr/proto/agent.proto) that cri-resmgr calls on --agent-socket."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import grpc
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from resmgr.agent.node_resources import NodeResources, NodeResourcesError, capacity_problem, publish_node_resources
from resmgr.agent.unix_grpc import serve_unix
from resmgr.proto import agent_pb2, agent_pb2_grpc

log = logging.getLogger("resmgr.agent")

PATCH_CONTENT_TYPES = {
    "": "application/strategic-merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
}


def _abort_api(context: grpc.ServicerContext, what: str, exc: ApiException) -> None:
    code = {404: grpc.StatusCode.NOT_FOUND, 403: grpc.StatusCode.PERMISSION_DENIED,
            422: grpc.StatusCode.INVALID_ARGUMENT, 400: grpc.StatusCode.INVALID_ARGUMENT,
            409: grpc.StatusCode.ABORTED}.get(exc.status or 0, grpc.StatusCode.UNAVAILABLE)
    detail = exc.body if isinstance(exc.body, str) and exc.body else exc.reason
    context.abort(code, f"{what}: HTTP {exc.status}: {detail}")


class AgentServicer(agent_pb2_grpc.AgentServicer):
    def __init__(self, api: client.ApiClient, node: str, health: Callable[[str], str]) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.node = node
        self.health = health

    def GetNode(self, request: agent_pb2.GetNodeRequest, context: grpc.ServicerContext) -> agent_pb2.GetNodeReply:
        try:
            resp = self.core.read_node(self.node, _preload_content=False)
        except ApiException as exc:
            _abort_api(context, f"get node {self.node}", exc)
        return agent_pb2.GetNodeReply(node_json=resp.data.decode())

    def _decode_patch(self, raw: bytes, patch_type: str, context: grpc.ServicerContext) -> tuple[object, str]:
        content_type = PATCH_CONTENT_TYPES.get(patch_type)
        if content_type is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"unknown patch_type {patch_type!r}; use strategic, merge or json")
        try:
            body = json.loads(raw)
        except ValueError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"patch is not valid JSON: {exc}")
        want = list if patch_type == "json" else dict
        if not isinstance(body, want):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"a {patch_type or 'strategic'} patch must be a JSON {'array' if want is list else 'object'}")
        return body, content_type

    def PatchNode(self, request: agent_pb2.PatchNodeRequest, context: grpc.ServicerContext
                  ) -> agent_pb2.PatchNodeReply:
        body, content_type = self._decode_patch(request.patch, request.patch_type, context)
        try:
            self.core.patch_node(self.node, body, _content_type=content_type)
        except ApiException as exc:
            _abort_api(context, f"patch node {self.node}", exc)
        log.info("patched node %s on behalf of cri-resmgr", self.node)
        return agent_pb2.PatchNodeReply()

    def UpdateNodeCapacity(self, request: agent_pb2.UpdateNodeCapacityRequest, context: grpc.ServicerContext
                           ) -> agent_pb2.UpdateNodeCapacityReply:
        problem = capacity_problem(dict(request.capacities))
        if problem:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, problem)
        patch = {"status": {"capacity": dict(request.capacities)}}
        try:
            self.core.patch_node_status(self.node, patch, _content_type=PATCH_CONTENT_TYPES["merge"])
        except ApiException as exc:
            _abort_api(context, f"update capacity of node {self.node}", exc)
        return agent_pb2.UpdateNodeCapacityReply()

    def SetNodeResources(self, request: agent_pb2.SetNodeResourcesRequest, context: grpc.ServicerContext
                         ) -> agent_pb2.SetNodeResourcesReply:
        wanted = NodeResources(capacity=dict(request.capacity), labels=dict(request.labels),
                               taints=[{"key": t.key, "value": t.value, "effect": t.effect} for t in request.taints])
        try:
            publish_node_resources(self.core, self.node, wanted)
        except NodeResourcesError as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except ApiException as exc:
            _abort_api(context, f"publish resources of node {self.node}", exc)
        return agent_pb2.SetNodeResourcesReply()

    def HealthCheck(self, request: agent_pb2.HealthCheckRequest, context: grpc.ServicerContext
                    ) -> agent_pb2.HealthCheckReply:
        return agent_pb2.HealthCheckReply(error=self.health(request.query))


def serve_agent(servicer: AgentServicer, socket_path: str) -> grpc.Server:
    return serve_unix(lambda s: agent_pb2_grpc.add_AgentServicer_to_server(servicer, s), socket_path, "agent")
