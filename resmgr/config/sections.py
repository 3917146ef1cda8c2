"""The typed result of a config check: one frozen section per top-level area, with the defaults.

``resmgr.config.schema`` checks a config and returns the normalised mapping; ``ConfigSections.of``
reads that mapping into these dataclasses (no checks: everything here was checked already), and
``CheckedConfig.sections`` carries them. The relay's settings take ``dump``, ``logger`` and
``instrumentation``; each policy takes its section of ``policy``; the controllers (resmgr.control) take
``resource_manager``, ``cpu``, ``rdt`` and ``blockio``. The normalised mapping itself
stays in ``raw``: the cache, the agent's status and the manager persist and compare that.

The relay's sections and the options every policy shares are typed field by field. A policy's
lists of user-defined entries (balloon types, pools, dynamic pool types, static-pools' pools) stay
the validated mappings the schema returns, in ``entries``-style tuples; the policy reads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from resmgr.config.dump_rules import DumpConfig, parse_dump_rules

DEFAULT_HTTP_ENDPOINT = ":8891"  # upstream's default metrics address (instrumentation.HTTPEndpoint)
KUBE_SYSTEM = ("kube-system",)


def _get(mapping: Mapping[str, Any] | None, name: str) -> Mapping[str, Any]:
    value = (mapping or {}).get(name)
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class LoggerSection:
    """``logger``: the modules whose debug logging is on."""

    debug: tuple[str, ...] = ()

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> LoggerSection:
        return cls(debug=tuple(section.get("Debug", ())))


@dataclass(frozen=True)
class InstrumentationSection:
    """``instrumentation``: where the metrics are served."""

    http_endpoint: str = DEFAULT_HTTP_ENDPOINT

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> InstrumentationSection:
        return cls(http_endpoint=section.get("HTTPEndpoint", DEFAULT_HTTP_ENDPOINT))


def dump_section(section: Mapping[str, Any]) -> DumpConfig:
    """``dump``: its rules parsed (the schema checked them with the same parser) and the file, if any."""
    return DumpConfig(rules=parse_dump_rules(section.get("Config") or ""), file=section.get("File") or None)


@dataclass(frozen=True)
class TopologyAwareSection:
    """``policy.topology-aware`` (also what ``policy.memtier`` becomes)."""

    pin_cpu: bool = True
    pin_memory: bool = True
    prefer_isolated_cpus: bool = True
    prefer_shared_cpus: bool = False
    reserved_pool_namespaces: tuple[str, ...] = KUBE_SYSTEM
    colocate_pods: bool = False
    colocate_namespaces: bool = False

    @classmethod
    def of(cls, s: Mapping[str, Any]) -> TopologyAwareSection:
        d = cls()
        return cls(pin_cpu=s.get("PinCPU", d.pin_cpu), pin_memory=s.get("PinMemory", d.pin_memory),
                   prefer_isolated_cpus=s.get("PreferIsolatedCPUs", d.prefer_isolated_cpus),
                   prefer_shared_cpus=s.get("PreferSharedCPUs", d.prefer_shared_cpus),
                   reserved_pool_namespaces=tuple(s.get("ReservedPoolNamespaces", d.reserved_pool_namespaces)),
                   colocate_pods=s.get("ColocatePods", d.colocate_pods),
                   colocate_namespaces=s.get("ColocateNamespaces", d.colocate_namespaces))


@dataclass(frozen=True)
class BalloonsSection:
    """``policy.balloons``; ``balloon_types`` are the validated entries, in config order."""

    pin_cpu: bool = True
    pin_memory: bool = True
    reserved_pool_namespaces: tuple[str, ...] = KUBE_SYSTEM
    idle_cpu_class: str = ""
    allocator_topology_balancing: bool = False
    prefer_spread_on_physical_cores: bool = False
    balloon_types: tuple[Mapping[str, Any], ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict)  # what decides whether a change keeps the balloons

    @classmethod
    def of(cls, s: Mapping[str, Any]) -> BalloonsSection:
        d = cls()
        return cls(pin_cpu=s.get("PinCPU", d.pin_cpu), pin_memory=s.get("PinMemory", d.pin_memory),
                   reserved_pool_namespaces=tuple(s.get("ReservedPoolNamespaces", d.reserved_pool_namespaces)),
                   idle_cpu_class=s.get("IdleCPUClass", d.idle_cpu_class),
                   allocator_topology_balancing=s.get("AllocatorTopologyBalancing", d.allocator_topology_balancing),
                   prefer_spread_on_physical_cores=s.get("PreferSpreadOnPhysicalCores",
                                                         d.prefer_spread_on_physical_cores),
                   balloon_types=tuple(s.get("BalloonTypes", ())), raw=s)


@dataclass(frozen=True)
class PodpoolsSection:
    """``policy.podpools``; ``pools`` are the validated pool definitions, in config order."""

    pin_cpu: bool = True
    pin_memory: bool = True
    pools: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def of(cls, s: Mapping[str, Any]) -> PodpoolsSection:
        return cls(pin_cpu=s.get("PinCPU", True), pin_memory=s.get("PinMemory", True),
                   pools=tuple(s.get("Pools", ())))


@dataclass(frozen=True)
class DynamicPoolsSection:
    """``policy.dynamic-pools``; ``pool_types`` are the validated type definitions, in config order."""

    pin_cpu: bool = True
    pin_memory: bool = True
    reserved_pool_namespaces: tuple[str, ...] = ()
    pool_types: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def of(cls, s: Mapping[str, Any]) -> DynamicPoolsSection:
        return cls(pin_cpu=s.get("PinCPU", True), pin_memory=s.get("PinMemory", True),
                   reserved_pool_namespaces=tuple(s.get("ReservedPoolNamespaces", ())),
                   pool_types=tuple(s.get("DynamicPoolTypes", ())))


@dataclass(frozen=True)
class StaticPoolsSection:
    """``policy.static-pools``; ``pools`` (name -> validated pool) when the config lists them itself."""

    pools: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    conf_file_path: str = ""
    conf_dir_path: str = ""  # ConfDirPath, or upstream's other spelling ConfFileDir
    label_node: bool = False
    taint_node: bool = False

    @classmethod
    def of(cls, s: Mapping[str, Any]) -> StaticPoolsSection:
        return cls(pools=dict(s.get("pools") or {}), conf_file_path=s.get("ConfFilePath") or "",
                   conf_dir_path=s.get("ConfDirPath") or s.get("ConfFileDir") or "",
                   label_node=s.get("LabelNode", False), taint_node=s.get("TaintNode", False))


@dataclass(frozen=True)
class PolicySection:
    """``policy``: the active policy, the CPU constraints (as the schema normalised them) and each policy's
    section (defaults where the config has none)."""

    active: str = "none"
    available: Mapping[str, str] = field(default_factory=dict)  # AvailableResources: resource -> constraint
    reserved: Mapping[str, str] = field(default_factory=dict)  # ReservedResources
    topology_aware: TopologyAwareSection = field(default_factory=TopologyAwareSection)
    balloons: BalloonsSection = field(default_factory=BalloonsSection)
    podpools: PodpoolsSection = field(default_factory=PodpoolsSection)
    dynamic_pools: DynamicPoolsSection = field(default_factory=DynamicPoolsSection)
    static_pools: StaticPoolsSection = field(default_factory=StaticPoolsSection)

    @classmethod
    def of(cls, s: Mapping[str, Any]) -> PolicySection:
        return cls(active=str(s.get("Active") or "none"), available=dict(_get(s, "AvailableResources")),
                   reserved=dict(_get(s, "ReservedResources")),
                   topology_aware=TopologyAwareSection.of(_get(s, "topology-aware")),
                   balloons=BalloonsSection.of(_get(s, "balloons")),
                   podpools=PodpoolsSection.of(_get(s, "podpools")),
                   dynamic_pools=DynamicPoolsSection.of(_get(s, "dynamic-pools")),
                   static_pools=StaticPoolsSection.of(_get(s, "static-pools")))


# resource-manager.control.Controllers' mode names (the schema checked them) -> upstream's canonical names.
CONTROLLER_MODES = {"disabled": "Disabled", "disable": "Disabled", "required": "Required", "mandatory": "Required",
                    "optional": "Optional", "relaxed": "Relaxed"}


@dataclass(frozen=True)
class ResourceManagerSection:
    """``resource-manager.control``: each named controller's mode, canonical (``Required``, ...), by the name as
    given (resmgr.control matches the names case-insensitively and warns about ones it does not run)."""

    controllers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, s: Mapping[str, Any]) -> ResourceManagerSection:
        given = _get(_get(s, "control"), "Controllers")
        return cls(controllers={name: CONTROLLER_MODES[mode.lower()] for name, mode in given.items()})


@dataclass(frozen=True)
class CpuClassSection:
    """One ``cpu.classes`` entry: frequency limits in kHz (0: the hardware's)."""

    name: str
    min_freq: int = 0
    max_freq: int = 0
    uncore_min_freq: int = 0
    uncore_max_freq: int = 0

    @property
    def has_uncore(self) -> bool:
        return bool(self.uncore_min_freq or self.uncore_max_freq)


@dataclass(frozen=True)
class CpuSection:
    """``cpu``: the CPU classes by name."""

    classes: Mapping[str, CpuClassSection] = field(default_factory=dict)

    @classmethod
    def of(cls, s: Mapping[str, Any]) -> CpuSection:
        return cls(classes={name: CpuClassSection(name, c.get("minFreq", 0), c.get("maxFreq", 0),
                                                  c.get("uncoreMinFreq", 0), c.get("uncoreMaxFreq", 0))
                            for name, c in _get(s, "classes").items()})


@dataclass(frozen=True)
class RdtAllocations:
    """An RDT partition's or class's allocations by resource (None: not given); the values stay as written
    (goresctrl's several forms), resolved against the hardware by resmgr.control.rdt."""

    l2: Any = None
    l3: Any = None
    mb: Any = None

    def of_resource(self, resource: str) -> Any:
        """The allocation of ``resource`` ("l2", "l3" or "mb"); None: not given."""
        return {"l2": self.l2, "l3": self.l3, "mb": self.mb}[resource]

    @classmethod
    def of(cls, s: Mapping[str, Any]) -> RdtAllocations:
        return cls(l2=s.get("l2Allocation"), l3=s.get("l3Allocation"), mb=s.get("mbAllocation"))


@dataclass(frozen=True)
class RdtPartitionSection:
    """One ``rdt.partitions`` entry: its allocations and its classes' allocations."""

    allocations: RdtAllocations = field(default_factory=RdtAllocations)
    classes: Mapping[str, RdtAllocations] = field(default_factory=dict)

    @classmethod
    def of(cls, s: Mapping[str, Any]) -> RdtPartitionSection:
        return cls(allocations=RdtAllocations.of(s),
                   classes={name: RdtAllocations.of(c) for name, c in _get(s, "classes").items()})


@dataclass(frozen=True)
class RdtSection:
    """``rdt``: the mode (default Full), which cache levels may be missing, and the partitions."""

    mode: str = "Full"
    optional: frozenset[str] = frozenset()  # of "l2", "l3", "mb": configured but skipped on hardware without it
    partitions: Mapping[str, RdtPartitionSection] = field(default_factory=dict)

    @classmethod
    def of(cls, s: Mapping[str, Any]) -> RdtSection:
        options = _get(s, "options")
        return cls(mode=options.get("mode", "Full"),
                   optional=frozenset(k for k in ("l2", "l3", "mb") if _get(options, k).get("optional", False)),
                   partitions={name: RdtPartitionSection.of(p) for name, p in _get(s, "partitions").items()})


@dataclass(frozen=True)
class BlockIOSetSection:
    """One parameter set of a ``blockio.Classes`` entry: device globs, the weight, and throttles in bytes or IOPS
    (by ``Throttle...`` field name), as written (an integer or a quantity like 50M). The block I/O controller
    checks them when it takes the section (resmgr/control/blockio.py): a bad value is that controller's error,
    which its mode (Relaxed, Required) decides about, as upstream does."""

    devices: tuple[str, ...] = ()
    weight: int | str | None = None
    throttles: Mapping[str, int | str] = field(default_factory=dict)


@dataclass(frozen=True)
class BlockIOSection:
    """``blockio``: class name -> its parameter sets."""

    classes: Mapping[str, tuple[BlockIOSetSection, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, s: Mapping[str, Any]) -> BlockIOSection:
        def one(p: Mapping[str, Any]) -> BlockIOSetSection:
            return BlockIOSetSection(
                devices=tuple(p.get("Devices") or ()),
                weight=p.get("Weight"), throttles={k: v for k, v in p.items() if k.startswith("Throttle")})

        return cls(classes={name: tuple(one(p) for p in sets) for name, sets in _get(s, "Classes").items()})


@dataclass(frozen=True)
class ConfigSections:
    """A checked config, typed. ``raw`` is the normalised mapping it was read from (persisted, echoed);
    ``resource_manager``, ``cpu``, ``rdt`` and ``blockio`` are what the controllers (resmgr.control) take."""

    policy: PolicySection = field(default_factory=PolicySection)
    logger: LoggerSection = field(default_factory=LoggerSection)
    dump: DumpConfig = field(default_factory=DumpConfig)
    instrumentation: InstrumentationSection = field(default_factory=InstrumentationSection)
    resource_manager: ResourceManagerSection = field(default_factory=ResourceManagerSection)
    cpu: CpuSection = field(default_factory=CpuSection)
    rdt: RdtSection = field(default_factory=RdtSection)
    blockio: BlockIOSection = field(default_factory=BlockIOSection)
    raw: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, config: dict[str, Any]) -> ConfigSections:
        """The sections of a config the schema has checked (``resmgr.config.check_config*``); no checks here."""
        return cls(policy=PolicySection.of(_get(config, "policy")), logger=LoggerSection.of(_get(config, "logger")),
                   dump=dump_section(_get(config, "dump")),
                   instrumentation=InstrumentationSection.of(_get(config, "instrumentation")),
                   resource_manager=ResourceManagerSection.of(_get(config, "resource-manager")),
                   cpu=CpuSection.of(_get(config, "cpu")), rdt=RdtSection.of(_get(config, "rdt")),
                   blockio=BlockIOSection.of(_get(config, "blockio")), raw=config)
