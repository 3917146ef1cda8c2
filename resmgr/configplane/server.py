"""The Config service (resmgr/proto/config.proto) over a ConfigPlane, served by resmgr.rpc.unixrpc."""

from __future__ import annotations

from dataclasses import asdict

from resmgr.configplane.plane import ConfigPlane
from resmgr.proto import config_pb2
from resmgr.rpc.unixrpc import UnaryServer, service_methods

CONFIG_SERVICE = config_pb2.DESCRIPTOR.services_by_name["Config"]


def set_config(plane: ConfigPlane, request: config_pb2.SetConfigRequest) -> config_pb2.SetConfigReply:
    error = plane.set_config(request.node_name, dict(request.config), request.source or "agent")
    return config_pb2.SetConfigReply(error=error)


def set_adjustment(plane: ConfigPlane, request: config_pb2.SetAdjustmentRequest) -> config_pb2.SetAdjustmentReply:
    outcomes, error = plane.set_adjustments(request.node_name, dict(request.adjustments))
    reply = config_pb2.SetAdjustmentReply(error=error)
    for name, outcome in outcomes.items():
        result = reply.results[name]
        result.error = outcome.error
        result.container_errors.update(outcome.container_errors)
        result.applied.extend(outcome.applied)
    return reply


def get_placements(plane: ConfigPlane) -> config_pb2.GetPlacementsReply:
    policy, explanations = plane.placements()
    reply = config_pb2.GetPlacementsReply(policy=policy)
    for e in explanations:
        reply.placements.add(namespace=e.namespace, pod=e.pod, pod_uid=e.pod_uid, container=e.container,
                             container_id=e.container_id, cpus=e.cpus, mems=e.mems, pool=e.pool,
                             unpinned=e.unpinned, detail=e.detail)
    return reply


def dry_run_config(plane: ConfigPlane, request: config_pb2.SetConfigRequest) -> config_pb2.DryRunConfigReply:
    dry = plane.dry_run(request.node_name, dict(request.config), request.source or "agent")
    reply = config_pb2.DryRunConfigReply(error=dry.error, policy=dry.policy, containers=dry.containers)
    for c in dry.changes:
        reply.changes.add(**asdict(c))
    return reply


def serve_config(plane: ConfigPlane, socket_path: str) -> UnaryServer:
    """Serve the Config service on the unix socket ``socket_path``."""
    methods = service_methods(CONFIG_SERVICE, {
        "SetConfig": lambda request: set_config(plane, request),
        "SetAdjustment": lambda request: set_adjustment(plane, request),
        "GetPlacements": lambda _request: get_placements(plane),
        "DryRunConfig": lambda request: dry_run_config(plane, request),
    })
    return UnaryServer(socket_path, methods, "config").start()
