"""Exited containers give their resources back (issue 26, item 1), in cri-resource-manager's scenarios.

kubelet sends no StopContainer or RemoveContainer when a container exits; the relay learns of exits from
the runtime's ListContainers answers and calls ``containers_exited``, and a CreateContainer of a container
the pod already has by name (a restart) releases the older instance. The scenarios are upstream's e2e
tests: topology-aware n4c16 test00 (pod3: five 5-CPU init containers) and test09 (container exit and
restart), and balloons n4c32 test01 (three 100m init containers in front of a 3-CPU container).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cri_api.v1 import api_pb2
from fixtures.sysfs_builder import Shape, build_sysfs
from unit.resmgr.rm_driver import Driver

from resmgr.model.state import Lifecycle, StateError
from resmgr.topology import Topology, discover_topology, parse_cpuset

# Upstream's n4c16 e2e VM: 2 packages x 2 NUMA nodes x 2 cores x 2 threads; its topology-aware config.
N4C16 = Shape(packages=2, nodes_per_package=2, cores_per_node=2, threads_per_core=2)
TOPOLOGY_AWARE = "policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 750m\n"
# A 2-CPU node that can grant one exclusive CPU: CPU 0 reserved, CPU 1 for a Guaranteed container.
STATIC_2CPU = "policy:\n  Active: static\n  ReservedResources:\n    cpu: 1\n"
BALLOONS_DYNAMIC = """\
policy:
  Active: balloons
  ReservedResources:
    cpu: cpuset:0
  balloons:
    BalloonTypes:
      - Name: dynamic
        MaxCPUs: 32
        MaxBalloons: 8
"""
BALLOON_ANNOTATION = {"balloon.balloons.cri-resource-manager.intel.com": "dynamic"}


@pytest.fixture(scope="module")
def n4c16(tmp_path_factory: pytest.TempPathFactory) -> Topology:
    return discover_topology(build_sysfs(tmp_path_factory.mktemp("sysfs") / "n4c16", N4C16))


def exited(d: Driver, *cids: str) -> None:
    """The runtime lists these containers as exited: what the relay's exit watcher hands over."""
    d.runtime.apply(d.rm.containers_exited(list(cids)))


def in_sync(d: Driver) -> bool:
    """The runtime holds what the policy decided, for every container that holds resources."""
    placements = d.rm.placements()
    return {c: v for c, v in d.runtime_view().items() if c in placements} == placements


def cpus_of(d: Driver, cid: str) -> set[int]:
    return parse_cpuset(d.runtime.cpusets[cid][0])


def test_init_containers_free_their_cpus_for_the_next_and_the_app_containers(n4c16: Topology,
                                                                             tmp_path: Path) -> None:
    """Upstream n4c16 test00 pod3: 5 init containers of 5 CPUs each run one after the other, then two
    5-CPU app containers. Each init container's CPUs are free again once it exited: the app containers
    get disjoint CPUs on disjoint NUMA nodes and packages (without the release they share leftovers)."""
    d = Driver(n4c16, tmp_path, TOPOLOGY_AWARE)
    pod = d.run_pod("pod3", qos="guaranteed")
    inits = []
    for i in range(5):
        init = d.create(pod, f"pod3c{i}i", 5000)
        assert init is not None
        inits.append(init)
        exited(d, init)
    c0, c1 = d.create(pod, "pod3c0", 5000), d.create(pod, "pod3c1", 5000)
    assert c0 and c1
    cpus = {c: cpus_of(d, c) for c in (c0, c1)}
    assert not cpus[c0] & cpus[c1]
    nodes = {c: n4c16.nodes_of(cpus[c]) for c in (c0, c1)}
    assert not nodes[c0] & nodes[c1]
    packages = {c: {n4c16.cpus[cpu].package for cpu in cpus[c]} for c in (c0, c1)}
    assert not packages[c0] & packages[c1]
    assert in_sync(d)
    assert all(init in d.rm.containers and init not in d.rm.policy.containers for init in inits)


def node(name: str, topologies: dict[str, Topology], n4c16: Topology, tmp_path: Path) -> Driver:
    """static on this machine's 2 CPUs (CPU 0 reserved, CPU 1 exclusive), or topology-aware on upstream's n4c16."""
    if name == "static-2cpu":
        return Driver(topologies["this-machine"], tmp_path, STATIC_2CPU)
    return Driver(n4c16, tmp_path, TOPOLOGY_AWARE)


NODES = ["static-2cpu", "topology-aware-n4c16"]


@pytest.mark.parametrize("name", NODES)
def test_a_crash_looping_guaranteed_container_keeps_one_exclusive_set(name: str, topologies: dict[str, Topology],
                                                                      n4c16: Topology, tmp_path: Path) -> None:
    """Upstream n4c16 test09: a Guaranteed 1-CPU container crashes and is restarted (a new instance, same
    name) again and again; every instance gets an exclusive CPU, and only the newest holds one."""
    d = node(name, topologies, n4c16, tmp_path)
    be = d.create(d.run_pod("be"), "be")
    pod = d.run_pod("pod0", qos="guaranteed")
    instances = []
    for restart in range(3):
        cid = d.create(pod, "pod0c0", 1000)
        assert cid is not None
        instances.append(cid)
        owned = d.rm.policy.exclusive_sets()
        assert list(owned) == [cid], f"restart {restart}: exclusive sets {owned}"
        assert len(owned[cid]) == 1 and cpus_of(d, cid) == owned[cid]
        assert not cpus_of(d, be) & owned[cid]
        exited(d, cid)  # the crash: the next relist lists it as exited
        assert not cpus_of(d, be) & owned[cid] or len(cpus_of(d, be)) > 1  # the CPU went back to the shared pool
        assert in_sync(d)
    assert not set(instances) & set(d.rm.policy.containers)
    # As upstream's test09 ends: the container completed, and holds nothing.
    assert d.rm.policy.exclusive_sets() == {}


@pytest.mark.parametrize("name", NODES)
def test_re_creation_releases_the_older_instance_whose_exit_was_not_seen(name: str, topologies: dict[str, Topology],
                                                                          n4c16: Topology, tmp_path: Path) -> None:
    """kubelet restarted the container before a relist showed its exit: CreateContainer of the same name in
    the same pod releases the older instance first ("re-creation of container ..., releasing old one")."""
    d = node(name, topologies, n4c16, tmp_path)
    other = d.run_pod("other", qos="guaranteed")
    pod = d.run_pod("pod0", qos="guaranteed")
    first = d.create(pod, "pod0c0", 1000)
    assert first is not None and list(d.rm.policy.exclusive_sets()) == [first]
    second = d.create(pod, "pod0c0", 1000)
    assert second is not None
    owned = d.rm.policy.exclusive_sets()
    assert list(owned) == [second] and cpus_of(d, second) == owned[second]
    assert first in d.rm.containers and first not in d.rm.policy.containers
    assert in_sync(d)
    # Only the same pod's container of that name: another pod's is another container.
    third = d.create(other, "pod0c0", 1000)
    assert third is not None and second in d.rm.policy.containers and second in d.rm.policy.exclusive_sets()
    # The release is in the cache: a restart does not allocate the older instance again.
    restored = d.new_rm()
    assert first not in restored.policy.containers
    assert restored.policy.grants == d.rm.policy.grants


def test_init_containers_do_not_inflate_the_balloon(topologies: dict[str, Topology], tmp_path: Path) -> None:
    """Upstream balloons n4c32 test01: a pod with three 100m init containers and a 3-CPU container in a
    dynamic balloon. The init containers have exited when the app container comes: its balloon has 3 CPUs,
    not 4 (3 + 3 x 100m)."""
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, BALLOONS_DYNAMIC)
    pod = d.run_pod("pod0", qos="guaranteed", annotations=BALLOON_ANNOTATION)
    for i in range(3):
        init = d.create(pod, f"pod0c{i}-init", 100)
        assert init is not None
        exited(d, init)
    app = d.create(pod, "pod0c0", 3000)
    assert app is not None
    assert len(cpus_of(d, app)) == 3
    assert in_sync(d)


def test_exits_are_idempotent_and_ignore_what_holds_nothing(topologies: dict[str, Topology], tmp_path: Path) -> None:
    """Every relist lists the same exited containers again, and containers the manager never placed."""
    d = Driver(topologies["this-machine"], tmp_path, STATIC_2CPU)
    be = d.create(d.run_pod("be"), "be")
    g = d.create(d.run_pod("g", qos="guaranteed"), "g", 1000)
    assert g is not None and d.runtime.cpusets[be][0] == "0"
    updates = d.rm.containers_exited([g, "never-seen"])
    assert [(u.container_id, u.cpuset_cpus) for u in updates] == [(be, "0-1")]
    d.runtime.apply(updates)
    assert d.rm.containers_exited([g, "never-seen"]) == []
    # Stop and remove still work on the exited container (kubelet's garbage collection, much later).
    d.remove_container(g)
    assert g not in d.rm.containers
    assert in_sync(d)


def test_drift_check_counts_a_placed_container_that_exited(topologies: dict[str, Topology], tmp_path: Path) -> None:
    """The periodic drift check is the backstop when no relist came through the relay: a known container the
    runtime lists as exited but which still holds resources is drift (and the resync releases it)."""
    d = Driver(topologies["this-machine"], tmp_path, STATIC_2CPU)
    g = d.create(d.run_pod("g", qos="guaranteed"), "g", 1000)
    assert g is not None
    pods, containers = d.runtime.listing()
    assert d.rm.runtime_drift(containers) == frozenset()
    for c in containers:
        c.state = api_pb2.CONTAINER_EXITED
    assert d.rm.runtime_drift(containers) == {g}
    d.runtime.apply(d.rm.sync_with_runtime(pods, containers))
    assert g not in d.rm.policy.containers
    assert d.rm.runtime_drift(containers) == frozenset(), "a released exited container is no drift"


def start(d: Driver, cid: str) -> None:
    d.call("StartContainer", api_pb2.StartContainerRequest(container_id=cid), api_pb2.StartContainerResponse())


def test_lifecycles_are_explicit_and_an_ended_container_cannot_be_placed_again(topologies: dict[str, Topology],
                                                                             tmp_path: Path) -> None:
    """The manager's one registry says where each container is (created, running, stopped, exited); stopped and
    exited ones hold nothing, and nothing places them again: not a policy switch, not a restart."""
    d = Driver(topologies["this-machine"], tmp_path, STATIC_2CPU)
    pod = d.run_pod("g", qos="guaranteed")
    g = d.create(pod, "g", 1000)
    be = d.create(d.run_pod("be"), "be")
    assert g is not None and be is not None
    assert d.rm.state.lifecycle(g) is Lifecycle.CREATED
    start(d, g)
    start(d, be)
    assert d.rm.state.lifecycle(g) is Lifecycle.RUNNING and d.rm.stopped() == []
    exited(d, g)
    d.call("StopContainer", api_pb2.StopContainerRequest(container_id=be), api_pb2.StopContainerResponse())
    assert (d.rm.state.lifecycle(g), d.rm.state.lifecycle(be)) == (Lifecycle.EXITED, Lifecycle.STOPPED)
    assert sorted(d.rm.stopped()) == sorted([g, be]) and not {g, be} & set(d.rm.policy.containers)
    with pytest.raises(StateError):
        d.rm.state.place(g, d.rm.containers[g])
    again = d.create(pod, "g", 1000)  # kubelet restarts it: a new instance, the exited one stays exited
    assert again is not None and d.rm.state.lifecycle(g) is Lifecycle.EXITED
    # A policy switch places the live containers only.
    d.runtime.apply(d.rm.set_config(d.config | {"policy": {"Active": "topology-aware"}}))
    assert set(d.rm.policy.containers) == {again} and d.rm.state.lifecycle(be) is Lifecycle.STOPPED
    # A restart brings the ended ones back as stopped, holding nothing; the runtime's listing says they exited.
    restored = d.new_rm()
    assert set(restored.policy.containers) == {again}
    switched = d.new_rm(force_config=d.config)  # another policy than the cached one: every live one re-allocated
    assert switched.policy.name == "static" and set(switched.policy.containers) == {again}
    switched.close()
    assert restored.state.lifecycle(g) is Lifecycle.STOPPED and restored.state.lifecycle(again) is Lifecycle.RUNNING
    pods, containers = d.runtime.listing()
    for c in containers:
        if c.id in (g, be):
            c.state = api_pb2.CONTAINER_EXITED
    restored.sync_with_runtime(pods, containers)
    assert (restored.state.lifecycle(g), restored.state.lifecycle(be)) == (Lifecycle.EXITED, Lifecycle.EXITED)
    assert set(restored.policy.containers) == {again}
