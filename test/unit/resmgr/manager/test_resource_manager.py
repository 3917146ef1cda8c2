"""The resource manager through the hook protocol: requests edited, side updates, cache, config."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from cri_api.v1 import api_pb2
from unit.resmgr.cri_requests import create_request
from unit.resmgr.rm_driver import Driver

from resmgr.config import ConfigError, validate_config_text
from resmgr.manager.cache import CACHE_VERSION, Cache, CacheError, reset_cache
from resmgr.manager.resource_manager import ResourceManager
from resmgr.topology import Topology, parse_cpuset

STATIC = "policy:\n  Active: static\n  ReservedResources:\n    cpu: cpuset:0,64\n"


TA = "policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: cpuset:0\n"


def test_create_sets_cpuset_and_updates_shared(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, STATIC)
    be = d.create(d.run_pod("be"), "c")
    assert d.runtime.cpusets[be] == ("0-127", "")
    g = d.create(d.run_pod("g", qos="guaranteed"), "c", 4000)
    exclusive = parse_cpuset(d.runtime.cpusets[g][0])
    assert len(exclusive) == 4
    # The shared container was updated through a ContainerUpdate, not left on the old pool.
    assert parse_cpuset(d.runtime.cpusets[be][0]) == set(range(128)) - exclusive
    assert d.runtime_view() == d.rm.placements()
    d.remove_container(g)
    assert d.runtime.cpusets[be][0] == "0-127"


def test_pool_containers_counts_placed_containers_per_pool(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, STATIC)
    assert d.rm.pool_containers() == []
    d.create(d.run_pod("be1"), "c")
    d.create(d.run_pod("be2"), "c")
    g = d.create(d.run_pod("g", qos="guaranteed"), "c", 4000)
    counts = dict(d.rm.pool_containers())
    pools = {d.rm.policy.grants[cid].pool for cid in d.rm.policy.grants}
    assert sum(counts.values()) == 3 and {pool for _, pool in counts} == pools
    assert all(policy == "static" for policy, _ in counts)
    d.remove_container(g)
    assert sum(n for _, n in d.rm.pool_containers()) == 2


def test_mems_pinned_by_topology_aware(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, TA)
    g = d.create(d.run_pod("g", qos="guaranteed"), "c", 2000)
    cpus, mems = d.runtime.cpusets[g]
    assert len(parse_cpuset(cpus)) == 2 and len(parse_cpuset(mems)) == 1
    sys_ctr = d.create(d.run_pod("s", namespace="kube-system", qos="burstable"), "c", 100)
    assert d.runtime.cpusets[sys_ctr] == ("0", "0")


def test_failed_create_is_released(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies["this-machine"], tmp_path, "policy:\n  Active: static\n  ReservedResources:\n    cpu: 1\n")
    be = d.create(d.run_pod("be"), "c")
    pod = d.run_pod("g", qos="guaranteed")
    req = create_request(pod, d.runtime.pods[pod], "c", cpu_milli=1000)
    result = d.rm.before("CreateContainer", req)
    d.runtime.apply(result.updates)
    assert d.runtime.cpusets[be][0] == "0"  # the shared container was shrunk for the reservation...
    d.runtime.apply(d.rm.failed("CreateContainer", req, result.call))
    assert d.runtime.cpusets[be][0] == "0-1"  # ...and the failure gave it back at once
    assert Cache(tmp_path).load().policy_data["grants"].keys() == {be}  # and the cache knows
    g = d.create(pod, "c", 1000)
    assert d.runtime.cpusets[g][0] == "1"


def test_kubelet_update_keeps_policy_cpuset(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, STATIC)
    g = d.create(d.run_pod("g", qos="guaranteed"), "c", 2000)
    before = d.runtime.cpusets[g]
    d.kubelet_update(g, "0-127")
    assert d.runtime.cpusets[g] == before
    d.kubelet_update(g, "0-127", milli=2000, guaranteed=True)  # same resources: nothing moves
    assert d.runtime.cpusets[g] == before


def test_in_place_resize(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, STATIC)
    be = d.create(d.run_pod("be"), "c")
    g = d.create(d.run_pod("g", qos="guaranteed"), "c", 2000)
    d.kubelet_update(g, milli=4000, guaranteed=True)
    assert len(parse_cpuset(d.runtime.cpusets[g][0])) == 4
    assert d.runtime_view() == d.rm.placements()  # the shared container gave up two more CPUs
    assert len(parse_cpuset(d.runtime.cpusets[be][0])) == 124
    assert d.restart() == [] and d.rm.containers[g].request_milli == 4000  # persisted after the answer


def test_restart_restores_and_reconciles(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies["8numa-256"], tmp_path, TA)
    ids = [d.create(d.run_pod(f"p{i}", qos=q), "c", m)
           for i, (q, m) in enumerate([("guaranteed", 3000), ("burstable", 500), ("besteffort", 0),
                                       ("guaranteed", 1500)])]
    state = d.rm.policy.export_state()
    placements = d.rm.placements()
    assert d.restart() == []
    assert d.rm.placements() == placements and d.rm.policy.export_state() == state
    # Without the runtime's view of the cgroups every placed container is re-applied (idempotent).
    updates = d.restart(statuses=False)
    assert sorted(u.container_id for u in updates) == sorted(ids)
    assert d.runtime_view() == placements == d.rm.placements()
    # A cgroup changed behind our back is put back.
    d.runtime.cpusets[ids[1]] = ("0-255", d.runtime.cpusets[ids[1]][1])
    assert [u.container_id for u in d.restart()] == [ids[1]]
    assert d.runtime_view() == placements
    # A container vanished while we were down, and one appeared that we never saw.
    gone = ids[0]
    for m in (d.runtime.cpusets, d.runtime.container_pod, d.runtime.container_name):
        m.pop(gone)
    d.runtime.cpusets["stranger"] = ("", "")
    d.runtime.container_pod["stranger"] = "pod-p1"
    d.runtime.container_name["stranger"] = "sidecar"
    d.restart()
    assert gone not in d.rm.placements() and "stranger" in d.rm.placements()
    assert d.runtime_view() == d.rm.placements()
    on_disk = Cache(tmp_path).load()
    assert gone not in on_disk.containers and "stranger" in on_disk.containers


def test_bad_config_rejected_previous_kept(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, STATIC)
    d.create(d.run_pod("g", qos="guaranteed"), "c", 2000)
    placements = d.rm.placements()
    bad = [
        ("policy:\n  Active: static\n  AvailableResources:\n    cpu: cpuset:0-500\n", "policy.AvailableResources.cpu"),
        ("policy:\n  Active: static\n  ReservedResources:\n    cpu: 200\n", "policy.ReservedResources.cpu"),
        # Another policy that does not fit the node is refused like any bad config (switching: test_rm_applier).
        ("policy:\n  Active: balloons\n  ReservedResources:\n    cpu: cpuset:0-500\n", "policy.ReservedResources.cpu"),
    ]
    for text, field in bad:
        with pytest.raises(ConfigError) as info:
            d.rm.set_config(validate_config_text(text), source="agent")
        assert info.value.field == field
        assert d.rm.config == d.config and d.rm.placements() == placements
    with pytest.raises(ConfigError) as info:
        validate_config_text("policy:\n  Active: nonesuch\n")
    assert info.value.field == "policy.Active"
    # A good change re-places containers and is persisted.
    updates = d.rm.set_config(validate_config_text(STATIC.replace("cpuset:0,64", "cpuset:0-1,64-65")), source="agent")
    assert Cache(tmp_path).load().config["policy"]["ReservedResources"] == {"cpu": "cpuset:0-1,64-65"}
    d.runtime.apply(updates)
    assert d.runtime_view() == d.rm.placements()


def test_policy_switch_at_startup(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, STATIC)
    g = d.create(d.run_pod("g", qos="guaranteed"), "c", 2000)
    d.config = validate_config_text(TA)
    # With --disable-policy-switch the cached policy stays.
    d.restart(disable_policy_switch=True)
    assert d.rm.policy.name == "static"
    d.restart()
    assert d.rm.policy.name == "topology-aware"
    assert len(parse_cpuset(d.runtime.cpusets[g][0])) == 2 and d.runtime.cpusets[g][1]


def test_force_config_wins_and_blocks_updates(topologies: dict[str, Topology], tmp_path: Path) -> None:
    topo = topologies["2s-2n-16c-2t"]
    rm = ResourceManager(topo, relay_dir=tmp_path, fallback_config=validate_config_text(STATIC),
                         force_config=validate_config_text(TA), cache_fsync=False)
    assert rm.policy.name == "topology-aware" and rm.config_source == "force-config"
    with pytest.raises(ConfigError, match="forced config"):
        rm.set_config(validate_config_text(TA))


def test_startup_files_feed_the_resource_manager(sysfs_roots: dict[str, Path], tmp_path: Path) -> None:
    from resmgr.config.files import StartupConfigs
    from resmgr.topology import discover_topology

    def start(relay_dir: Path, fallback_path: str) -> ResourceManager:
        files = StartupConfigs.load(None, fallback_path)
        return ResourceManager(discover_topology(sysfs_roots["8numa-256"]), relay_dir=relay_dir,
                               fallback_config=files.fallback_config, sysfs_root=str(sysfs_roots["8numa-256"]))

    fallback = tmp_path / "fallback.cfg"
    fallback.write_text(TA)
    rm = start(tmp_path / "state", str(fallback))
    assert rm.policy.name == "topology-aware" and len(rm.topology.cpus) == 256
    fallback.write_text("policy:\n  Active: static\n  AvailableResources:\n    cpu: cpuset:0-999\n")
    with pytest.raises(ConfigError) as info:
        start(tmp_path / "state2", str(fallback))
    assert info.value.field == "policy.AvailableResources.cpu"
    with pytest.raises(ConfigError, match="cannot read config file"):
        start(tmp_path / "s3", str(tmp_path / "missing.cfg"))


def test_cache_is_versioned_atomic_and_resettable(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, STATIC)
    d.create(d.run_pod("g", qos="guaranteed"), "c", 2000)
    import json

    raw = json.loads((tmp_path / "cache").read_text())
    assert raw["version"] == CACHE_VERSION and raw["policy"] == "static" and raw["policy_data"]["grants"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".cache-")]
    sock_path = tmp_path / "relay.sock"
    live = socket.socket(socket.AF_UNIX)
    live.bind(str(sock_path))
    live.listen(1)
    try:
        with pytest.raises(CacheError, match="live"):
            reset_cache(tmp_path, policy=True, config=False, relay_socket=sock_path)
    finally:
        live.close()
    assert reset_cache(tmp_path, policy=True, config=True, relay_socket=sock_path) == ["policy data",
                                                                                        "cached config"]
    data = Cache(tmp_path).load()
    assert data.policy is None and data.policy_data == {} and data.config is None and data.containers
    # A corrupt cache is set aside, not fatal.
    (tmp_path / "cache").write_text("{not json")
    assert Cache(tmp_path).load().containers == {}
    assert (tmp_path / "cache.corrupt").exists()
    (tmp_path / "cache").write_text('{"version": 99}')
    assert Cache(tmp_path).load().pods == {}


def test_remove_pod_releases_everything(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, TA)
    pod = d.run_pod("g", qos="guaranteed")
    d.create(pod, "a", 2000)
    d.create(pod, "b", 3000)
    d.remove_pod(pod)
    assert d.rm.placements() == {} and not d.rm.policy.exclusive_sets()
    assert Cache(tmp_path).load().pods == {}
    _ = api_pb2  # keep the import visible for readers: requests are real CRI messages


def test_crash_between_create_and_answer(topologies: dict[str, Topology], tmp_path: Path) -> None:
    """The relay dies after CreateContainer was decided and sent, before ``after`` recorded it."""
    from unit.resmgr.cri_requests import create_request

    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, STATIC)
    be = d.create(d.run_pod("be"), "c")
    pod = d.run_pod("g", qos="guaranteed")
    req = create_request(pod, d.runtime.pods[pod], "c", cpu_milli=4000)
    result = d.rm.before("CreateContainer", req)
    d.runtime.apply(result.updates)  # the shared container was already shrunk...
    res = result.request.config.linux.resources
    d.runtime.cpusets["orphan"] = (res.cpuset_cpus, res.cpuset_mems)  # ...and the runtime created it
    d.runtime.container_pod["orphan"], d.runtime.container_name["orphan"] = pod, "c"
    d.restart(statuses=False)
    assert "orphan" in d.rm.placements() and be in d.rm.placements()
    assert d.runtime_view() == d.rm.placements()
    owned = d.rm.policy.exclusive_sets()
    assert all(not parse_cpuset(d.runtime.cpusets[be][0]) & cpus for cpus in owned.values())


def test_tampered_cache_is_not_trusted(topologies: dict[str, Topology], tmp_path: Path) -> None:
    import json

    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, TA)
    d.rm.set_config(validate_config_text(TA), source="agent")
    raw = json.loads((tmp_path / "cache").read_text())
    raw["config"] = {"policy": {"Active": "balloons", "balloons": {"BalloonTypes": "nonsense"}}}
    raw["containers"]["bogus"] = ["not", "a", "container"]
    (tmp_path / "cache").write_text(json.dumps(raw))
    rm = ResourceManager(topologies["2s-2n-16c-2t"], relay_dir=tmp_path, fallback_config=validate_config_text(STATIC),
                         cache_fsync=False)
    assert rm.policy.name == "static" and rm.config_source == "fallback-config"
    assert "bogus" not in rm.containers


def test_a_call_about_an_unknown_container_asks_for_a_resync_that_spares_later_creates(
        topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, STATIC)
    known = d.create(d.run_pod("known", qos="guaranteed"), "c", 2000)
    assert not d.rm.resync_wanted()
    d.rm.before("StopContainer", api_pb2.StopContainerRequest(container_id="made-during-bypass"))
    assert d.rm.resync_wanted()
    since = d.rm.begin_resync()
    pods, containers = d.runtime.listing()  # the listing is taken ...
    late = d.create(d.run_pod("late", qos="guaranteed"), "c", 2000)  # ... and a create completes meanwhile
    bypass = api_pb2.Container(id="made-during-bypass", pod_sandbox_id="pod-known",
                               metadata=api_pb2.ContainerMetadata(name="b"), state=api_pb2.CONTAINER_RUNNING)
    gone = [c for c in containers if c.id != known]  # and the known one was removed during the bypass
    d.rm.sync_with_runtime(pods, [*gone, bypass], since=since)
    assert late in d.rm.policy.grants, "a container created after the listing was dropped"
    assert known not in d.rm.containers and "made-during-bypass" in d.rm.policy.containers
    assert not d.rm.resync_wanted()
