"""Resource manager + real containerd: the policy's decisions end up in the host cgroups.

Decisions are made on the fake sysfs tree of this machine's shape (2 CPUs, one NUMA node,
built by test/fixtures/sysfs_builder.py), so the cpusets are valid for the real cgroups that
enforce them. Pods are shaped like kubelet's Guaranteed, Burstable and BestEffort pods (cgroup
parent per QoS class, CPU shares/quota, memory limit). The tests parametrized over ``frontend`` run
through the relay (on the session's containerd) and as containerd 2's NRI plugin, with the same expectations:
through NRI, a container's own placement comes with its create's adjustment and the moves of others as NRI
updates (in the event's answer, or through UpdateContainers).
"""

from __future__ import annotations

import statistics

import pytest
from fixtures.placement import FRONTENDS, NRI

from devland.waiting import eventually
from resmgr.topology import format_cpuset, parse_cpuset

pytestmark = pytest.mark.integration

STATIC = "policy:\n  Active: static\n  ReservedResources:\n    cpu: 1\n"


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_none_policy_leaves_every_container_on_the_whole_node(node_factory) -> None:
    node = node_factory("policy:\n  Active: none\n")
    cids = [node.run("g", "guaranteed"), node.run("bu", "burstable"),
            node.run("sys", "besteffort", namespace="kube-system")]
    assert node.rm.policy.name == "none"
    assert node.cgroups(cids) == dict.fromkeys(cids, ("0-1", "0"))
    assert node.in_sync(cids)


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_static_policy_exclusive_and_shared_updates(node_factory, frontend: str) -> None:
    node = node_factory(STATIC)
    reserved = format_cpuset(node.rm.policy.reserved)
    be = node.run("be", "besteffort")
    bu = node.run("bu", "burstable")
    assert node.cgroups([be, bu]) == {be: ("0-1", "0"), bu: ("0-1", "0")}
    g = node.run("g", "guaranteed")
    exclusive = format_cpuset(node.rm.policy.grants[g].exclusive)
    assert exclusive != reserved and len(exclusive) == 1
    assert node.containerd.cgroup_cpuset(g) == exclusive
    # The shared containers were moved off the exclusive CPU: by UpdateContainerResources through the relay, by
    # the updates in CreateContainer's answer through NRI.
    assert eventually(lambda: node.cgroups([be, bu]) == {be: (reserved, "0"), bu: (reserved, "0")})
    assert node.in_sync([be, bu, g])
    if frontend == NRI:
        creates = [s * 1000 for m, s in node.decisions if m == "CreateContainer"]
        print(f"\nNRI CreateContainer decision latency: n={len(creates)} "
              f"median={statistics.median(creates):.3f} ms max={max(creates):.3f} ms")
    # Freeing the exclusive CPU hands it back to the shared pool.
    node.remove(g)
    assert eventually(lambda: node.cgroups([be, bu]) == {be: ("0-1", "0"), bu: ("0-1", "0")})


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_topology_aware_pins_memory_and_reserves_kube_system(node_factory) -> None:
    node = node_factory("policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: cpuset:0\n")
    sys_ctr = node.run("sys", "burstable", namespace="kube-system")
    be = node.run("be", "besteffort")
    assert node.cgroups([sys_ctr]) == {sys_ctr: ("0", "0")}
    assert node.cgroups([be]) == {be: ("1", "0")}
    g = node.run("g", "guaranteed")  # the only non-reserved CPU is taken by the shared pool's users
    assert eventually(lambda: node.in_sync([sys_ctr, be, g]))


def test_topology_aware_full_node_never_shares_exclusive_cpus(node_factory) -> None:
    """The 2-CPU node of issue 17: 750m reserved (CPU 0), a Guaranteed pod, then Burstable and
    BestEffort ones. No container's host cpuset may hold another's exclusive CPU; an unset cpuset
    would be the whole node."""
    node = node_factory("policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: 750m\n")
    g = node.run("g", "guaranteed")
    bu = node.run("bu", "burstable")
    be = node.run("be", "besteffort")
    cids = [g, bu, be]
    assert eventually(lambda: node.in_sync(cids))
    host = {cid: parse_cpuset(node.containerd.cgroup_cpuset(cid)) for cid in cids}
    for owner, cpus in node.rm.policy.exclusive_sets().items():
        for cid in cids:
            assert cid == owner or not cpus & host[cid], f"{cid} runs on {owner}'s exclusive CPUs {cpus}"
    # As upstream, the last shared CPU is not sliced off: all three share CPU 1, off the reserved CPU 0.
    assert host == {g: {1}, bu: {1}, be: {1}}
    sys_ctr = node.run("sys", "burstable", namespace="kube-system")
    assert node.cgroups([sys_ctr]) == {sys_ctr: ("0", "0")}


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_balloons_seed_style_config(node_factory) -> None:
    node = node_factory("""\
policy:
  Active: balloons
  ReservedResources:
    CPU: cpuset:0
  balloons:
    BalloonTypes:
      - Name: small
        MinCPUs: 1
        MaxCPUs: 1
        MinBalloons: 1
        Namespaces: [small]
""")
    s = node.run("s", "burstable", namespace="small")
    sys_ctr = node.run("sys", "besteffort", namespace="kube-system")
    assert node.cgroups([s, sys_ctr]) == {s: ("1", "0"), sys_ctr: ("0", "0")}
    assert node.in_sync([s, sys_ctr])


def test_restart_restores_drops_and_adopts(node_factory) -> None:
    node = node_factory(STATIC)
    be = node.run("be", "besteffort")
    g = node.run("g", "guaranteed")
    assert eventually(lambda: node.in_sync([be, g]))
    before = node.rm.placements()
    node.stop()
    # While the relay is down: one container goes away, another appears behind our back.
    node.remove(g, direct=True)
    stranger = node.run("stranger", "besteffort", direct=True)
    node.start()
    placements = node.rm.placements()
    assert g not in placements and stranger in placements
    assert placements[be] != before[be]  # the exclusive CPU returned to the shared pool
    assert eventually(lambda: node.in_sync([be, stranger]))
    assert node.cgroups([be, stranger]) == {be: ("0-1", "0"), stranger: ("0-1", "0")}
