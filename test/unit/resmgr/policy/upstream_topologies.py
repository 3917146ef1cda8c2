"""Upstream's e2e test machines, numbered as their qemu VMs number CPUs.

cri-resource-manager's e2e ``n4c16`` topology (``topology.var.json``: ``{"cores": 2, "nodes": 2,
"packages": 2}``, threads defaulting to 2 in ``demo/lib/topology2qemuopts.py``) is 2 packages of 2
NUMA nodes of 2 hyperthreaded cores. qemu numbers the threads of a core consecutively: CPUs 0,1 are
one core, a NUMA node is ``cpu // 4`` (the e2e's ``py_consts.var.py``), a package ``cpu // 8``.
The fake sysfs builder numbers threads as Linux does on bare x86 instead, which would change which
CPUs upstream's allocator picks.
"""

from __future__ import annotations

from resmgr.topology.model import CpuInfo, Topology


def n4c16() -> Topology:
    cpus = {i: CpuInfo(id=i, package=i // 8, die=0, core=(i % 8) // 2, node=i // 4) for i in range(16)}
    return Topology(cpus=cpus, node_memory={n: 2 << 30 for n in range(4)})
