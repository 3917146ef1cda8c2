"""CPU classes on fake sysfs trees: per-class cpufreq limits, hardware limits back, uncore per die."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.control_trees import HW_MAX_KHZ, HW_MIN_KHZ, build_cpufreq, build_uncore, cpu_freq, uncore_freq
from fixtures.sysfs_builder import TWO_SOCKETS, build_sysfs

from resmgr.config.sections import CpuSection
from resmgr.control.cpu_classes import CpuClass, CpuClassController, CpuClassError, parse_cpu_classes
from resmgr.topology import discover_topology

CLASSES = parse_cpu_classes(CpuSection.of({"classes": {
    "slow": {"minFreq": 1_000_000, "maxFreq": 1_500_000, "uncoreMaxFreq": 1_200_000},
    "turbo": {"minFreq": 3_000_000, "uncoreMinFreq": 2_000_000, "uncoreMaxFreq": 2_400_000},
}}))


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = build_sysfs(tmp_path / "sysfs", TWO_SOCKETS)
    build_cpufreq(root, range(128))
    build_uncore(root, [(0, 0), (1, 0)])
    return root


def test_cpus_take_their_class_limits_and_get_hardware_limits_back(sysfs: Path) -> None:
    ctl = CpuClassController(sysfs, discover_topology(sysfs))
    ctl.configure(CLASSES)
    assert ctl.sync({"slow": frozenset({0, 1}), "turbo": frozenset({2})}) == []
    assert cpu_freq(sysfs, 0) == cpu_freq(sysfs, 1) == (1_000_000, 1_500_000)
    assert cpu_freq(sysfs, 2) == (3_000_000, HW_MAX_KHZ)  # maxFreq 0: the hardware's
    assert cpu_freq(sysfs, 3) == (HW_MIN_KHZ, HW_MAX_KHZ)  # no class: untouched
    # CPU 1 moves to turbo (min above slow's max: max is raised first), CPU 0 leaves every class
    assert ctl.sync({"turbo": frozenset({1, 2})}) == []
    assert cpu_freq(sysfs, 1) == (3_000_000, HW_MAX_KHZ)
    assert cpu_freq(sysfs, 0) == (HW_MIN_KHZ, HW_MAX_KHZ)


def test_uncore_takes_the_highest_limits_of_the_classes_on_a_die(sysfs: Path) -> None:
    topology = discover_topology(sysfs)
    ctl = CpuClassController(sysfs, topology)
    ctl.configure(CLASSES)
    package1 = sorted(topology.packages[1])
    ctl.sync({"slow": frozenset({0}), "turbo": frozenset({1}), "slow2": frozenset()})
    assert uncore_freq(sysfs, 0, 0) == (2_000_000, 2_400_000)
    ctl.sync({"slow": frozenset({0, package1[0]})})
    assert uncore_freq(sysfs, 1, 0) == (800_000, 1_200_000)  # min 0: left as it was


def test_reconfigure_reapplies_and_unconfigured_classes_are_left_alone(sysfs: Path) -> None:
    ctl = CpuClassController(sysfs, discover_topology(sysfs))
    ctl.configure(CLASSES)
    ctl.sync({"slow": frozenset({4}), "unknown": frozenset({5})})
    assert cpu_freq(sysfs, 5) == (HW_MIN_KHZ, HW_MAX_KHZ)
    ctl.configure({**CLASSES, "slow": CpuClass("slow", 900_000, 1_100_000)})
    assert cpu_freq(sysfs, 4) == (900_000, 1_100_000)
    ctl.configure({})  # classes removed: the CPUs get the hardware's limits back
    assert cpu_freq(sysfs, 4) == (HW_MIN_KHZ, HW_MAX_KHZ) and ctl.assignments == {}


def test_missing_drivers_are_clear_errors(tmp_path: Path) -> None:
    root = build_sysfs(tmp_path / "bare", TWO_SOCKETS)  # no cpufreq, no uncore
    ctl = CpuClassController(root, discover_topology(root))
    with pytest.raises(CpuClassError, match="intel_uncore_frequency"):
        ctl.configure(CLASSES)
    ctl.configure({"slow": CpuClass("slow", 1_000_000, 1_500_000)})
    errors = ctl.sync({"slow": frozenset({0})})
    assert len(errors) == 1 and "no cpufreq" in errors[0]
