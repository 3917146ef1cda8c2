"""cri-resmgr's configuration plane: config sources, the Config gRPC API, Adjustments, the agent client.

Wiring into the cri-resmgr command line::

    handle = start_config_plane(args, applier)   # after the relay started
    ...                                          # SIGHUP: handle.reload_force_config()
    handle.stop()                                # on shutdown

``args`` carries the flags the cri-resmgr CLI already has (``config_socket``,
``agent_socket``, ``force_config``, ``disable_agent``); ``applier`` is a
``ConfigApplier``, e.g. ``ResourceManagerApplier(resource_manager, send_updates)``.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass

from resmgr.configplane.adjustments import ContainerOverride, ContainerView
from resmgr.configplane.agent_client import AgentClient, AgentError
from resmgr.configplane.plane import ConfigApplier, ConfigPlane
from resmgr.configplane.server import serve_config
from resmgr.rpc.unixrpc import UnaryServer

__all__ = [
    "AgentClient",
    "AgentError",
    "ConfigApplier",
    "ConfigPlane",
    "ConfigPlaneHandle",
    "ContainerOverride",
    "ContainerView",
    "start_config_plane",
]

log = logging.getLogger("resmgr.configplane")


@dataclass
class ConfigPlaneHandle:
    plane: ConfigPlane
    config_socket: str
    server: UnaryServer | None
    agent: AgentClient | None

    def reload_force_config(self) -> str:
        """For SIGHUP: "" when the forced file was re-applied, else why the old config stays."""
        return self.plane.reload_force_config()

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        self.server = None
        if self.agent is not None:
            self.agent.close()


def start_config_plane(args: argparse.Namespace, applier: ConfigApplier, *, initial_source: str = "",
                       node_name: str | None = None,
                       on_agent_refused: Callable[[str], None] | None = None) -> ConfigPlaneHandle:
    """Serve the Config API on ``args.config_socket`` and connect to the agent on ``args.agent_socket``.

    With ``--disable-agent`` neither socket is used. With ``--force-config`` the API is
    served but refuses configs (so the agent can report why), and SIGHUP reloads the file.
    """
    force = getattr(args, "force_config", None) or None
    disabled = bool(getattr(args, "disable_agent", False))
    plane = ConfigPlane(applier, node_name=node_name if node_name is not None else os.environ.get("NODE_NAME", ""),
                        force_config=force, agent_disabled=disabled, initial_source=initial_source,
                        on_agent_refused=on_agent_refused)
    if disabled:
        log.info("agent disabled (--disable-agent): not serving the config API")
        return ConfigPlaneHandle(plane, args.config_socket, None, None)
    server = serve_config(plane, args.config_socket)
    agent = AgentClient(args.agent_socket)
    return ConfigPlaneHandle(plane, args.config_socket, server, agent)
