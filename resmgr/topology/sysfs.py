"""Topology discovery from sysfs (``<root>/sys/devices/system/{cpu,node}``)."""

from __future__ import annotations

import re
from pathlib import Path

from resmgr.topology.cpuset import CpusetError, parse_cpuset
from resmgr.topology.model import CpuInfo, Topology

_MEMTOTAL = re.compile(r"^Node\s+\d+\s+MemTotal:\s+(\d+)\s*kB", re.MULTILINE)


class TopologyError(RuntimeError):
    """sysfs could not be read or does not describe a usable CPU topology."""


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise TopologyError(f"cannot read {path}: {exc.strerror or exc}") from None


def _read_int(path: Path, default: int | None = None) -> int:
    if default is not None and not path.exists():
        return default
    text = _read(path)
    try:
        return int(text)
    except ValueError:
        raise TopologyError(f"{path}: expected an integer, found {text!r}") from None


def _read_cpuset(path: Path) -> frozenset[int]:
    try:
        return parse_cpuset(_read(path))
    except CpusetError as exc:
        raise TopologyError(f"{path}: {exc}") from None


def discover_topology(root: str | Path = "/") -> Topology:
    """Read online CPUs, their package/die/core/NUMA node, node memory and isolated CPUs."""
    base = Path(root) / "sys" / "devices" / "system"
    cpu_dir, node_dir = base / "cpu", base / "node"
    online = _read_cpuset(cpu_dir / "online")
    if not online:
        raise TopologyError(f"{cpu_dir / 'online'} lists no online CPUs")
    isolated = _read_cpuset(cpu_dir / "isolated") if (cpu_dir / "isolated").exists() else frozenset()

    node_of: dict[int, int] = {}
    node_memory: dict[int, int] = {}
    if node_dir.is_dir():
        for path in sorted(node_dir.glob("node[0-9]*")):
            node = int(path.name[4:])
            for cpu in _read_cpuset(path / "cpulist"):
                node_of[cpu] = node
            if (path / "meminfo").exists():
                m = _MEMTOTAL.search(_read(path / "meminfo"))
                if m:
                    node_memory[node] = int(m.group(1)) * 1024
    cpus: dict[int, CpuInfo] = {}
    for cpu in sorted(online):
        topo = cpu_dir / f"cpu{cpu}" / "topology"
        cpus[cpu] = CpuInfo(
            id=cpu,
            package=_read_int(topo / "physical_package_id", 0),
            die=_read_int(topo / "die_id", 0),
            core=_read_int(topo / "core_id", cpu),
            # Without NUMA support in the kernel everything is one node.
            node=node_of.get(cpu, 0),
        )
    return Topology(cpus=cpus, isolated=isolated, node_memory=node_memory)
