"""Gardener's extension heartbeat: renew the Lease gardener-extension-heartbeat."""

from __future__ import annotations

import datetime as dt
import logging

from kubernetes import client

from extension import constants as c
from extension.gardener.kube import Apis, is_conflict, is_not_found

log = logging.getLogger("extension.heartbeat")


def renew(apis: Apis, namespace: str, holder: str, interval_seconds: int) -> client.V1Lease:
    """Create or renew the heartbeat Lease; renewTime is now, duration is the renew interval."""
    now = dt.datetime.now(dt.UTC)
    try:
        lease = apis.coordination.read_namespaced_lease(c.HEARTBEAT_LEASE_NAME, namespace)
    except Exception as err:
        if not is_not_found(err):
            raise
        body = client.V1Lease(
            metadata=client.V1ObjectMeta(name=c.HEARTBEAT_LEASE_NAME, namespace=namespace),
            spec=client.V1LeaseSpec(holder_identity=holder, lease_duration_seconds=interval_seconds,
                                    renew_time=now))
        try:
            return apis.coordination.create_namespaced_lease(namespace, body)
        except Exception as err2:
            if not is_conflict(err2):
                raise
            lease = apis.coordination.read_namespaced_lease(c.HEARTBEAT_LEASE_NAME, namespace)
    lease.spec.holder_identity = holder
    lease.spec.lease_duration_seconds = interval_seconds
    lease.spec.renew_time = now
    # replace carries the resourceVersion: a concurrent writer makes this fail and retry next round.
    return apis.coordination.replace_namespaced_lease(c.HEARTBEAT_LEASE_NAME, namespace, lease)
