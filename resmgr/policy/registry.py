"""The policies this cri-resmgr can run, by the name used in ``policy.Active``.

A policy's module is imported only when that policy is created: a relay runs one policy, and
importing all eight cost 1.2 MB of its resident memory (``make bench-relay``'s rss_mb).
"""

from __future__ import annotations

import importlib
from typing import Any

from resmgr.model.state import NodeState
from resmgr.policy.base import Policy
from resmgr.topology.model import Topology

# policy.Active name -> "module:class". Each class's ``name`` is the key (tested).
_POLICIES: dict[str, str] = {
    "none": "resmgr.policy.none:NonePolicy",
    "static": "resmgr.policy.static:StaticPolicy",
    "topology-aware": "resmgr.policy.topology_aware:TopologyAwarePolicy",
    "balloons": "resmgr.policy.balloons:BalloonsPolicy",
    "dynamic-pools": "resmgr.policy.dynamic_pools:DynamicPoolsPolicy",
    "podpools": "resmgr.policy.podpools:PodpoolsPolicy",
    "static-plus": "resmgr.policy.static_plus:StaticPlusPolicy",
    "static-pools": "resmgr.policy.static_pools:StaticPoolsPolicy",
}


def policy_class(name: str) -> type[Policy] | None:
    """The class of the policy called ``name`` (imported now), or None if there is no such policy."""
    target = _POLICIES.get(name)
    if target is None:
        return None
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module), cls)


def available_policies() -> dict[str, str]:
    """Policy name -> one-line description (for ``--list-policies``; imports every policy)."""
    return {name: policy.description for name in _POLICIES if (policy := policy_class(name)) is not None}


def active_policy_name(config: dict[str, Any]) -> str:
    return str(config.get("policy", {}).get("Active") or "none")


def create_policy(config: dict[str, Any], topology: Topology, *, sysfs_root: str = "/",
                  state: NodeState | None = None) -> Policy:
    """Instantiate the policy ``config`` selects, placing into ``state`` (default: a new one); raises ConfigError
    naming the bad field."""
    name = active_policy_name(config)
    cls = policy_class(name)
    if cls is None:
        from resmgr.config import ConfigError

        raise ConfigError("policy.Active", f"unknown policy {name!r}; available: {', '.join(_POLICIES)}")
    return cls(topology=topology, config=config, sysfs_root=sysfs_root,
               state=state if state is not None else NodeState())
