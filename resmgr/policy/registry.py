"""The policies this cri-resmgr can run, by the name used in ``policy.Active``."""

from __future__ import annotations

from typing import Any

from resmgr.policy.balloons import BalloonsPolicy
from resmgr.policy.base import Policy
from resmgr.policy.dynamic_pools import DynamicPoolsPolicy
from resmgr.policy.none import NonePolicy
from resmgr.policy.podpools import PodpoolsPolicy
from resmgr.policy.static import StaticPolicy
from resmgr.policy.static_plus import StaticPlusPolicy
from resmgr.policy.static_pools import StaticPoolsPolicy
from resmgr.policy.topology_aware import TopologyAwarePolicy
from resmgr.topology.model import Topology

_POLICIES: dict[str, type[Policy]] = {
    p.name: p for p in (NonePolicy, StaticPolicy, TopologyAwarePolicy, BalloonsPolicy, DynamicPoolsPolicy,
                        PodpoolsPolicy, StaticPlusPolicy, StaticPoolsPolicy)
}


def available_policies() -> dict[str, str]:
    """Policy name -> one-line description (for ``--list-policies``)."""
    return {name: cls.description for name, cls in _POLICIES.items()}


def active_policy_name(config: dict[str, Any]) -> str:
    return str(config.get("policy", {}).get("Active") or "none")


def create_policy(config: dict[str, Any], topology: Topology, *, sysfs_root: str = "/") -> Policy:
    """Instantiate the policy ``config`` selects; raises ConfigError naming the bad field."""
    name = active_policy_name(config)
    cls = _POLICIES.get(name)
    if cls is None:
        from resmgr.config import ConfigError

        raise ConfigError("policy.Active", f"unknown policy {name!r}; available: {', '.join(_POLICIES)}")
    return cls(topology=topology, config=config, sysfs_root=sysfs_root)
