"""Small builders shared by the policy unit tests."""

from __future__ import annotations

from resmgr.config import validate_config_text
from resmgr.model.resources import QOS_BESTEFFORT, QOS_BURSTABLE, QOS_GUARANTEED, ContainerInfo
from resmgr.policy.base import Policy
from resmgr.policy.registry import create_policy
from resmgr.topology import Topology


def ctr(cid: str, qos: str = QOS_BESTEFFORT, milli: int = 0, *, ns: str = "default", pod: str | None = None,
        annotations: dict[str, str] | None = None, name: str | None = None) -> ContainerInfo:
    return ContainerInfo(
        id=cid, pod_id=pod or f"pod-{cid}", name=name or cid, namespace=ns, pod_name=pod or f"pod-{cid}",
        qos=qos, request_milli=milli, limit_milli=milli if qos == QOS_GUARANTEED else 0,
        memory_limit=1 << 30 if qos == QOS_GUARANTEED else 0, pod_annotations=annotations or {})


def guaranteed(cid: str, milli: int, **kw) -> ContainerInfo:
    return ctr(cid, QOS_GUARANTEED, milli, **kw)


def burstable(cid: str, milli: int, **kw) -> ContainerInfo:
    return ctr(cid, QOS_BURSTABLE, milli, **kw)


def policy_from_yaml(text: str, topology: Topology) -> Policy:
    return create_policy(validate_config_text(text), topology)
