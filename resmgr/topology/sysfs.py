"""Topology discovery from sysfs (``<root>/sys/devices/system/{cpu,node}``)."""

from __future__ import annotations

import re
from pathlib import Path

from resmgr.topology.cpuset import CpusetError, parse_cpuset
from resmgr.topology.model import (
    DRAM,
    HBM,
    PMEM,
    PRIORITY_HIGH,
    PRIORITY_LOW,
    PRIORITY_NORMAL,
    CpuInfo,
    Topology,
)

# cpufreq energy_performance_preference values, best performance first (upstream's sysfs.EPP).
_EPP = {"performance": 0, "balance_performance": 1, "balance_power": 2, "power": 3}
_EPP_UNKNOWN = len(_EPP)
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
    distances: dict[int, tuple[int, ...]] = {}
    cpu_nodes: set[int] = set()
    if node_dir.is_dir():
        for path in sorted(node_dir.glob("node[0-9]*")):
            node = int(path.name[4:])
            for cpu in _read_cpuset(path / "cpulist"):
                node_of[cpu] = node
                cpu_nodes.add(node)
            if (path / "meminfo").exists():
                m = _MEMTOTAL.search(_read(path / "meminfo"))
                if m:
                    node_memory[node] = int(m.group(1)) * 1024
            if (path / "distance").exists():
                text = _read(path / "distance")
                try:
                    distances[node] = tuple(int(d) for d in text.split())
                except ValueError:
                    raise TopologyError(f"{path / 'distance'}: expected integers, found {text!r}") from None
    memory_types, normal = _memory_types(node_dir, cpu_nodes, node_memory)
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
    return Topology(cpus=cpus, isolated=isolated, node_memory=node_memory, memory_types=memory_types,
                    distances=distances, normal_memory=normal, priority=_cpu_priorities(cpu_dir, cpus))


def _cpu_priorities(cpu_dir: Path, cpus: dict[int, CpuInfo]) -> dict[int, int]:
    """CPU priority classes as upstream's cpuallocator finds them from cpufreq, package by package: where a
    package's CPUs have different base frequencies, those above the lowest are high priority and the others
    low; where they have different EPPs, those below the least performant EPP are high and the others low
    (EPP wins). Intel SST priorities are not read. Only CPUs not of normal priority are listed."""
    freq: dict[int, int] = {}
    epp: dict[int, int] = {}
    for cpu in cpus:
        base = cpu_dir / f"cpu{cpu}" / "cpufreq"
        try:
            freq[cpu] = int((base / "base_frequency").read_text().strip())
        except (OSError, ValueError):
            freq[cpu] = 0
        try:
            epp[cpu] = _EPP.get((base / "energy_performance_preference").read_text().strip(), _EPP_UNKNOWN)
        except OSError:
            epp[cpu] = _EPP_UNKNOWN
    out: dict[int, int] = {}
    packages: dict[int, list[int]] = {}
    for c in cpus.values():
        packages.setdefault(c.package, []).append(c.id)
    for members in packages.values():
        freqs = sorted({freq[c] for c in members if freq[c] > 0})
        epps = sorted({epp[c] for c in members if epp[c] != _EPP_UNKNOWN})
        for c in members:
            prio = PRIORITY_NORMAL
            if len(freqs) > 1:
                prio = PRIORITY_HIGH if freq[c] > freqs[0] else PRIORITY_LOW
            if len(epps) > 1:
                prio = PRIORITY_HIGH if epp[c] < epps[-1] else PRIORITY_LOW
            if prio != PRIORITY_NORMAL:
                out[c] = prio
    return out


def _memory_types(node_dir: Path, cpu_nodes: set[int], node_memory: dict[int, int]
                  ) -> tuple[dict[int, str], frozenset[int] | None]:
    """Each memory node's kind, as cri-resource-manager tells them apart (pkg/sysfs): a node with memory
    and CPUs is DRAM; a CPU-less memory node is HBM if it holds less than the average DRAM node,
    otherwise PMEM. Without ``has_memory`` (old kernels, minimal fake trees) every node is DRAM."""
    if not (node_dir / "has_memory").exists():
        return {}, None
    memory = _read_cpuset(node_dir / "has_memory")
    normal = _read_cpuset(node_dir / "has_normal_memory") if (node_dir / "has_normal_memory").exists() else None
    types = {node: DRAM for node in sorted(cpu_nodes)}
    dram = memory & cpu_nodes
    special = sorted(memory - cpu_nodes)
    if special:
        if not dram:
            raise TopologyError(f"{node_dir}: memory nodes {special} have no CPUs and no node has DRAM with CPUs: "
                                f"cannot tell PMEM from HBM")
        average = sum(node_memory.get(n, 0) for n in dram) // len(dram)
        if average == 0:
            raise TopologyError(f"{node_dir}: the DRAM nodes report no MemTotal: cannot tell PMEM from HBM")
        for node in special:
            types[node] = HBM if node_memory.get(node, 0) < average else PMEM
    return types, normal
