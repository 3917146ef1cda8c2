"""What every policy shares: AvailableResources and ReservedResources resolved on the topology."""

from __future__ import annotations

import pytest
from unit.resmgr.policy.upstream_topologies import n4c16
from unit.resmgr.policy_helpers import ctr, guaranteed, policy_from_yaml

from resmgr.config import ConfigError, check_config_text
from resmgr.policy.base import resolve_cpu_resources
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


def test_available_resources_from_a_cgroup_below_the_mount(tmp_path) -> None:
    """AvailableResources given as a cgroup path is read below the cgroup mount (upstream's
    policy/flags.go parseCPUFromCgroup), not as a literal path; a cgroup that has no cpuset.cpus is an error."""
    mount = tmp_path / "sys" / "fs" / "cgroup"
    (mount / "kubepods.slice").mkdir(parents=True)
    (mount / "cgroup.controllers").write_text("cpuset cpu\n")
    (mount / "kubepods.slice" / "cpuset.cpus").write_text("4-13\n")
    config = check_config_text("policy:\n  Active: topology-aware\n  AvailableResources:\n"
                               "    cpu: /kubepods.slice\n  ReservedResources:\n    cpu: 2250m\n")
    res = resolve_cpu_resources(config.sections.policy, n4c16(), sysfs_root=tmp_path)
    assert res.available == set(range(4, 14)) and res.reserved == {4, 5, 6}
    with pytest.raises(ConfigError, match="cgroup '/nope' has no cpuset.cpus"):
        resolve_cpu_resources(check_config_text(
            "policy:\n  Active: static\n  AvailableResources:\n    cpu: cgroup:/nope\n").sections.policy, n4c16(),
            sysfs_root=tmp_path)
