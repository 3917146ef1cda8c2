"""Upstream's e2e test machines, numbered as their qemu VMs number CPUs.

cri-resource-manager's e2e ``n4c16`` topology (``topology.var.json``: ``{"cores": 2, "nodes": 2,
"packages": 2}``, threads defaulting to 2 in ``demo/lib/topology2qemuopts.py``) is 2 packages of 2
NUMA nodes of 2 hyperthreaded cores. qemu numbers the threads of a core consecutively: CPUs 0,1 are
one core, a NUMA node is ``cpu // 4`` (the e2e's ``py_consts.var.py``), a package ``cpu // 8``.
The fake sysfs builder numbers threads as Linux does on bare x86 instead, which would change which
CPUs upstream's allocator picks.
"""

from __future__ import annotations

from resmgr.topology.model import DRAM, PMEM, CpuInfo, Topology

# Upstream's e2e test VMs (test/e2e/policies.test-suite/*/topology.var.json, made into qemu options by
# demo/lib/topology2qemuopts.py), numbered as qemu numbers them: NUMA node by node, each node's cores in
# turn, a core's threads next to each other (n4c16: node 0 = CPUs 0-3, node 1 = 4-7, ...), 2 GiB of
# memory per NUMA node, distances 10 to itself, 11 on the same die, 21 elsewhere.
GIB = 1 << 30


def qemu_topology(packages: int, dies: int, nodes_per_die: int, cores_per_node: int, threads: int,
                  mem_per_node: int = 2 * GIB, pmem: dict[int, tuple[int, int]] | None = None) -> Topology:
    """A topology as upstream's VMs get it; ``pmem``: CPU-less PMEM node id -> (the node it sits beside
    at distance 17, bytes)."""
    cpus: dict[int, CpuInfo] = {}
    nodes = packages * dies * nodes_per_die
    die_of = {node: node // nodes_per_die for node in range(nodes)}
    for node in range(nodes):
        package = node // (dies * nodes_per_die)
        for core in range(cores_per_node):
            for thread in range(threads):
                cpu = (node * cores_per_node + core) * threads + thread
                cpus[cpu] = CpuInfo(id=cpu, package=package, die=die_of[node] % dies,
                                    core=(node % (dies * nodes_per_die)) * cores_per_node + core, node=node)
    pmem = pmem or {}
    all_nodes = list(range(nodes)) + sorted(pmem)

    def distance(a: int, b: int) -> int:
        if a == b:
            return 10
        if (a in pmem and pmem[a][0] == b) or (b in pmem and pmem[b][0] == a):
            return 17
        return 11 if a in die_of and b in die_of and die_of[a] == die_of[b] else 21

    return Topology(cpus=cpus, node_memory={**{n: mem_per_node for n in range(nodes)},
                                            **{n: size for n, (_, size) in pmem.items()}},
                    memory_types={**{n: DRAM for n in range(nodes)}, **{n: PMEM for n in pmem}} if pmem else {},
                    distances={a: tuple(distance(a, b) for b in range(max(all_nodes) + 1)) for a in all_nodes})



def topologies() -> dict[str, Topology]:
    return {
        # topology-aware/n4c16: 2 packages x 2 NUMA nodes x 2 cores x 2 threads.
        "n4c16": qemu_topology(2, 1, 2, 2, 2),
        # balloons/n4c32: 2 packages x 2 dies x 2 NUMA nodes per die x 2 cores x 2 threads: 8 NUMA nodes of
        # 4 CPUs, whatever its name says (its test spreads 8 balloons over 8 NUMA nodes).
        "n4c32": qemu_topology(2, 2, 2, 2, 2),
        # topology-aware/c4pmem4: 4 single-CPU packages with 2 GiB DRAM each, and PMEM nodes 4-7 of 4 GiB
        # beside nodes 2, 3, 0 and 1.
        "c4pmem4": qemu_topology(4, 1, 1, 1, 1, pmem={4: (2, 4 * GIB), 5: (3, 4 * GIB), 6: (0, 4 * GIB),
                                                       7: (1, 4 * GIB)}),
    }


def n4c16() -> Topology:
    return qemu_topology(2, 1, 2, 2, 2)
