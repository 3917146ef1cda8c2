"""RDT classes: cache (L2/L3 CAT, CDP) and memory bandwidth (MBA) allocation through resctrl.

Upstream's ``rdt`` section (goresctrl's config) has partitions, each with an exclusive share of
the cache and a memory-bandwidth budget, and classes inside partitions that share their
partition's cache ways (overlapping) and scale its bandwidth. This module resolves that into one
``schemata`` per class, as goresctrl does:

* partition cache shares (percentages, per cache id) are turned into disjoint, contiguous ways,
  smallest request first, laid out in partition-name order from bit 0; absolute masks
  (``0x3f``, ``0-5``) are taken as given and must not overlap;
* a class's cache allocation (default ``100%``) is a percentage, a percentage range (``50-100%``)
  or a mask relative to its partition's ways;
* a class's ``mbAllocation`` (default ``100%``) is a percentage of its partition's.

Classes become resctrl groups ``cri-resmgr.<class>`` (Full mode); Discovery mode uses the groups
already in resctrl, read-only; Disabled removes ours. A container's processes are moved to its
class by writing their pids to the group's ``tasks``; a class that does not exist falls back to
the root group, as upstream. Not implemented: monitoring groups (``monitoringDisabled`` is
accepted, no mon_groups are made) and MBA in MBps (``mba_MBps`` mounts).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resmgr.config.sections import RdtSection

log = logging.getLogger("resmgr.control.rdt")

RESCTRL_ROOT = Path("/sys/fs/resctrl")
GROUP_PREFIX = "cri-resmgr."
ROOT_CLASS = "system/default"
POD_QOS_CLASS = "/PodQos"  # upstream's marker: "take the class from the pod's QoS class"
QOS_CLASSES = ("BestEffort", "Burstable", "Guaranteed")
NOT_GROUPS = {"info", "mon_groups", "mon_data"}
MODES = ("Disabled", "Discovery", "Full")


class RdtError(RuntimeError):
    """resctrl is missing, the configuration does not fit it, or a write failed."""


@dataclass
class ResctrlInfo:
    """What the kernel's resctrl offers: cache ids per resource, mask widths, MB minimum."""

    cache_ids: dict[str, list[int]] = field(default_factory=dict)  # resource (L3, L3CODE, MB, ...) -> ids
    cbm_bits: dict[str, int] = field(default_factory=dict)  # L2/L3 -> number of ways
    min_cbm_bits: dict[str, int] = field(default_factory=dict)
    min_bandwidth: int = 10

    def has(self, resource: str) -> bool:
        return resource in self.cache_ids

    def cdp(self, level: str) -> bool:
        return self.has(f"{level}CODE") and self.has(f"{level}DATA")


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise RdtError(f"cannot read {path}: {exc.strerror or exc}") from None


def read_info(root: Path) -> ResctrlInfo:
    """Read resctrl's info directory and root schemata; RdtError when resctrl is not mounted."""
    if not (root / "schemata").exists():
        raise RdtError(f"resctrl is not mounted at {root} (mount -t resctrl resctrl {root}; "
                       f"needs RDT-capable CPUs and a kernel with CONFIG_X86_CPU_RESCTRL)")
    info = ResctrlInfo()
    for line in _read(root / "schemata").splitlines():
        name, _, values = line.strip().partition(":")
        if not values:
            continue
        info.cache_ids[name.strip()] = sorted(int(v.split("=")[0]) for v in values.split(";") if "=" in v)
    for level in ("L2", "L3"):
        for res in (level, f"{level}CODE"):
            d = root / "info" / res
            if (d / "cbm_mask").exists():
                info.cbm_bits[level] = bin(int(_read(d / "cbm_mask"), 16)).count("1")
                info.min_cbm_bits[level] = int(_read(d / "min_cbm_bits")) if (d / "min_cbm_bits").exists() else 1
                break
    if (root / "info/MB/min_bandwidth").exists():
        info.min_bandwidth = int(_read(root / "info/MB/min_bandwidth"))
    return info


# -- parsing allocations ------------------------------------------------------------------------
@dataclass(frozen=True)
class Pct:
    low: int
    high: int  # "60%" is Pct(0, 60) in a partition and Pct(1, 60) relative to one (goresctrl)


@dataclass(frozen=True)
class Mask:
    bits: int


CacheRequest = Pct | Mask


def _parse_cache_value(text: str, where: str) -> CacheRequest:
    text = text.strip()
    if text.endswith("%"):
        body = text[:-1]
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", body)
        if not m:
            raise RdtError(f"{where}: invalid percentage {text!r}")
        low, high = (int(m[1]), int(m[2])) if m[2] else (0, int(m[1]))
        if low > high or high > 100:
            raise RdtError(f"{where}: invalid percentage {text!r}")
        return Pct(low, high)
    if text.startswith("0x"):
        try:
            bits = int(text, 16)
        except ValueError:
            raise RdtError(f"{where}: invalid bitmask {text!r}") from None
    else:
        bits = 0
        for part in text.split(","):
            m = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
            if not m or (m[2] and int(m[2]) <= int(m[1])):
                raise RdtError(f"{where}: invalid cache allocation {text!r} (a percentage, 0x mask or bit list)")
            for b in range(int(m[1]), int(m[2] or m[1]) + 1):
                bits |= 1 << b
    if bits == 0 or "0" in bin(bits >> lowest_bit(bits))[2:]:
        raise RdtError(f"{where}: cache bitmask {text!r} must be one contiguous block of ones")
    return Mask(bits)


def lowest_bit(bits: int) -> int:
    return (bits & -bits).bit_length() - 1


def per_cache_id(raw: Any, ids: list[int], default: Any, where: str) -> dict[int, Any]:
    """goresctrl's per-cache-id form: a value for all ids, or a map with ``all`` and id lists (``0,2-3``)."""
    if raw is None:
        return {i: default for i in ids} if default is not None else {}
    if not isinstance(raw, dict) or any(k.lower() in ("unified", "code", "data") for k in raw):
        return {i: raw for i in ids}
    if "all" not in raw and default is None:
        raise RdtError(f"{where}: 'all' is missing from the per-cache-id allocation")
    out = {i: raw.get("all", default) for i in ids}
    for key, value in raw.items():
        if key == "all":
            continue
        for part in str(key).split(","):
            m = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
            if not m:
                raise RdtError(f"{where}: invalid cache id list {key!r}")
            for i in range(int(m[1]), int(m[2] or m[1]) + 1):
                if i in out:
                    out[i] = value
    return out


def _cache_types(value: Any, where: str) -> dict[str, CacheRequest]:
    """{'unified': ..., 'code': ..., 'data': ...} of one cache id's value (a string or a CDP map)."""
    if isinstance(value, str):
        return {"unified": _parse_cache_value(value, where)}
    if isinstance(value, dict):
        out = {k.lower(): _parse_cache_value(str(v), f"{where}.{k}") for k, v in value.items()}
        if "unified" not in out:
            raise RdtError(f"{where}: 'unified' is required in a cache allocation map")
        if ("code" in out) != ("data" in out):
            raise RdtError(f"{where}: give both 'code' and 'data', or neither")
        return out
    raise RdtError(f"{where}: expected a cache allocation string or map, got {value!r}")


def _mb_percent(value: Any, where: str) -> int:
    values = value if isinstance(value, list) else [value]
    for v in values:
        if isinstance(v, str) and v.strip().endswith("%") and v.strip()[:-1].isdigit():
            pct = int(v.strip()[:-1])
            if pct > 100:
                raise RdtError(f"{where}: memory bandwidth {v!r} is over 100%")
            return pct
    raise RdtError(f"{where}: no percentage in {value!r} (MBps values need mba_MBps, not supported here)")


# -- resolving partitions and classes ----------------------------------------------------------
def partition_masks(requests: dict[str, CacheRequest], total_bits: int, min_bits: int, where: str
                     ) -> dict[str, int]:
    """Disjoint masks for the partitions' requests on one cache id (goresctrl's resolver)."""
    names = sorted(requests)
    if all(isinstance(r, Mask) for r in requests.values()):
        used = 0
        for name in names:
            bits = requests[name].bits  # type: ignore[union-attr]
            if bits & used:
                raise RdtError(f"{where}: cache masks of the partitions overlap ({name})")
            used |= bits
        return {name: requests[name].bits for name in names}  # type: ignore[union-attr]
    if not all(isinstance(r, Pct) and r.low == 0 for r in requests.values()):
        raise RdtError(f"{where}: partitions must all use percentages or all use masks (no ranges)")
    total_pct = sum(r.high for r in requests.values())  # type: ignore[union-attr]
    if total_pct > 100:
        raise RdtError(f"{where}: partitions ask for {total_pct}% of the cache (over 100%)")
    if total_pct == 0:
        raise RdtError(f"{where}: partitions ask for 0% of the cache")
    bits_total = total_pct * total_bits // 100
    available = bits_total
    grants: dict[str, int] = {}
    ordered = sorted(names, key=lambda n: (requests[n].high, n))  # type: ignore[union-attr]
    for i, name in enumerate(ordered):
        if available < min_bits:
            raise RdtError(f"{where}: not enough cache ways for every partition")
        pct_available = available * total_pct // bits_total
        n = requests[name].high * available // pct_available if pct_available else available  # type: ignore[union-attr]
        n = max(n, min_bits)
        if n > available or i == len(ordered) - 1:
            n = available
        grants[name] = n
        available -= n
    masks, lsb = {}, 0
    for name in names:
        masks[name] = ((1 << grants[name]) - 1) << lsb
        lsb += grants[name]
    return masks


def overlay(request: CacheRequest, base: int, min_bits: int, where: str) -> int:
    """A class's cache request placed inside its partition's mask ``base``."""
    if base == 0:
        raise RdtError(f"{where}: the partition has no cache ways")
    base_lsb, base_msb = lowest_bit(base), base.bit_length() - 1
    width = base_msb - base_lsb + 1
    if isinstance(request, Mask):
        bits = request.bits << base_lsb
        if bits | base != base:
            raise RdtError(f"{where}: mask {request.bits:#x} does not fit the partition's {base:#x}")
        return bits
    low = max(request.low, 1)
    lsb, msb = (low - 1) * width // 100, (request.high - 1) * width // 100
    if msb - lsb + 1 < min_bits:
        msb = min(lsb + min_bits - 1, width - 1)
        lsb = max(0, msb - min_bits + 1)
    return ((1 << (msb - lsb + 1)) - 1) << (lsb + base_lsb)


def resolve_schemata(section: RdtSection, info: ResctrlInfo) -> dict[str, str]:
    """Class name -> the ``schemata`` text its resctrl group gets; RdtError when it does not fit."""
    partitions = section.partitions
    lines: dict[str, list[str]] = {}
    classes: dict[str, str] = {}  # class -> partition
    for pname, p in sorted(partitions.items()):
        for cname in p.classes:
            if cname in classes:
                raise RdtError(f"rdt.partitions.{pname}.classes.{cname}: class names must be unique "
                               f"(also in partition {classes[cname]})")
            classes[cname] = pname
            lines[cname] = []
    for level in ("L2", "L3"):
        key = f"{level.lower()}Allocation"
        wanted = {n: p.allocations.of_resource(level.lower()) for n, p in partitions.items()
                  if p.allocations.of_resource(level.lower()) is not None}
        if not wanted:
            continue
        if level not in info.cbm_bits:
            if level.lower() in section.optional:
                log.warning("rdt: %s allocation configured but the system has no %s CAT; skipped", level, level)
                continue
            raise RdtError(f"rdt: {level} cache allocation is configured but this system has no {level} CAT "
                           f"(set rdt.options.{level.lower()}.optional: true to skip it)")
        missing = sorted(set(partitions) - set(wanted))
        if missing:
            raise RdtError(f"rdt.partitions.{missing[0]}: {key} missing (every partition needs one when any has)")
        types = ("code", "data") if info.cdp(level) else ("unified",)
        ids = info.cache_ids.get(f"{level}CODE" if info.cdp(level) else level, [])
        total, min_bits = info.cbm_bits[level], info.min_cbm_bits.get(level, 1)
        part_req = {n: {i: _cache_types(v, f"rdt.partitions.{n}.{key}")
                        for i, v in per_cache_id(raw, ids, None, f"rdt.partitions.{n}.{key}").items()}
                    for n, raw in wanted.items()}
        for typ in types:
            part_masks: dict[int, dict[str, int]] = {}
            for i in ids:
                reqs = {n: r[i].get(typ, r[i]["unified"]) for n, r in part_req.items()}
                part_masks[i] = partition_masks(reqs, total, min_bits, f"rdt {level} cache id {i}")
            suffix = {"unified": "", "code": "CODE", "data": "DATA"}[typ]
            for cname, pname in classes.items():
                raw = partitions[pname].classes[cname].of_resource(level.lower())
                where = f"rdt.partitions.{pname}.classes.{cname}.{key}"
                per_id = per_cache_id(raw, ids, "100%", where)
                values = []
                for i in ids:
                    req = _cache_types(per_id[i], where)
                    mask = overlay(req.get(typ, req["unified"]), part_masks[i][pname], min_bits, where)
                    values.append(f"{i}={mask:x}")
                lines[cname].append(f"{level}{suffix}:" + ";".join(values))
    mb_wanted = {n: p.allocations.mb for n, p in partitions.items() if p.allocations.mb is not None}
    if mb_wanted and not info.has("MB"):
        if "mb" not in section.optional:
            raise RdtError("rdt: memory bandwidth allocation is configured but this system has no MBA "
                           "(set rdt.options.mb.optional: true to skip it)")
        log.warning("rdt: MB allocation configured but the system has no MBA; skipped")
    elif mb_wanted:
        ids = info.cache_ids["MB"]
        for cname, pname in classes.items():
            if pname not in mb_wanted:
                continue
            part = per_cache_id(mb_wanted[pname], ids, None, f"rdt.partitions.{pname}.mbAllocation")
            own = per_cache_id(partitions[pname].classes[cname].mb, ids, ["100%"],
                               f"rdt.partitions.{pname}.classes.{cname}.mbAllocation")
            values = []
            for i in ids:
                base = max(_mb_percent(part[i], f"rdt.partitions.{pname}.mbAllocation"), info.min_bandwidth)
                value = max(_mb_percent(own[i], f"rdt.partitions.{pname}.classes.{cname}.mbAllocation")
                            * base // 100, info.min_bandwidth)
                values.append(f"{i}={value}")
            lines[cname].append("MB:" + ";".join(values))
    return {name: "".join(f"{line}\n" for line in ls) for name, ls in lines.items()}


# -- the controller -----------------------------------------------------------------------------
def _write(path: Path, text: str, mode: str = "w") -> None:
    try:
        with open(path, mode) as f:
            f.write(text)
    except OSError as exc:
        raise RdtError(f"cannot write {text.strip()!r} to {path}: {exc.strerror or exc}") from None


class RdtController:
    """Keeps resctrl groups in line with the ``rdt`` section and moves containers' tasks into them."""

    name = "rdt"

    def __init__(self, resctrl_root: str | Path = RESCTRL_ROOT,
                 remove_dir: Callable[[Path], None] = lambda p: os.rmdir(p)) -> None:
        self.root = Path(resctrl_root)
        self.remove_dir = remove_dir  # resctrl's rmdir moves the group's tasks back to the root group
        self.mode = "Disabled"
        self.groups: dict[str, Path] = {}  # class -> group directory
        self.qos_classes = False

    @property
    def active(self) -> bool:
        return self.mode != "Disabled"

    def _mode(self, section: RdtSection) -> str:
        if section.mode == "Full" and not section.partitions and not (self.root / "schemata").exists():
            return "Disabled"
        return section.mode

    def check(self, section: RdtSection) -> None:
        """What ``configure`` would refuse, found by reading only (RdtError): resctrl missing, partitions that do not
        fit its caches. Whether the hardware has enough groups (CLOSes) shows only when they are made."""
        mode = self._mode(section)
        if mode != "Disabled":
            info = read_info(self.root)
            if mode != "Discovery":
                resolve_schemata(section, info)

    def configure(self, section: RdtSection) -> None:
        mode = self._mode(section)
        if mode == "Disabled":
            if (self.root / "schemata").exists():
                self._remove_ours(keep=())
            self.groups, self.mode, self.qos_classes = {}, mode, False
            return
        info = read_info(self.root)
        if mode == "Discovery":
            self._remove_ours(keep=())
            self.groups = {d.name: d for d in sorted(self.root.iterdir())
                           if d.is_dir() and d.name not in NOT_GROUPS and not d.name.startswith(GROUP_PREFIX)}
            self.qos_classes = any(q in self.groups for q in QOS_CLASSES)
        else:
            schemata = resolve_schemata(section, info)
            self._remove_ours(keep=tuple(GROUP_PREFIX + name for name in schemata))
            groups = {}
            for name, text in sorted(schemata.items()):
                d = self.root / (GROUP_PREFIX + name)
                try:
                    d.mkdir(exist_ok=True)
                except OSError as exc:
                    raise RdtError(f"cannot create resctrl group {d}: {exc.strerror or exc} "
                                   f"(more classes than the hardware's CLOSes?)") from None
                if text:
                    _write(d / "schemata", text)
                groups[name] = d
            self.groups = groups
            self.qos_classes = bool(groups)
        self.mode = mode
        log.info("rdt: %s mode, classes: %s", mode, ", ".join(sorted(self.groups)) or "none")

    def _remove_ours(self, keep: tuple[str, ...]) -> None:
        for d in sorted(self.root.iterdir()):
            if d.is_dir() and d.name.startswith(GROUP_PREFIX) and d.name not in keep:
                try:
                    self.remove_dir(d)
                except OSError as exc:
                    raise RdtError(f"cannot remove resctrl group {d}: {exc.strerror or exc}") from None
                log.info("rdt: removed group %s", d.name)

    def effective_class(self, wanted: str, qos: str) -> str:
        """The class a container ends up in: its own, its QoS class's, or the root group."""
        if not wanted:
            return ROOT_CLASS
        if wanted == POD_QOS_CLASS:
            return qos if self.qos_classes and qos in self.groups else ROOT_CLASS
        if wanted not in self.groups and wanted != ROOT_CLASS:
            log.warning("rdt: unknown class %r; using the root class", wanted)
            return ROOT_CLASS
        return wanted

    def group_dir(self, cls: str) -> Path:
        return self.root if cls == ROOT_CLASS else self.groups[cls]

    def assign(self, pids: list[int], wanted: str, qos: str) -> str:
        """Move the processes to their class's group; returns the class used."""
        cls = self.effective_class(wanted, qos)
        tasks = self.group_dir(cls) / "tasks"
        for pid in pids:
            try:
                _write(tasks, f"{pid}\n", "a")  # one pid per write; a plain file (fake tree) keeps them all
            except RdtError:
                if Path(f"/proc/{pid}").exists():
                    raise  # a process that exited meanwhile is no error
        return cls
