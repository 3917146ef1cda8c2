"""Block I/O classes on fake device and cgroup trees: parsing, device globs, v1 and v2 writes, resets."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.control_trees import build_container_cgroup, kernel_table, make_block_device

from resmgr.config import ConfigError, validate_config_text
from resmgr.config.sections import BlockIOSection
from resmgr.control.blockio import BlockIOError, apply_class, parse_blockio_classes

SAMPLE = """
blockio:
  Classes:
    SlowReader:
      - Devices: [/dev/vd*]
        ThrottleReadBps: 512k
        ThrottleWriteIOPS: 100
      - Weight: "80"
    HighPrio:
      - Weight: 400
      - Devices: [/dev/vda]
        Weight: 800
"""


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path]:
    dev_root, sysfs = tmp_path / "devroot", tmp_path / "sysfs"
    make_block_device(dev_root, sysfs, "vda", 254, 0)
    make_block_device(dev_root, sysfs, "vdb", 254, 16)
    make_block_device(dev_root, sysfs, "vdb1", 254, 17, partition=True)
    return dev_root, sysfs


def classes(trees: tuple[Path, Path], text: str = SAMPLE):
    return parse_blockio_classes(BlockIOSection.of(validate_config_text(text)["blockio"]), *trees)


def test_classes_resolve_devices_and_refuse_partitions(trees: tuple[Path, Path]) -> None:
    parsed, warnings = classes(trees)
    slow = parsed["SlowReader"]
    assert slow.weight == 80
    assert slow.throttles["ThrottleReadBps"] == {(254, 0): 512_000, (254, 16): 512_000}
    assert slow.throttles["ThrottleWriteIOPS"] == {(254, 0): 100, (254, 16): 100}
    assert parsed["HighPrio"].weight == 400 and parsed["HighPrio"].device_weights == {(254, 0): 800}
    assert len(warnings) == 1 and "partition" in warnings[0] and "vdb1" in warnings[0]


@pytest.mark.parametrize(("text", "path", "error"), [
    ("blockio:\n  Classes:\n    x:\n      - Weight: 5\n", "blockio.Classes.x[0].Weight", "out of range"),
    ("blockio:\n  Classes:\n    x:\n      - Weight: 2k\n", "blockio.Classes.x[0].Weight", "out of range"),
    ("blockio:\n  Classes:\n    x:\n      - ThrottleReadBps: 1M\n", "blockio.Classes.x[0]", "needs Devices"),
    ("blockio:\n  Classes:\n    x:\n      - Devices: [/dev/vda]\n        ThrottleReadBps: fast\n",
     "blockio.Classes.x[0].ThrottleReadBps", "invalid memory quantity"),
])
def test_bad_values_are_the_controllers_error_with_their_path(text: str, path: str, error: str,
                                                              trees: tuple[Path, Path]) -> None:
    # The config itself is accepted, as upstream's is: a bad block I/O class is the block I/O controller's error,
    # which its mode decides about (Relaxed: the controller off, the rest applied; Required: the config refused).
    with pytest.raises(BlockIOError, match=error) as exc:
        classes(trees, text)
    assert str(exc.value).startswith(path + ":") or str(exc.value).startswith(path + " ")


@pytest.mark.parametrize(("text", "path"), [
    ("blockio:\n  Classes:\n    x:\n      - Weight: 1.5\n", "blockio.Classes.x[0].Weight"),
    ("blockio:\n  Classes:\n    x:\n      - Devices: [/dev/vda]\n        ThrottleWriteIOPS: -1\n",
     "blockio.Classes.x[0].ThrottleWriteIOPS"),
])
def test_a_value_that_is_no_number_is_refused_by_the_config_check(text: str, path: str) -> None:
    with pytest.raises(ConfigError, match="expected a number") as exc:
        validate_config_text(text)
    assert exc.value.field == path


def test_v1_writes_and_moving_between_classes_resets(trees: tuple[Path, Path], tmp_path: Path) -> None:
    parsed, _ = classes(trees)
    cg_root = tmp_path / "cgroup"
    blkio = build_container_cgroup(cg_root, "/kubepods/burstable/podX", "c1", [1])["blkio"]
    apply_class(blkio, parsed["SlowReader"], cg_root)
    assert kernel_table(blkio / "blkio.throttle.read_bps_device") == {"254:0": "512000", "254:16": "512000"}
    assert kernel_table(blkio / "blkio.throttle.write_iops_device") == {"254:0": "100", "254:16": "100"}
    assert (blkio / "blkio.bfq.weight").read_text().split()[-1] == "80"
    apply_class(blkio, parsed["HighPrio"], cg_root)
    assert kernel_table(blkio / "blkio.throttle.read_bps_device") == {}  # the old throttles are gone
    assert kernel_table(blkio / "blkio.bfq.weight_device") == {"254:0": "800"}
    assert (blkio / "blkio.bfq.weight").read_text().split()[-1] == "400"


def test_v2_writes_io_max_and_io_weight(trees: tuple[Path, Path], tmp_path: Path) -> None:
    parsed, _ = classes(trees)
    cg_root = tmp_path / "cgroup2"
    d = build_container_cgroup(cg_root, "/kubepods/podY", "c2", [1], v2=True)["blkio"]
    apply_class(d, parsed["SlowReader"], cg_root)
    assert kernel_table(d / "io.max") == {"254:0": "rbps=512000 wbps=max riops=max wiops=100",
                                          "254:16": "rbps=512000 wbps=max riops=max wiops=100"}
    assert (d / "io.weight").read_text() == "default 80\n"
    apply_class(d, parsed["HighPrio"], cg_root)
    assert kernel_table(d / "io.max") == {}


def test_missing_weight_support_is_an_error(trees: tuple[Path, Path], tmp_path: Path) -> None:
    parsed, _ = classes(trees)
    cg_root = tmp_path / "cgroup"
    blkio = build_container_cgroup(cg_root, "/kubepods/podZ", "c3", [1], weight_file="none")["blkio"]
    with pytest.raises(BlockIOError, match="BFQ or CFQ"):
        apply_class(blkio, parsed["HighPrio"], cg_root)
