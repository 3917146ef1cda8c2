"""RDT on fake resctrl trees: upstream's partition/class config resolved to schemata, tasks, modes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from fixtures.control_trees import build_resctrl, group_tasks
from fixtures.hypothesis_profiles import examples
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from resmgr.config import validate_config_text
from resmgr.config.sections import RdtSection
from resmgr.control.rdt import (
    POD_QOS_CLASS,
    ROOT_CLASS,
    Pct,
    RdtController,
    RdtError,
    lowest_bit,
    overlay,
    partition_masks,
    read_info,
    resolve_schemata,
)

DOC_EXAMPLE = """
rdt:
  options:
    mode: Full
    l3: {optional: true}
    mb: {optional: true}
  partitions:
    exclusive:
      l3Allocation: "60%"
      mbAllocation: ["100%"]
      classes:
        Guaranteed:
          l3Allocation: "100%"
    shared:
      l3Allocation: "40%"
      mbAllocation: ["50%"]
      classes:
        Burstable:
          l3Allocation: "100%"
        BestEffort:
          l3Allocation: "50%"
"""


def rdt_section(text: str) -> RdtSection:
    return RdtSection.of(validate_config_text(text)["rdt"])


def controller(root: Path) -> RdtController:
    return RdtController(root, remove_dir=shutil.rmtree)  # a fake tree's groups are plain directories


def test_upstream_doc_example_resolves_like_goresctrl(tmp_path: Path) -> None:
    info = read_info(build_resctrl(tmp_path / "resctrl"))  # 11 ways, cache ids 0 and 1
    schemata = resolve_schemata(rdt_section(DOC_EXAMPLE), info)
    # 40 % -> 4 ways (rounded down, smallest request first), 60 % -> the other 7; laid out by name from bit 0
    assert schemata == {
        "Guaranteed": "L3:0=7f;1=7f\nMB:0=100;1=100\n",
        "Burstable": "L3:0=780;1=780\nMB:0=50;1=50\n",
        "BestEffort": "L3:0=180;1=180\nMB:0=50;1=50\n",
    }


def test_per_cache_id_masks_cdp_and_class_ranges(tmp_path: Path) -> None:
    info = read_info(build_resctrl(tmp_path / "resctrl", cdp=True, mb=False))
    section = RdtSection.of(yaml.safe_load("""
partitions:
  a:
    l3Allocation: {all: "0x0f", "1": "0x3"}
    classes:
      gold: {l3Allocation: {unified: "100%", code: "50-100%", data: "0-1"}}
  b:
    l3Allocation: {all: "0x7f0", "1": "0x7fc"}
    classes:
      silver: {}
"""))
    schemata = resolve_schemata(section, info)
    # code: the upper half of the partition's ways (goresctrl's 1..100 % rounding), data: its ways 0-1
    assert schemata["gold"] == "L3CODE:0=e;1=3\nL3DATA:0=3;1=3\n"
    assert schemata["silver"] == "L3CODE:0=7f0;1=7fc\nL3DATA:0=7f0;1=7fc\n"


@pytest.mark.parametrize(("text", "error"), [
    ("partitions: {a: {l3Allocation: '70%'}, b: {l3Allocation: '40%'}}", "over 100%"),
    ("partitions: {a: {l3Allocation: '0xf'}, b: {l3Allocation: '0x18'}}", "overlap"),
    ("partitions: {a: {l3Allocation: '0x5'}}", "contiguous"),
    ("partitions: {a: {l3Allocation: '50%', classes: {x: {}}}, b: {classes: {x: {}}}}", "unique"),
    ("partitions: {a: {l3Allocation: '50%'}, b: {mbAllocation: ['50%']}}", "l3Allocation missing"),
    ("partitions: {a: {mbAllocation: ['500MBps'], classes: {x: {}}}}", "MBps"),
])
def test_configs_that_do_not_fit_are_named(tmp_path: Path, text: str, error: str) -> None:
    info = read_info(build_resctrl(tmp_path / "resctrl"))
    with pytest.raises(RdtError, match=error):
        resolve_schemata(RdtSection.of(yaml.safe_load(text)), info)


def test_missing_l3_is_an_error_unless_optional(tmp_path: Path) -> None:
    root = tmp_path / "resctrl"
    build_resctrl(root)
    shutil.rmtree(root / "info" / "L3")
    section = {"partitions": {"a": {"l3Allocation": "100%", "classes": {"x": {}}}}}
    with pytest.raises(RdtError, match="no L3 CAT"):
        resolve_schemata(RdtSection.of(section), read_info(root))
    assert resolve_schemata(RdtSection.of({**section, "options": {"l3": {"optional": True}}}),
                            read_info(root)) == {"x": ""}


def test_full_mode_groups_and_task_assignment(tmp_path: Path) -> None:
    root = build_resctrl(tmp_path / "resctrl")
    (root / "cri-resmgr.stale").mkdir()
    ctl = controller(root)
    ctl.configure(rdt_section(DOC_EXAMPLE))
    assert sorted(p.name for p in root.iterdir() if p.name.startswith("cri-resmgr.")) == [
        "cri-resmgr.BestEffort", "cri-resmgr.Burstable", "cri-resmgr.Guaranteed"]
    assert (root / "cri-resmgr.Burstable" / "schemata").read_text() == "L3:0=780;1=780\nMB:0=50;1=50\n"
    assert ctl.assign([11, 12], POD_QOS_CLASS, "Burstable") == "Burstable"
    assert group_tasks(root / "cri-resmgr.Burstable") == [11, 12]
    assert ctl.assign([13], "Guaranteed", "BestEffort") == "Guaranteed"  # annotated class wins over QoS
    assert ctl.assign([14], "platinum", "Guaranteed") == ROOT_CLASS  # unknown: root group, as upstream
    assert group_tasks(root) == [14]


def test_discovery_uses_existing_groups_and_disabled_removes_ours(tmp_path: Path) -> None:
    root = build_resctrl(tmp_path / "resctrl")
    (root / "Guaranteed").mkdir()
    (root / "cri-resmgr.old").mkdir()
    ctl = controller(root)
    ctl.configure(RdtSection(mode="Discovery"))
    assert set(ctl.groups) == {"Guaranteed"} and not (root / "cri-resmgr.old").exists()
    assert ctl.assign([5], POD_QOS_CLASS, "Guaranteed") == "Guaranteed"
    assert ctl.assign([6], POD_QOS_CLASS, "Burstable") == ROOT_CLASS
    ctl.configure(rdt_section(DOC_EXAMPLE))
    ctl.configure(RdtSection(mode="Disabled"))
    assert not ctl.active and not [p for p in root.iterdir() if p.name.startswith("cri-resmgr.")]
    assert (root / "Guaranteed").is_dir()  # not ours: left alone


def test_without_resctrl(tmp_path: Path) -> None:
    ctl = controller(tmp_path / "none")
    ctl.configure(RdtSection())  # nothing configured: quietly off
    assert not ctl.active
    with pytest.raises(RdtError, match="not mounted"):
        ctl.configure(rdt_section(DOC_EXAMPLE))


@settings(max_examples=examples(60), deadline=None)
@given(ways=st.integers(4, 20), min_bits=st.integers(1, 2),
       shares=st.lists(st.integers(1, 60), min_size=1, max_size=4),
       ranges=st.lists(st.tuples(st.integers(0, 100), st.integers(1, 100)), min_size=1, max_size=4))
def test_partition_ways_are_disjoint_and_classes_stay_inside(ways: int, min_bits: int, shares: list[int],
                                                            ranges: list[tuple[int, int]]) -> None:
    assume(sum(shares) <= 100 and len(shares) * min_bits <= ways * sum(shares) // 100)
    requests = {f"p{i}": Pct(0, s) for i, s in enumerate(shares)}
    try:
        masks = partition_masks(requests, ways, min_bits, "t")
    except RdtError:
        return  # too many partitions for the ways: refused, never overlapping
    used = 0
    for mask in masks.values():
        assert mask and not mask & used and mask < 1 << ways  # disjoint, inside the cache
        # contiguous and wide enough
        assert "0" not in bin(mask >> lowest_bit(mask))[2:] and bin(mask).count("1") >= min_bits
        used |= mask
        for low, high in ranges:
            if low <= high:
                cls = overlay(Pct(low, high), mask, min_bits, "t")
                assert cls and cls | mask == mask  # a class never leaves its partition
