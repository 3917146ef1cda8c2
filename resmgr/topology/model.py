"""The node's CPU/memory topology as the policies see it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

CoreKey = tuple[int, int, int]  # (package, die, core_id): core ids repeat across packages/dies
DieKey = tuple[int, int]  # (package, die)

# CPU priority classes, best first (upstream's cpuallocator CPUPriority).
PRIORITY_HIGH, PRIORITY_NORMAL, PRIORITY_LOW = 0, 1, 2

# Kinds of memory a NUMA node holds (upstream's pkg/sysfs MemoryType).
DRAM, PMEM, HBM = "DRAM", "PMEM", "HBM"


@dataclass(frozen=True)
class CpuInfo:
    id: int
    package: int
    die: int
    core: int
    node: int

    @property
    def core_key(self) -> CoreKey:
        return (self.package, self.die, self.core)

    @property
    def die_key(self) -> DieKey:
        return (self.package, self.die)


@dataclass
class Topology:
    """Online CPUs grouped by package, die, NUMA node and core, plus isolated CPUs and node memory."""

    cpus: dict[int, CpuInfo]
    isolated: frozenset[int] = frozenset()
    node_memory: dict[int, int] = field(default_factory=dict)  # bytes per NUMA node
    # NUMA node -> DRAM, PMEM or HBM, including CPU-less memory nodes; empty: every node with CPUs is DRAM.
    memory_types: dict[int, str] = field(default_factory=dict)
    distances: dict[int, tuple[int, ...]] = field(default_factory=dict)  # NUMA node -> distance vector
    normal_memory: frozenset[int] | None = None  # nodes with a normal memory zone (None: not known)
    # cpu id -> CPU priority class (PRIORITY_HIGH/NORMAL/LOW), from base frequency and EPP as upstream's
    # cpuallocator ranks CPUs; empty: every CPU is of normal priority.
    priority: dict[int, int] = field(default_factory=dict)
    packages: dict[int, frozenset[int]] = field(init=False)
    dies: dict[DieKey, frozenset[int]] = field(init=False)
    nodes: dict[int, frozenset[int]] = field(init=False)
    cores: dict[CoreKey, frozenset[int]] = field(init=False)
    # cpu id -> NUMA node / core. Bound dict lookups rather than methods: the CPU allocator calls
    # them for every candidate CPU, and a method call would double the cost of a decision.
    node_of: Callable[[int], int] = field(init=False, repr=False, compare=False)
    core_of: Callable[[int], CoreKey] = field(init=False, repr=False, compare=False)
    package_of: Callable[[int], int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        def group(key) -> dict:
            out: dict = {}
            for c in self.cpus.values():
                out.setdefault(key(c), set()).add(c.id)
            return {k: frozenset(v) for k, v in sorted(out.items())}

        self.packages = group(lambda c: c.package)
        self.dies = group(lambda c: c.die_key)
        self.nodes = group(lambda c: c.node)
        self.cores = group(lambda c: c.core_key)
        self.isolated = frozenset(self.isolated) & frozenset(self.cpus)
        self.node_of = {c.id: c.node for c in self.cpus.values()}.__getitem__
        self.core_of = {c.id: c.core_key for c in self.cpus.values()}.__getitem__
        self.package_of = {c.id: c.package for c in self.cpus.values()}.__getitem__
        # Per-core facts the CPU allocator looks up on every allocation.
        self.core_node = {key: self.cpus[min(cpus)].node for key, cpus in self.cores.items()}
        self.core_first = {key: min(cpus) for key, cpus in self.cores.items()}
        self.core_size = {key: len(cpus) for key, cpus in self.cores.items()}

    def memory_type(self, node: int) -> str:
        return self.memory_types.get(node, DRAM)

    def distance(self, a: int, b: int) -> int:
        """NUMA distance from ``a`` to ``b`` (sysfs ``node<a>/distance``); 10 to itself, 20 when unknown."""
        vector = self.distances.get(a, ())
        if b < len(vector):
            return vector[b]
        return 10 if a == b else 20

    @property
    def online(self) -> frozenset[int]:
        return frozenset(self.cpus)

    def nodes_of(self, cpus: Iterable[int]) -> frozenset[int]:
        """NUMA nodes whose CPUs intersect ``cpus`` (the memory nodes to pin to)."""
        return frozenset(map(self.node_of, cpus))

    def describe(self) -> str:
        threads = max((len(v) for v in self.cores.values()), default=0)
        tiers = "".join(f", {kind} nodes {sorted(n for n, t in self.memory_types.items() if t == kind)}"
                        for kind in (PMEM, HBM) if kind in self.memory_types.values())
        return (f"{len(self.cpus)} CPUs, {len(self.packages)} packages, {len(self.dies)} dies, "
                f"{len(self.nodes)} NUMA nodes, {len(self.cores)} cores, {threads} threads/core, "
                f"isolated={sorted(self.isolated)}{tiers}")
