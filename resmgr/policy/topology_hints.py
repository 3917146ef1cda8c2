"""Device topology hints for topology-aware (upstream's pkg/topology and topology-aware/hint.go).

A container's writable mounts and devices hint where it wants to run: the host path's
device (a device node's own major:minor, else the block device the file lives on) is
looked up under ``/sys/dev/{block,char}/M:m``, and the first directory on the way up
its ``/sys/devices`` path with a ``local_cpulist`` or ``numa_node`` gives the hint (a
``numa_node`` without CPUs is taken as a socket, as upstream works around broken
BIOSes). RAID members (``slaves/*``) add their own hints. Read-only paths, small files
under ``/etc``, host libraries, the termination log and kubelet's configmap/secret
volumes are ignored, as upstream does. Kubelet's own cpuset is no hint (upstream
ignores it in scoring too).

The pod annotation ``topologyhints.cri-resource-manager.intel.com`` (``/pod``,
``/container.NAME``) set to ``"false"`` turns a container's hints off.

Each pool scores each hint (CPUs: the share of the hinted CPUs in the pool; NUMA nodes:
1 for a NUMA pool holding one, 0.9 for a die or socket, 0.81 for the root; sockets: 1
for the socket, split over its dies and nodes below); a pool's hint score is the product
over the hints, with the product of the non-zero ones as the next criterion. Not done:
upstream's VFIO IOMMU-group lookup of virtual devices.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from resmgr.model.resources import ContainerInfo, annotated_bool
from resmgr.topology.cpuset import CpusetError, parse_cpuset
from resmgr.topology.model import Topology

log = logging.getLogger("resmgr.policy.hints")

TOPOLOGY_HINTS_KEY = "topologyhints.cri-resource-manager.intel.com"
OVERFIT_PENALTY = 0.9
_IGNORED_PREFIXES = ("/.cri-resmgr", "/etc/", "/dev/termination-log", "/lib/", "/lib64/", "/usr/lib/",
                     "/usr/lib32/", "/usr/lib64/")
_IGNORED_VOLUMES = re.compile(r"(kubelet)?/pods/[0-9a-fA-F-]+/volumes/kubernetes\.io~(configmap|secret)/")


@dataclass(frozen=True)
class Hint:
    provider: str  # the sysfs device directory it came from
    cpus: frozenset[int] = frozenset()
    numas: frozenset[int] = frozenset()
    sockets: frozenset[int] = frozenset()


def hints_enabled(c: ContainerInfo) -> bool:
    return annotated_bool(c, TOPOLOGY_HINTS_KEY) is not False


def _ids(text: str) -> frozenset[int]:
    try:
        return parse_cpuset(text)
    except CpusetError:
        return frozenset()


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _device_hint(path: Path, devices_root: Path) -> Hint | None:
    cpus, numa = _read(path / "local_cpulist"), _read(path / "numa_node")
    if numa == "-1":
        numa = ""  # not NUMA-aware
    sockets = ""
    if numa and not cpus:
        parents = device_hints(path.parent, devices_root)
        cpus = ",".join(sorted({",".join(map(str, sorted(h.cpus))) for h in parents.values() if h.cpus})) or cpus
        numa = ",".join(sorted({",".join(map(str, sorted(h.numas))) for h in parents.values() if h.numas})) or numa
        if not cpus:
            sockets, numa = numa, ""
    if not (cpus or numa or sockets):
        return None
    return Hint(provider=str(path), cpus=_ids(cpus), numas=_ids(numa), sockets=_ids(sockets))


def device_hints(device: Path, devices_root: Path) -> dict[str, Hint]:
    """Hints of a sysfs device and its RAID members (upstream's NewTopologyHints)."""
    hints: dict[str, Hint] = {}
    try:
        real = device.resolve(strict=True)
    except OSError:
        return hints
    p = real
    while p.is_relative_to(devices_root) and p != devices_root:
        hint = _device_hint(p, devices_root)
        if hint is not None:
            hints[hint.provider] = hint
            break
        p = p.parent
    for member in sorted(real.glob("slaves/*")):
        for provider, hint in device_hints(member, devices_root).items():
            hints.setdefault(provider, hint)
    return hints


def sysfs_device(host_path: str, sysfs_root: str) -> Path | None:
    """The sysfs device behind a host path: a device node's own, else the one its file system is on."""
    try:
        st = os.stat(host_path)
    except OSError:
        return None
    kind, dev = "block", st.st_dev
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        kind, dev = ("char" if stat.S_ISCHR(st.st_mode) else "block"), st.st_rdev
    if os.major(dev) == 0:
        return None  # tmpfs, overlay and other virtual file systems
    return Path(sysfs_root, "sys/dev", kind, f"{os.major(dev)}:{os.minor(dev)}")


def _ignored(host_path: str, container_path: str) -> bool:
    return any(host_path.startswith(p) or container_path.startswith(p) for p in _IGNORED_PREFIXES) or bool(
        _IGNORED_VOLUMES.search(host_path) or _IGNORED_VOLUMES.search(container_path))


def container_hints(c: ContainerInfo, sysfs_root: str) -> dict[str, Hint]:
    """The device topology hints of a container's writable mounts and devices (empty if turned off)."""
    if not c.host_paths or not hints_enabled(c):
        return {}
    devices_root = Path(sysfs_root, "sys/devices").resolve()
    hints: dict[str, Hint] = {}
    for host_path, container_path, read_only in c.host_paths:
        if read_only or _ignored(host_path, container_path):
            continue
        device = sysfs_device(host_path, sysfs_root)
        if device is not None:
            for provider, hint in device_hints(device, devices_root).items():
                hints.setdefault(provider, hint)
    return hints


def hint_score(hint: Hint, pool: Any, topology: Topology) -> float:
    """How well ``pool`` (root, socket, die or NUMA node) fits one hint (upstream's HintScore per node kind)."""
    kind = pool.name.split(" ")[0]
    if hint.cpus:
        return len(hint.cpus & pool.cpus) / len(hint.cpus)
    if hint.numas:
        if kind == "root":
            return OVERFIT_PENALTY * OVERFIT_PENALTY
        hit = 1.0 if hint.numas & pool.mems else 0.0
        return hit if kind == "NUMA" else OVERFIT_PENALTY * hit
    if hint.sockets:
        if kind == "root":
            return OVERFIT_PENALTY
        packages = {topology.cpus[c].package for c in pool.cpus}
        if not packages & hint.sockets:
            return 0.0
        if kind == "socket":
            return 1.0
        package = next(iter(packages))
        package_cpus = topology.packages[package]
        if kind == "die":  # penalize underfit by the socket's dies
            return 1.0 / sum(1 for (pkg, _die) in topology.dies if pkg == package)
        return 1.0 / len(topology.nodes_of(package_cpus))
    return 0.0


def pool_hint_scores(hints: dict[str, Hint], pools: dict[str, Any],
                     topology: Topology) -> dict[str, tuple[float, float]]:
    """Pool name -> (product of the hint scores, product of the non-zero ones), upstream's combineHintScores."""
    out: dict[str, tuple[float, float]] = {}
    for name, pool in pools.items():
        combined, filtered = 1.0, 0.0
        for hint in hints.values():
            score = hint_score(hint, pool, topology)
            combined *= score
            if score:
                filtered = score if filtered == 0.0 else filtered * score
        out[name] = (combined, filtered)
    return out
