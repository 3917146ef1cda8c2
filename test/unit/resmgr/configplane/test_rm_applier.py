"""ResourceManagerApplier: configs and adjustments applied to a real ResourceManager (fake sysfs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.sysfs_builder import Shape, build_sysfs
from unit.resmgr.rm_driver import Driver

from resmgr.configplane.adjustments import ContainerOverride
from resmgr.configplane.plane import ConfigPlane
from resmgr.configplane.rm_applier import ResourceManagerApplier
from resmgr.topology import discover_topology

STATIC = "policy:\n  Active: static\n  ReservedResources:\n    cpu: cpuset:0\n"


@pytest.fixture
def setup(tmp_path: Path):
    topology = discover_topology(build_sysfs(tmp_path / "sysfs", Shape(1, 1, 4, 1)))
    driver = Driver(topology, tmp_path / "relay", STATIC)
    sent: list[tuple[str, str, str | None]] = []
    applied: list[str] = []

    def send(updates, reason):
        driver.runtime.apply(updates)
        sent.extend((reason, u.container_id, u.cpuset_cpus) for u in updates)

    applier = ResourceManagerApplier(driver.rm, send, on_applied=lambda cfg, src: applied.append(src))
    return driver, applier, sent, applied


def test_adjustment_gives_exclusive_cpus_and_removing_it_restores(setup):
    driver, applier, sent, _ = setup
    pod = driver.run_pod("web", namespace="prod")
    cid = driver.create(pod, "web")
    other = driver.create(pod, "side")
    assert driver.runtime.cpusets[cid][0] == "0-3"
    views = applier.list_containers()
    assert {v.id for v in views} == {cid, other}
    assert next(v for v in views if v.id == cid).pretty == "prod/web/web"
    errors = applier.apply_adjustments({cid: ContainerOverride("prod/a", request_milli=2000, limit_milli=2000,
                                                               memory_limit=1 << 26)})
    assert errors == {}
    exclusive = driver.runtime.cpusets[cid][0]
    assert exclusive in ("1-2", "2-3", "1,3")
    assert driver.runtime.cpusets[other][0] not in ("0-3",)  # the shared pool shrank for the other one
    assert all(reason == "SetAdjustment" for reason, _, _ in sent)
    assert applier.apply_adjustments({}) == {}
    assert driver.runtime.cpusets[cid][0] == "0-3" and driver.runtime.cpusets[other][0] == "0-3"
    assert driver.rm.containers[cid].request_milli == 0


def test_adjustment_for_a_gone_container_is_an_error(setup):
    _, applier, _, _ = setup
    assert applier.apply_adjustments({"nope": ContainerOverride("a")}) == {"nope": "container is not running"}


def test_a_class_that_does_not_take_is_reported(setup):
    driver, applier, _, _ = setup
    cid = driver.create(driver.run_pod("web", namespace="prod"), "web")
    # no RDT class "gold" on this node (no such resctrl group, or no resctrl at all)
    errors = applier.apply_adjustments({cid: ContainerOverride("prod/a", classes={"rdt": "gold"})})
    assert errors[cid].startswith("rdt class 'gold' not applied")
    assert driver.rm.class_overrides[cid] == {"rdt": "gold"}


def test_config_through_the_plane(setup):
    driver, applier, _, applied = setup
    plane = ConfigPlane(applier)
    ok = {"policy": "Active: static\nReservedResources:\n  cpu: cpuset:3\n"}
    assert plane.set_config("", ok, "ConfigMap kube-system/cri-resmgr-config.default") == ""
    assert applied == ["ConfigMap kube-system/cri-resmgr-config.default"]
    assert driver.rm.config["policy"]["ReservedResources"] == {"cpu": "cpuset:3"}
    error = plane.set_config("", {"policy": "Active: static\nReservedResources:\n  cpu: cpuset:9\n"}, "bad cpus")
    assert "policy.ReservedResources.cpu" in error and "outside the available CPUs" in error
    assert driver.rm.config["policy"]["ReservedResources"] == {"cpu": "cpuset:3"}


def test_another_policy_is_switched_to_live_and_persisted(setup):
    driver, applier, sent, _ = setup
    plane = ConfigPlane(applier)
    guaranteed = driver.create(driver.run_pod("g", qos="guaranteed"), "c", 1000)
    shared = driver.create(driver.run_pod("be"), "c")
    assert driver.runtime.cpusets[guaranteed][0] != driver.runtime.cpusets[shared][0]
    assert plane.set_config("", {"policy": "Active: none\n"}, "switch to none") == ""
    assert plane.set_config("", {"policy": "Active: balloons\nReservedResources:\n  cpu: cpuset:0\n"
                                           "balloons:\n  BalloonTypes:\n    - Name: all\n      Namespaces: ['*']\n"
                                           "      MinCPUs: 3\n"}, "switch") == ""
    assert driver.rm.policy.name == "balloons"
    # Every container was re-placed, and the runtime holds the new placements (sent as updates).
    assert driver.runtime_view() == driver.rm.placements()
    assert driver.runtime.cpusets[guaranteed][0] == driver.runtime.cpusets[shared][0] == "1-3"
    assert driver.restart() == [] and driver.rm.policy.name == "balloons"  # persisted


def test_disable_policy_switch_keeps_the_refusal(setup, tmp_path):
    driver, _, _, _ = setup
    driver.rm = driver.new_rm(disable_policy_switch=True)
    applier = ResourceManagerApplier(driver.rm, lambda updates, reason: None)
    error = ConfigPlane(applier).set_config("", {"policy": "Active: topology-aware\n"}, "switch")
    assert "policy.Active" in error and "--disable-policy-switch" in error
    assert driver.rm.policy.name == "static"


def test_override_survives_a_kubelet_resize(setup):
    driver, applier, _, _ = setup
    pod = driver.run_pod("web", namespace="prod")
    cid = driver.create(pod, "web")
    override = {cid: ContainerOverride("prod/a", request_milli=2000, limit_milli=2000, memory_limit=1 << 26)}
    applier.apply_adjustments(override)
    pinned = driver.runtime.cpusets[cid][0]
    assert pinned != "0-3"
    driver.kubelet_update(cid, milli=500)  # a kubelet resize: the resource manager re-places it without the override
    assert driver.rm.policy.containers[cid].request_milli != 2000
    assert applier.apply_adjustments(override) == {}  # what AdjustingHook does after UpdateContainerResources
    assert driver.rm.policy.containers[cid].request_milli == 2000
    assert len(driver.runtime.cpusets[cid][0].replace("-", ",").split(",")) == 2


ACTIVE = {"policy": "Active: static\nReservedResources:\n  cpu: cpuset:0\n"}  # STATIC in ConfigMap form


def test_dry_run_through_the_plane_changes_no_status_and_counts_no_refusal(setup):
    driver, applier, sent, applied = setup
    refused: list[str] = []
    plane = ConfigPlane(applier, node_name="n1", on_agent_refused=refused.append)
    assert plane.set_config("n1", ACTIVE, "cm") == ""
    status = (plane.status.source, plane.status.digest, plane.status.last_error)
    pod = driver.run_pod("web", namespace="prod")
    cid = driver.create(pod, "web")
    moved = plane.dry_run("n1", {"policy": "Active: none\n"}, "candidate")  # a switch: none places nothing
    assert (moved.error, moved.policy, moved.containers) == ("", "none", 1)
    assert [(c.container, c.container_id, c.old_cpus, c.new_cpus, c.new_unpinned) for c in moved.changes] == \
        [("prod/web/web", cid, "0-3", "", "policy-none")]
    same = plane.dry_run("n1", ACTIVE, "again")
    assert (same.error, same.changes, same.containers) == ("", [], 1)  # identical to the active one: tried, no move
    bad = plane.dry_run("n1", {"policy": "Active: static\nReservedResources:\n  cpu: cpuset:9\n"}, "bad")
    assert "outside the available CPUs" in bad.error
    assert "is for node 'n2'" in plane.dry_run("n2", {}, "x").error
    assert plane.dry_run("n1", {"policy": "Active: [oops"}, "yaml").error
    # Nothing was applied, refused or sent by the dry runs.
    assert (plane.status.source, plane.status.digest, plane.status.last_error) == status
    assert refused == [] and applied == ["cm"] and [s for s in sent if s[0] == "SetConfig"] == []
    assert driver.rm.config["policy"]["ReservedResources"] == {"cpu": "cpuset:0"}
