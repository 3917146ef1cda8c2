"""The installer pod's own ServiceAccount as a Kubernetes API client (node records, the node's frontend label)."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("installer.in_cluster")


def api_client(what: str) -> Any | None:
    """A kubernetes ApiClient over the pod's ServiceAccount, or None with a warning naming ``what`` goes without
    it (outside a cluster, or without a token)."""
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException as exc:
        log.warning("%s: no in-cluster ServiceAccount (%s)", what, exc)
        return None
    return client.ApiClient(cfg)
