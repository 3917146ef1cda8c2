"""The controllers run by the resource manager, on fake sysfs, resctrl, cgroup and device trees:
balloons' CPU classes, RDT and block I/O classes after StartContainer, Adjustments' classes, modes."""

from __future__ import annotations

from pathlib import Path

import pytest
from cri_api.v1 import api_pb2
from fixtures.control_trees import (
    HW_MAX_KHZ,
    build_container_cgroup,
    build_cpufreq,
    build_resctrl,
    build_uncore,
    cpu_freq,
    group_tasks,
    kernel_table,
    make_block_device,
)
from fixtures.sysfs_builder import TWO_SOCKETS, build_sysfs
from unit.resmgr.rm_driver import Driver

from resmgr.config import ConfigError, validate_config_text
from resmgr.config.sections import ConfigSections
from resmgr.control.controllers import Controllers, container_classes, controller_modes
from resmgr.model.resources import ContainerInfo
from resmgr.relay.metrics import RelayMetrics
from resmgr.topology import discover_topology

UPSTREAM = Path(__file__).parents[3] / "data" / "upstream"

BALLOONS_WITH_CLASSES = """
policy:
  Active: balloons
  ReservedResources: {cpu: 1}
  balloons:
    IdleCPUClass: idle
    BalloonTypes:
      - Name: fast
        Namespaces: [fast]
        MinCPUs: 2
        MinBalloons: 1
        CPUClass: turbo
cpu:
  classes:
    idle: {minFreq: 800000, maxFreq: 1000000}
    turbo: {minFreq: 3000000, maxFreq: 3500000}
"""

CLASSES = """
policy: {Active: none}
rdt:
  partitions:
    exclusive:
      l3Allocation: "60%"
      classes: {Guaranteed: {}}
    shared:
      l3Allocation: "40%"
      classes: {Burstable: {}, BestEffort: {l3Allocation: "50%"}}
blockio:
  Classes:
    slow:
      - Devices: [/dev/vda]
        ThrottleReadBps: 1M
"""


class ControlDriver(Driver):
    """A Driver whose resource managers see only fake trees (never the host's cpufreq or resctrl)."""

    def __init__(self, topology, relay_dir: Path, config_text: str, roots: dict[str, str]) -> None:
        self.roots = roots
        super().__init__(topology, relay_dir, config_text)

    def new_rm(self, **kw):
        return super().new_rm(**{**self.roots, **kw})

    def start(self, pod_id: str, name: str, pids: list[int], **kw) -> str:
        cid = self.create(pod_id, name, **kw)
        build_container_cgroup(Path(self.roots["cgroup_root"]), self.runtime.pods[pod_id].linux.cgroup_parent,
                               cid, pids)
        self.call("StartContainer", api_pb2.StartContainerRequest(container_id=cid),
                  api_pb2.StartContainerResponse())
        return cid


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, str]:
    sysfs = build_sysfs(tmp_path / "sysfs", TWO_SOCKETS)
    build_cpufreq(sysfs, range(128))
    return {"sysfs_root": str(sysfs), "cgroup_root": str(tmp_path / "cgroup"),
            "resctrl_root": str(build_resctrl(tmp_path / "resctrl"))}


def test_balloon_cpus_take_their_type_class_and_free_cpus_the_idle_class(roots, tmp_path: Path) -> None:
    sysfs = Path(roots["sysfs_root"])
    d = ControlDriver(discover_topology(sysfs), tmp_path / "state", BALLOONS_WITH_CLASSES, roots)
    fast = d.rm.policy.cpu_classes()["turbo"]
    assert len(fast) == 2 and all(cpu_freq(sysfs, c) == (3_000_000, 3_500_000) for c in fast)
    idle = d.rm.policy.cpu_classes()["idle"]
    assert all(cpu_freq(sysfs, c) == (800_000, 1_000_000) for c in idle)
    pod = d.run_pod("p", namespace="fast", qos="guaranteed")
    d.create(pod, "c", 4000)  # the balloon grows to 4 CPUs: two idle CPUs become turbo
    grown = d.rm.policy.cpu_classes()["turbo"]
    assert len(grown) == 4 and all(cpu_freq(sysfs, c) == (3_000_000, 3_500_000) for c in grown)
    reserved = d.rm.policy.reserved
    assert all(cpu_freq(sysfs, c)[1] == HW_MAX_KHZ for c in reserved)  # no class for the reserved CPUs


def test_rdt_and_blockio_classes_after_start_and_from_adjustments(roots, tmp_path: Path) -> None:
    dev_root = tmp_path / "devroot"
    make_block_device(dev_root, Path(roots["sysfs_root"]), "vda", 254, 0)
    d = ControlDriver(discover_topology(Path(roots["sysfs_root"])), tmp_path / "state", CLASSES, roots)
    d.rm.controllers.dev_root = dev_root
    d.rm.set_config(validate_config_text(CLASSES))  # the block device globs resolve in the fake /dev
    resctrl = Path(roots["resctrl_root"])
    burstable = d.run_pod("b", qos="burstable")
    cid = d.start(burstable, "c", [101, 102])
    assert group_tasks(resctrl / "cri-resmgr.Burstable") == [101, 102]  # QoS class -> RDT class
    annotated = d.run_pod("a", qos="besteffort", annotations={
        "rdtclass.cri-resource-manager.intel.com/pod": "Guaranteed",
        "blockioclass.cri-resource-manager.intel.com/container.c": "slow"})
    cid2 = d.start(annotated, "c", [201])
    assert group_tasks(resctrl / "cri-resmgr.Guaranteed") == [201]
    blkio = Path(roots["cgroup_root"]) / "blkio" / d.runtime.pods[annotated].linux.cgroup_parent.strip("/") / cid2
    assert kernel_table(blkio / "blkio.throttle.read_bps_device") == {"254:0": "1000000"}
    # an Adjustment's classes win over annotations and QoS, and are applied at once
    applied = d.rm.set_class_overrides({cid: {"rdt": "BestEffort", "blockio": "slow"}})
    assert applied == {cid: {"rdt": "BestEffort", "blockio": "slow"}}
    assert group_tasks(resctrl / "cri-resmgr.BestEffort") == [101, 102]
    assert d.rm.controllers.errors == {}


def test_failures_never_fail_calls_and_required_refuses_configs(roots, tmp_path: Path) -> None:
    roots = {**roots, "resctrl_root": str(tmp_path / "no-resctrl")}
    d = ControlDriver(discover_topology(Path(roots["sysfs_root"])), tmp_path / "state", CLASSES, roots)
    assert d.rm.controllers.modes["rdt"] == "Disabled"  # Relaxed and resctrl missing: switched off
    assert d.rm.controllers.errors[("rdt", "configure")] == 1
    pod = d.run_pod("x", annotations={"blockioclass.cri-resource-manager.intel.com/pod": "nosuch"})
    d.start(pod, "c", [1])  # an unknown class: logged and counted, the call goes on
    assert d.rm.controllers.errors[("blockio", "container")] == 1
    metrics = RelayMetrics()  # what /metrics shows of it
    metrics.controller_failures.collect = d.rm.controllers.failure_counts
    assert metrics.registry.get_sample_value("cri_resmgr_controller_failures",
                                             {"controller": "blockio", "stage": "container"}) == 1
    required = CLASSES + "resource-manager:\n  control:\n    Controllers: {rdt: Required}\n"
    with pytest.raises(ConfigError, match="rdt controller is Required"):
        d.rm.set_config(validate_config_text(required))
    assert d.rm.config == validate_config_text(CLASSES)  # the previous config stays


def test_modes_and_class_lookup() -> None:
    cfg = validate_config_text("resource-manager:\n  control:\n    Controllers: {RDT: mandatory, blockio: disable,"
                               " page-migration: disabled}\n")
    assert controller_modes(ConfigSections.of(cfg).resource_manager) == {"blockio": "Disabled", "cpu": "Relaxed",
                                                                         "rdt": "Required"}
    c = ContainerInfo(id="1", pod_id="p", name="web", qos="Burstable",
                      pod_annotations={"rdtclass.cri-resource-manager.intel.com/container.web": "gold"})
    assert container_classes(c) == {"rdt": "gold", "blockio": "Burstable"}
    assert container_classes(c, {"blockio": "slow"}) == {"rdt": "gold", "blockio": "slow"}
    assert container_classes(ContainerInfo(id="2", pod_id="p", name="x"))["rdt"] == "/PodQos"


@pytest.mark.parametrize(("name", "check"), [
    ("balloons-md-0.cfg", lambda c: set(c.cpu.classes) == {"lowpower", "dynamic", "turbo"}),
    ("balloons-policy.cfg", lambda c: set(c.cpu.classes) == {"default", "turbo", "normal"}),
    ("rdt-md-0.cfg", lambda c: set(c.rdt.groups) == {"Guaranteed", "Burstable", "BestEffort"}),
    ("blockio.cfg", lambda c: c.blockio_classes["LowPrioThrottled"].throttles["ThrottleReadBps"]),
])
def test_upstream_sample_configs_apply_with_every_controller_required(roots, tmp_path: Path, name: str,
                                                                       check) -> None:
    sysfs = Path(roots["sysfs_root"])
    build_uncore(sysfs, [(0, 0), (1, 0)])
    dev_root = tmp_path / "devroot"
    for i, dev in enumerate(("vda", "sda")):
        make_block_device(dev_root, sysfs, dev, 254 + i, 0)
    config = validate_config_text((UPSTREAM / name).read_text())
    config["resource-manager"] = {"control": {"Controllers": {"cpu": "Required", "rdt": "Required",
                                                              "blockio": "Required"}}}
    controllers = Controllers(discover_topology(sysfs), dev_root=dev_root,
                              **{k: v for k, v in roots.items() if k != "sysfs_root"}, sysfs_root=sysfs)
    controllers.configure(ConfigSections.of(config))  # raises if a Required controller cannot apply the sample
    assert check(controllers) and controllers.errors == {}
