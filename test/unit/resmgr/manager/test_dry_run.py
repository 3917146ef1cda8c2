"""A config's dry run (ResourceManager.dry_run): what set_config would move, refuse or fail, with nothing live
changed; checked against what the real apply then does, for static, topology-aware and balloons."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from unit.resmgr.manager.test_explanations import BALLOONS, STATIC, TA, TOPO
from unit.resmgr.rm_driver import Driver

from resmgr.config import validate_config_text
from resmgr.model.explanation import NOT_GUARANTEED, NOT_PLACED, SHARED_POOL, Explanation
from resmgr.model.placement_change import FAILED, MOVED, PINNED, UNPINNED, DryRun, placement_changes
from resmgr.policy.static import StaticPolicy
from resmgr.topology import Topology

STATIC_MOVED = "policy:\n  Active: static\n  ReservedResources:\n    cpu: cpuset:1,65\n"
TA_MOVED = "policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: cpuset:0-7\n"


def workload(d: Driver) -> dict[str, str]:
    """A guaranteed container, two shared ones, one in namespace "one" (balloons' type)."""
    return {"g": d.create(d.run_pod("g", qos="guaranteed"), "c", 2000),
            "be": d.create(d.run_pod("be"), "c"),
            "bu": d.create(d.run_pod("bu", qos="burstable"), "c", 500),
            "one": d.create(d.run_pod("o", namespace="one"), "c")}


def live_view(d: Driver) -> tuple:
    """Everything a dry run must leave as it was: the cache on disk, the state, the policy and its placements."""
    files = {p.name: p.read_bytes() for p in sorted(Path(d.relay_dir).iterdir()) if p.is_file()}
    rm = d.rm
    return (files, rm.state.snapshot(), dict(rm.state.placed), dict(rm.state.grants), rm.policy, rm.config,
            rm.config_source, rm.placements(), rm.explanations(), rm._mutations, dict(rm.controllers.modes),
            dict(rm.policy.members), rm.policy.cold_starts())


def dry(d: Driver, text: str) -> DryRun:
    d.rm.cache.close()  # the cache writes in the foreground here; nothing pending before the comparison
    before = live_view(d)
    result = d.rm.dry_run(validate_config_text(text), source="test")
    assert live_view(d) == before, "the dry run changed live state"
    return result


def applied(d: Driver, text: str) -> dict[str, tuple[str, str, str, bool]]:
    """The real apply, its updates sent: each container's (cpus, mems, pool, pinned) afterwards."""
    d.runtime.apply(d.rm.set_config(validate_config_text(text), source="test"))
    return {e.container_id: (e.cpus, e.mems, e.pool, e.pinned) for e in d.rm.explanations()}


@pytest.mark.parametrize(("start", "candidate"), [(STATIC, STATIC_MOVED), (TA, TA_MOVED), (STATIC, BALLOONS),
                                                  (TA, BALLOONS)],
                         ids=["static", "topology-aware", "static-to-balloons", "topology-aware-to-balloons"])
def test_the_dry_run_names_exactly_what_the_apply_then_moves(topologies: dict[str, Topology], tmp_path: Path,
                                                           start: str, candidate: str) -> None:
    d = Driver(topologies[TOPO], tmp_path, start)
    ids = workload(d)
    before = {e.container_id: (e.cpus, e.mems, e.pool, e.pinned) for e in d.rm.explanations()}
    result = dry(d, candidate)
    assert result.error == "" and result.containers == len(ids) and result.changes
    after = applied(d, candidate)
    moved = {cid for cid in after if after[cid] != before[cid]}
    assert {c.container_id for c in result.changes} == moved
    for c in result.changes:
        assert (c.old_cpus, c.old_mems, c.old_pool) == before[c.container_id][:3]
        assert (c.new_cpus, c.new_mems, c.new_pool) == after[c.container_id][:3]
        assert c.container.endswith("/c") and c.kind in (MOVED, PINNED, UNPINNED)
        assert f"{c.old_cpus or '-'} -> {c.new_cpus or '-'}" in c.line()


def test_balloons_pin_the_container_of_its_namespace(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies[TOPO], tmp_path, TA)
    ids = workload(d)
    changes = {c.container_id: c for c in dry(d, BALLOONS).changes}
    one = changes[ids["one"]]
    assert one.container == "one/o/c" and one.kind == PINNED and one.new_pool.startswith("one")
    assert one.old_unpinned == NOT_GUARANTEED and one.new_unpinned == ""


def test_the_active_config_moves_nothing(topologies: dict[str, Topology], tmp_path: Path) -> None:
    for i, config in enumerate((STATIC, TA, BALLOONS)):
        d = Driver(topologies[TOPO], tmp_path / str(i), config)
        workload(d)
        result = dry(d, config)
        assert (result.error, result.changes, result.containers) == ("", [], 4)
        assert result.counts() == {MOVED: 0, UNPINNED: 0, PINNED: 0, FAILED: 0}


def test_a_config_the_apply_would_refuse_is_refused_and_nothing_changes(topologies: dict[str, Topology],
                                                                        tmp_path: Path) -> None:
    d = Driver(topologies[TOPO], tmp_path, STATIC)
    workload(d)
    bad = "policy:\n  Active: static\n  ReservedResources:\n    cpu: cpuset:999\n"
    result = dry(d, bad)
    assert "policy.ReservedResources.cpu" in result.error and result.changes == []
    with pytest.raises(Exception) as refused:
        d.rm.set_config(validate_config_text(bad), source="test")
    assert str(refused.value) == result.error  # the same check, the same words


def test_a_required_controller_that_cannot_apply_refuses(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies[TOPO], tmp_path / "d", STATIC)
    d.rm.close()
    d.rm = d.new_rm(resctrl_root=tmp_path / "resctrl")  # not mounted there
    rdt = STATIC + "resource-manager:\n  control:\n    Controllers:\n      rdt: Required\nrdt:\n" \
                   "  partitions:\n    p:\n      l3Allocation: 100%\n      classes:\n        gold: {}\n"
    result = dry(d, rdt)
    assert "field rdt: the rdt controller is Required but cannot apply it" in result.error
    assert "resctrl is not mounted" in result.error
    with pytest.raises(Exception) as refused:
        d.rm.set_config(validate_config_text(rdt), source="test")
    assert str(refused.value) == result.error


def test_switches_are_refused_when_disabled_and_forced_configs_refuse_all(topologies: dict[str, Topology],
                                                                        tmp_path: Path) -> None:
    d = Driver(topologies[TOPO], tmp_path, STATIC)
    workload(d)
    d.rm.close()
    d.rm = d.new_rm(disable_policy_switch=True)
    assert "--disable-policy-switch" in dry(d, BALLOONS).error
    d.rm.close()
    d.rm = d.new_rm(force_config=validate_config_text(STATIC))
    assert "forced config" in dry(d, STATIC_MOVED).error


def test_containers_the_candidate_cannot_place_fail_and_refuse_the_config(topologies: dict[str, Topology],
                                                                          tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    d = Driver(topologies[TOPO], tmp_path, STATIC)
    ids = workload(d)
    original = StaticPolicy.decide

    def decide(self, container):
        if container.pod_name == "g":
            raise RuntimeError("no room")
        return original(self, container)

    monkeypatch.setattr(StaticPolicy, "decide", decide)
    result = dry(d, STATIC_MOVED)
    failed = [c for c in result.changes if c.kind == FAILED]
    assert [c.container_id for c in failed] == [ids["g"]] and failed[0].error == "no room"
    assert "cannot place 1 container(s)" in result.error and "applying it would fail" in result.error
    assert "fails: no room" in failed[0].line()


def test_the_controllers_are_checked_not_configured(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies[TOPO], tmp_path, STATIC)
    workload(d)
    off = STATIC + "resource-manager:\n  control:\n    Controllers:\n      cpu: Disabled\n      blockio: Disabled\n"
    assert dry(d, off).error == ""  # dry() compares the controllers' modes before and after
    d.runtime.apply(d.rm.set_config(validate_config_text(off), source="test"))
    assert d.rm.controllers.modes["cpu"] == "Disabled"  # what configuring would have changed


def test_changes_compare_cpus_mems_pool_and_pinning_not_the_reason() -> None:
    def e(cid: str, cpus: str = "0-3", pool: str = "shared", unpinned: str = NOT_GUARANTEED) -> Explanation:
        return Explanation("ns", "p", "uid", cid, cid, cpus, "0", pool, unpinned)

    old = [e("same"), e("pool"), e("reason"), e("gone"), e("pin"), e("broken")]
    new = [e("same"), e("pool", pool="other"), e("reason", unpinned=SHARED_POOL), e("pin", "4", "excl", ""),
           e("broken")]
    changes = {c.container_id: c for c in placement_changes(old, new, {"broken": "no room"})}
    assert sorted(changes) == ["broken", "gone", "pin", "pool"]
    assert [changes[k].kind for k in ("broken", "gone", "pin", "pool")] == [FAILED, MOVED, PINNED, MOVED]
    assert changes["gone"].new_unpinned == NOT_PLACED and changes["gone"].new_cpus == ""
    assert changes["pool"].line() == "ns/p/pool: 0-3 -> 0-3 pool shared -> other"


def test_the_candidate_places_outside_the_lock(topologies: dict[str, Topology], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Decisions wait only for the snapshot: while the candidate's policy places, another thread gets the lock."""
    d = Driver(topologies[TOPO], tmp_path, STATIC)
    workload(d)
    original, free = StaticPolicy.decide, []

    def try_lock() -> None:
        if d.rm._lock.acquire(blocking=False):
            d.rm._lock.release()
            free.append(True)
        else:
            free.append(False)

    def decide(self, container):
        t = threading.Thread(target=try_lock)
        t.start()
        t.join()
        return original(self, container)

    monkeypatch.setattr(StaticPolicy, "decide", decide)
    assert dry(d, STATIC_MOVED).error == ""
    assert free and all(free)
