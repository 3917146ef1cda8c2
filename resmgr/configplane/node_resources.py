"""cri-resmgr's side of publishing node resources: the active policy's ``node_resources()`` (extended
resources, labels, taints) go to cri-resmgr-agent's SetNodeResources, which makes the Node match
(resmgr/agent/node_resources.py). Sent whenever the wanted set changes, once at startup (so that
what an earlier policy published is withdrawn), and retried with backoff while the agent is away."""

from __future__ import annotations

import logging
from typing import Any, Protocol

from resmgr.relay.startup import ConfigNotice

log = logging.getLogger("resmgr.configplane")


class NodeResourcesAgent(Protocol):
    def set_node_resources(self, wanted: dict[str, Any]) -> None: ...


class NodeResourcesNotice(ConfigNotice):
    """Keeps the node's published resources equal to the active policy's ``node_resources()``."""

    what = "publish node resources"

    def __init__(self, agent: NodeResourcesAgent | None, *, max_backoff: float = 30.0) -> None:
        super().__init__(agent, max_backoff=max_backoff)  # type: ignore[arg-type]

    def _write(self, wanted: Any) -> None:
        assert self.agent is not None
        self.agent.set_node_resources(wanted)  # type: ignore[attr-defined]
        log.info("node resources published through the agent", extra={"node_resources": wanted})
