"""Block I/O classes: I/O weight and per-device throttling written into a container's cgroup.

CRI v1's LinuxContainerResources carries no block I/O fields, so, as cri-resource-manager does,
the class's parameters are written straight into the container's cgroup once it runs:

* cgroup v1 (what containerd uses on these nodes): ``blkio.bfq.weight`` or ``blkio.weight``,
  the matching ``*weight_device``, and ``blkio.throttle.{read,write}_{bps,iops}_device``;
* cgroup v2 (not in upstream; same parameters): ``io.weight`` (``default N`` and per device)
  and ``io.max`` (``MAJ:MIN rbps= wbps= riops= wiops=``).

Configuration (upstream's ``blockio.Classes``): class name -> list of parameter sets, each with
``Devices`` (globs of block device paths; a set without Devices gives the class's default weight),
``Weight`` (10..1000) and ``Throttle{Read,Write}{Bps,IOPS}`` (quantities like ``50M``). Device globs
are resolved when the config is applied (upstream's "static" classes), symlinks followed, partitions
refused. Applying a class also resets throttles and device weights the cgroup has for devices the
class does not name (upstream's ResetBlkioParameters), so moving between classes leaves nothing behind.
"""

from __future__ import annotations

import glob
import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from resmgr.config.constraints import parse_memory_quantity
from resmgr.config.sections import BlockIOSection
from resmgr.control.cgroups import is_unified

log = logging.getLogger("resmgr.control.blockio")

Device = tuple[int, int]  # (major, minor)
THROTTLES = ("ThrottleReadBps", "ThrottleWriteBps", "ThrottleReadIOPS", "ThrottleWriteIOPS")
V1_THROTTLE_FILES = {"ThrottleReadBps": "blkio.throttle.read_bps_device",
                     "ThrottleWriteBps": "blkio.throttle.write_bps_device",
                     "ThrottleReadIOPS": "blkio.throttle.read_iops_device",
                     "ThrottleWriteIOPS": "blkio.throttle.write_iops_device"}
V2_MAX_KEYS = {"ThrottleReadBps": "rbps", "ThrottleWriteBps": "wbps", "ThrottleReadIOPS": "riops",
               "ThrottleWriteIOPS": "wiops"}
V1_WEIGHT_FILES = (("blkio.bfq.weight", "blkio.bfq.weight_device"), ("blkio.weight", "blkio.weight_device"))


class BlockIOError(RuntimeError):
    """A class is invalid for this node, or its parameters could not be written."""


@dataclass
class BlockIOClass:
    """One class resolved to devices: weight (None: unset) and per-device weights and throttles."""

    name: str
    weight: int | None = None
    device_weights: dict[Device, int] = field(default_factory=dict)
    throttles: dict[str, dict[Device, int]] = field(default_factory=lambda: {t: {} for t in THROTTLES})


def parse_io_value(field_name: str, value: int | str, minimum: int = 0, maximum: int | None = None) -> int:
    """A Weight or throttle value (an integer or a quantity like 50M or 1Gi), range-checked."""
    try:
        number = parse_memory_quantity(value)
    except ValueError as exc:
        raise BlockIOError(f"{field_name}: {exc}") from None
    if number < minimum or (maximum is not None and number > maximum):
        bound = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
        raise BlockIOError(f"{field_name}: {number} is out of range ({bound})")
    return number


def resolve_devices(patterns: list[str], dev_root: Path = Path("/"), sysfs_root: Path = Path("/")
                    ) -> tuple[dict[Device, str], list[str]]:
    """(device -> path, problems) for the block devices the globs match; partitions are refused.

    ``dev_root`` prefixes the patterns (a fake tree in tests); the numbers come from stat(2).
    """
    found: dict[Device, str] = {}
    problems: list[str] = []
    for pattern in patterns:
        matches = sorted(glob.glob(str(dev_root / pattern.lstrip("/"))))
        if not matches:
            problems.append(f"no block device matches {pattern!r}")
        for path in matches:
            try:
                st = os.stat(path)  # follows /dev/disk/by-* symlinks
            except OSError as exc:
                problems.append(f"cannot stat {path}: {exc.strerror or exc}")
                continue
            if not stat.S_ISBLK(st.st_mode):
                problems.append(f"{path} (from {pattern!r}) is not a block device")
                continue
            dev = (os.major(st.st_rdev), os.minor(st.st_rdev))
            if (sysfs_root / "sys/dev/block" / f"{dev[0]}:{dev[1]}" / "partition").exists():
                problems.append(f"{path} ({dev[0]}:{dev[1]}) is a partition; I/O control applies to whole disks")
                continue
            found.setdefault(dev, path)
    return found, problems


def parse_blockio_classes(section: BlockIOSection, dev_root: Path = Path("/"), sysfs_root: Path = Path("/")
                          ) -> tuple[dict[str, BlockIOClass], list[str]]:
    """Check the typed ``blockio`` section's values and resolve its device globs on this node: (classes,
    warnings); BlockIOError if invalid (the controller's mode decides what that costs, as upstream)."""
    classes: dict[str, BlockIOClass] = {}
    warnings: list[str] = []
    for name, sets in section.classes.items():
        cls = BlockIOClass(name)
        for i, params in enumerate(sets):
            where = f"blockio.Classes.{name}[{i}]"
            weight = None if params.weight is None else parse_io_value(f"{where}.Weight", params.weight, 10, 1000)
            limits = {t: parse_io_value(f"{where}.{t}", v) for t, v in params.throttles.items()}
            if not params.devices:
                if limits:
                    raise BlockIOError(f"{where}: throttling needs Devices (a throttle is per device)")
                if weight is not None:
                    cls.weight = weight
                continue
            devices, problems = resolve_devices(list(params.devices), dev_root, sysfs_root)
            warnings.extend(f"{where}: {p}" for p in problems)
            for dev in devices:
                if weight is not None:
                    cls.device_weights[dev] = weight
                for t, v in limits.items():
                    cls.throttles[t][dev] = v
        classes[name] = cls
    return classes, warnings


# -- writing a class into a cgroup ----------------------------------------------------------------
def _write(path: Path, text: str) -> None:
    try:
        # One write per entry: the kernel parses one per write. Appending (which cgroup files ignore)
        # keeps every entry in a plain file, so a fake tree records what a kernel would have been told.
        with open(path, "a") as f:
            f.write(text)
    except OSError as exc:
        raise BlockIOError(f"cannot write {text.strip()!r} to {path}: {exc.strerror or exc}") from None


def _device_lines(path: Path) -> dict[Device, int]:
    """``MAJ:MIN value`` lines of a v1 blkio file (BFQ's weight_device starts with a ``default`` line)."""
    out: dict[Device, int] = {}
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and ":" in parts[0] and parts[1].isdigit():
            major, minor = parts[0].split(":", 1)
            if major.isdigit() and minor.isdigit():
                out[(int(major), int(minor))] = int(parts[1])
    return {dev: value for dev, value in out.items() if value}  # 0: no entry (the kernel drops it)


def _apply_v1(cgroup_dir: Path, cls: BlockIOClass) -> None:
    for t in THROTTLES:
        path = cgroup_dir / V1_THROTTLE_FILES[t]
        if not path.exists():
            raise BlockIOError(f"{path} does not exist: is the blkio throttling controller enabled?")
        wanted = cls.throttles[t]
        for dev in sorted(set(_device_lines(path)) - set(wanted)):
            _write(path, f"{dev[0]}:{dev[1]} 0\n")  # 0 removes the limit
        for dev, value in sorted(wanted.items()):
            _write(path, f"{dev[0]}:{dev[1]} {value}\n")
    if cls.weight is None and not cls.device_weights:
        return
    for weight_file, device_file in V1_WEIGHT_FILES:  # noqa: B007 - the pair found is used below
        if (cgroup_dir / weight_file).exists():
            break
    else:
        raise BlockIOError(f"no blkio weight file in {cgroup_dir} (needs the BFQ or CFQ I/O scheduler)")
    if cls.weight is not None:
        _write(cgroup_dir / weight_file, f"{cls.weight}\n")
    if (cgroup_dir / device_file).exists():
        for dev in sorted(set(_device_lines(cgroup_dir / device_file)) - set(cls.device_weights)):
            _write(cgroup_dir / device_file, f"{dev[0]}:{dev[1]} 0\n")
        for dev, value in sorted(cls.device_weights.items()):
            _write(cgroup_dir / device_file, f"{dev[0]}:{dev[1]} {value}\n")


def _apply_v2(cgroup_dir: Path, cls: BlockIOClass) -> None:
    io_max = cgroup_dir / "io.max"
    if not io_max.exists():
        raise BlockIOError(f"{io_max} does not exist: is the io controller enabled for this cgroup?")
    current = {}
    for line in io_max.read_text().splitlines():  # "MAJ:MIN rbps=... wbps=max ..."; all max: no entry
        if line.strip():
            major, minor = line.split()[0].split(":")
            current[(int(major), int(minor))] = all(v.endswith("=max") for v in line.split()[1:])
    devices = {d for limits in cls.throttles.values() for d in limits}
    for dev in sorted(d for d, unlimited in current.items() if not unlimited and d not in devices):
        _write(io_max, f"{dev[0]}:{dev[1]} rbps=max wbps=max riops=max wiops=max\n")
    for dev in sorted(devices):
        limits = " ".join(f"{V2_MAX_KEYS[t]}={cls.throttles[t].get(dev, 'max')}" for t in THROTTLES)
        _write(io_max, f"{dev[0]}:{dev[1]} {limits}\n")
    io_weight = cgroup_dir / "io.weight"
    if cls.weight is None and not cls.device_weights:
        return
    if not io_weight.exists():
        raise BlockIOError(f"{io_weight} does not exist: I/O weights need the io controller (and BFQ)")
    if cls.weight is not None:
        _write(io_weight, f"default {cls.weight}\n")
    for dev, value in sorted(cls.device_weights.items()):
        _write(io_weight, f"{dev[0]}:{dev[1]} {value}\n")


def apply_class(cgroup_dir: Path, cls: BlockIOClass, cgroup_root: Path) -> None:
    """Write ``cls`` into the container's cgroup directory (v1 blkio or v2 io files)."""
    if is_unified(cgroup_root):
        _apply_v2(cgroup_dir, cls)
    else:
        _apply_v1(cgroup_dir, cls)
