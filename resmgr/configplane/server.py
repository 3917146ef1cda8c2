"""gRPC wiring of the Config service (resmgr/proto/config.proto) over a ConfigPlane."""

from __future__ import annotations

import grpc

from resmgr.configplane.plane import ConfigPlane
from resmgr.configplane.unix_grpc import serve_unix
from resmgr.proto import config_pb2, config_pb2_grpc


class ConfigServicer(config_pb2_grpc.ConfigServicer):
    def __init__(self, plane: ConfigPlane) -> None:
        self.plane = plane

    def SetConfig(self, request: config_pb2.SetConfigRequest, context: grpc.ServicerContext
                  ) -> config_pb2.SetConfigReply:
        error = self.plane.set_config(request.node_name, dict(request.config), request.source or "agent")
        return config_pb2.SetConfigReply(error=error)

    def SetAdjustment(self, request: config_pb2.SetAdjustmentRequest, context: grpc.ServicerContext
                      ) -> config_pb2.SetAdjustmentReply:
        outcomes, error = self.plane.set_adjustments(request.node_name, dict(request.adjustments))
        reply = config_pb2.SetAdjustmentReply(error=error)
        for name, outcome in outcomes.items():
            result = reply.results[name]
            result.error = outcome.error
            result.container_errors.update(outcome.container_errors)
            result.applied.extend(outcome.applied)
        return reply


def serve_config(plane: ConfigPlane, socket_path: str) -> grpc.Server:
    """Serve the Config service on the unix socket ``socket_path``."""
    return serve_unix(lambda s: config_pb2_grpc.add_ConfigServicer_to_server(ConfigServicer(plane), s),
                      socket_path, "config", max_workers=2)
