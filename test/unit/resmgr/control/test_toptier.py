"""Top tier memory limits (Adjustments toptierLimit, toptierlimit annotation) on fake cgroup v1 trees,
with and without the patched kernel's memory.toptier_soft_limit_in_bytes."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.sysfs_builder import THIS_MACHINE, build_sysfs
from unit.resmgr.policy_helpers import ctr

from resmgr.configplane.adjustments import ContainerOverride
from resmgr.configplane.rm_applier import class_overrides
from resmgr.control import toptier
from resmgr.control.controllers import Controllers
from resmgr.model.resources import PodInfo
from resmgr.topology import discover_topology

PARENT = "/kubepods/burstable/pod1234"
KEY = "toptierlimit.cri-resource-manager.intel.com"


def controllers(tmp_path: Path, *, patched: bool) -> tuple[Controllers, Path]:
    sysfs = build_sysfs(tmp_path / "sysfs", THIS_MACHINE)
    memory = tmp_path / "cgroup" / "memory"
    cgroup = memory / PARENT.strip("/") / "c1"
    cgroup.mkdir(parents=True)
    if patched:
        for d in (memory, cgroup):
            (d / toptier.TOPTIER_FILE).write_text("9223372036854771712\n")
    return Controllers(discover_topology(sysfs), sysfs_root=sysfs, cgroup_root=tmp_path / "cgroup",
                       resctrl_root=tmp_path / "no-resctrl"), cgroup


def written(cgroup: Path) -> str:
    return (cgroup / toptier.TOPTIER_FILE).read_text().strip()


def test_annotation_and_adjustment_limits_are_written(tmp_path: Path) -> None:
    ctl, cgroup = controllers(tmp_path, patched=True)
    pod = PodInfo(id="p", cgroup_parent=PARENT)
    c = ctr("c1", annotations={f"{KEY}/container.c1": "1Gi"})
    assert ctl.container_started(c, pod)[toptier.OVERRIDE_KEY] == str(1 << 30) and written(cgroup) == str(1 << 30)
    # the Adjustment's toptierLimit wins over the annotation
    over = class_overrides(ContainerOverride(adjustment="a/x", toptier_limit=2 << 30))
    assert over == {"toptier": str(2 << 30)}
    ctl.container_started(c, pod, over)
    assert written(cgroup) == str(2 << 30)
    # no limit at all (the Adjustment went away, no annotation): unlimited again
    ctl.container_started(ctr("c1"), pod)
    assert written(cgroup) == "-1"
    assert ctl.errors == {}


def test_bad_values_and_missing_cgroups_are_counted_not_raised(tmp_path: Path) -> None:
    ctl, cgroup = controllers(tmp_path, patched=True)
    ctl.container_started(ctr("c1", annotations={f"{KEY}/pod": "lots"}), PodInfo(id="p", cgroup_parent=PARENT))
    ctl.container_started(ctr("gone", annotations={f"{KEY}/pod": "1Gi"}), PodInfo(id="p", cgroup_parent=PARENT))
    assert ctl.errors == {("memory", "container"): 2}
    assert written(cgroup) == "9223372036854771712"  # untouched


def test_mainline_kernels_have_no_top_tier_limit(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ctl, cgroup = controllers(tmp_path, patched=False)
    assert not ctl.toptier
    applied = ctl.container_started(ctr("c1", annotations={f"{KEY}/pod": "1Gi"}), PodInfo(id="p", cgroup_parent=PARENT))
    assert toptier.OVERRIDE_KEY not in applied and not (cgroup / toptier.TOPTIER_FILE).exists()
    assert "this kernel has no memory.toptier_soft_limit_in_bytes" in caplog.text


def test_classes_pass_through_with_the_limit() -> None:
    assert class_overrides(ContainerOverride(adjustment="a/x", classes={"rdt": "gold"})) == {"rdt": "gold"}
    assert class_overrides(ContainerOverride(adjustment="a/x", classes={"rdt": "gold"}, toptier_limit=5)) == \
        {"rdt": "gold", "toptier": "5"}
