"""The static-plus policy: isolated CPUs first, exclusive CPUs for whole-CPU requests of any QoS, the fraction
on the shared pool, kube-system on the reserved CPUs, overflow onto the reserved CPUs, cache restore."""

from __future__ import annotations

import pytest
from unit.resmgr.policy_helpers import burstable, ctr, guaranteed, policy_from_yaml

from resmgr.config import ConfigError
from resmgr.policy.base import RestoreError
from resmgr.topology import Topology

PLUS = "policy:\n  Active: static-plus\n  ReservedResources:\n    cpu: {reserved}\n"
OPT_OUT = {"prefer-isolated-cpus.cri-resource-manager.intel.com": "false"}


def test_reserved_cpus_as_upstream(all_topologies: dict[str, Topology]) -> None:
    topo = all_topologies["2s-2n-16c-2t"]
    assert policy_from_yaml(PLUS.format(reserved="750m"), topo).reserved == {0}  # one CPU: CPU 0
    two = policy_from_yaml(PLUS.format(reserved=2), topo).reserved
    assert len(two) == 2 and not two & topo.isolated
    with pytest.raises(ConfigError, match="isolated"):
        policy_from_yaml(PLUS.format(reserved="cpuset:5,6"), topo)
    assert policy_from_yaml(PLUS.format(reserved="cpuset:8,9"), topo).reserved == {8, 9}
    with pytest.raises(ConfigError, match="ReservedResources.cpu.*reserved CPUs"):
        policy_from_yaml("policy:\n  Active: static-plus\n", topo)


def test_isolated_first_unless_opted_out(all_topologies: dict[str, Topology]) -> None:
    topo = all_topologies["tiny-2n-2c-2t"]
    p = policy_from_yaml(PLUS.format(reserved=1), topo)
    assert p.isolated_cpus == {3, 7} and p.reserved == {0}
    p.allocate("iso", guaranteed("iso", 2000))
    assert p.grants["iso"].kind == "isolated" and p.placement("iso")[0] == {3, 7}
    p.allocate("out", guaranteed("out", 2000, annotations=OPT_OUT))
    out = p.placement("out")[0]
    assert p.grants["out"].kind == "exclusive" and len(out) == 2 and not out & {0, 3, 7}
    p.release("iso")
    p.allocate("iso2", burstable("iso2", 1000))  # any QoS with a whole CPU gets exclusive CPUs
    assert p.grants["iso2"].kind == "isolated" and len(p.placement("iso2")[0]) == 1


def test_fraction_follows_shared_pool_and_kube_system_reserved(all_topologies: dict[str, Topology]) -> None:
    topo = all_topologies["tiny-2n-2c-2t"]
    p = policy_from_yaml(PLUS.format(reserved=1), topo)
    shared_all = topo.online - {0, 3, 7}
    p.allocate("be", ctr("be"))
    p.allocate("sys", ctr("sys", ns="kube-system"))
    assert p.placement("be")[0] == shared_all and p.placement("sys")[0] == {0}
    p.allocate("mixed", burstable("mixed", 2500, annotations=OPT_OUT))
    grant = p.grants["mixed"]
    assert grant.kind == "exclusive" and len(grant.exclusive) == 2 and grant.shared_milli == 500
    shared = shared_all - grant.exclusive
    assert p.placement("mixed")[0] == grant.exclusive | shared
    assert p.placement("be")[0] == shared
    assert p.group_of("mixed") is not None and p.group_of("sys") is None
    before = p.group_state()
    p.allocate("more", guaranteed("more", 1000, annotations=OPT_OUT))
    assert p.group_state() != before  # the mixed container's cpuset moves with the shared pool
    assert p.placement("mixed")[0] == grant.exclusive | (shared - p.grants["more"].exclusive)


def test_overflow_onto_reserved(all_topologies: dict[str, Topology]) -> None:
    topo = all_topologies["this-machine"]  # CPUs 0 (reserved) and 1
    p = policy_from_yaml(PLUS.format(reserved=1), topo)
    p.allocate("b1", burstable("b1", 600))
    assert p.placement("b1")[0] == {1}
    p.allocate("b2", burstable("b2", 600))  # 1200 mCPU on one shared CPU: the reserved CPU helps out
    assert p.placement("b1")[0] == p.placement("b2")[0] == {0, 1}
    p.release("b2")
    assert p.placement("b1")[0] == {1}
    p.allocate("g", guaranteed("g", 1000))  # the last shared CPU goes exclusive: shared containers use reserved
    assert p.placement("g")[0] == {1} and p.placement("b1")[0] == {0}
    p.allocate("g2", guaranteed("g2", 1000))  # nothing left: shared, with a warning
    assert p.grants["g2"].kind == "shared" and p.placement("g2")[0] == {0}


def test_restore(all_topologies: dict[str, Topology]) -> None:
    topo = all_topologies["tiny-2n-2c-2t"]
    p = policy_from_yaml(PLUS.format(reserved=1), topo)
    p.allocate("iso", guaranteed("iso", 1000))
    p.allocate("ex", burstable("ex", 1500, annotations=OPT_OUT))
    p.allocate("be", ctr("be"))
    state = p.export_state()
    q = policy_from_yaml(PLUS.format(reserved=1), topo)
    q.restore_state(state, dict(p.containers))
    assert q.placements() == p.placements()
    assert q.placement("be")[0] == p.placement("be")[0]
    q.allocate("iso2", guaranteed("iso2", 1000))
    assert q.grants["iso2"].exclusive.isdisjoint(p.grants["iso"].exclusive)
    # The cached exclusive CPU is reserved under the new config: the cache does not fit.
    r = policy_from_yaml(PLUS.format(reserved=f"cpuset:{','.join(map(str, sorted(p.grants['ex'].exclusive)))}"),
                         topo)
    with pytest.raises(RestoreError):
        r.restore_state(state, dict(p.containers))
