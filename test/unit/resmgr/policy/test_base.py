"""What every policy shares: AvailableResources and ReservedResources resolved on the topology."""

from __future__ import annotations

from unit.resmgr.policy_helpers import ctr, guaranteed, policy_from_yaml

from resmgr.topology import Topology, parse_cpuset


def test_available_resources_limit_everything(topologies: dict[str, Topology]) -> None:
    topo = topologies["2s-2n-16c-2t"]
    text = ("policy:\n  Active: topology-aware\n  AvailableResources:\n    cpu: cpuset:16-31,80-95\n"
            "  ReservedResources:\n    cpu: cpuset:16\n")
    p = policy_from_yaml(text, topo)
    allowed = parse_cpuset("16-31,80-95")
    p.allocate("g", guaranteed("g", 4000))
    p.allocate("b", ctr("b"))
    for cpus, mems in p.placements().values():
        assert cpus <= allowed and mems == {1}


def test_every_policy_keeps_the_hook_contract() -> None:
    import inspect

    from resmgr.config import POLICY_NAMES
    from resmgr.policy.base import PolicyHooks
    from resmgr.policy.registry import policy_class

    hooks = [name for name, member in vars(PolicyHooks).items()
             if inspect.isfunction(member) and not name.startswith("_")]
    assert "decide" in hooks and "placement" in hooks
    for name in POLICY_NAMES:
        cls = policy_class(name)
        assert cls is not None, name
        for hook in hooks:
            # As many parameters as the contract: the base class's bookkeeping calls every policy alike.
            assert len(inspect.signature(getattr(cls, hook)).parameters) == \
                len(inspect.signature(getattr(PolicyHooks, hook)).parameters), (cls.name, hook)
