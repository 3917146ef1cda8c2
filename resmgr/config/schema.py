"""Schema of cri-resource-manager's YAML configuration.

Matching follows what the Go implementation does when it decodes the YAML (via
JSON) into its option structs: field names match case-insensitively (so both
``CPU:`` and ``cpu:`` work), and types are strict (a quoted ``"3"`` is not an
integer, ``"true"`` is not a boolean). Go's decoder skips a field it does not know,
so cri-resource-manager starts with a config that has one (its own e2e balloons
config spells ``PreferNewBalloon``); here an unknown field is left out of the
normalised config too, and reported as a warning with a "did you mean" suggestion.

Every field cri-resource-manager knows is known here, with its type. Fields this
implementation does not apply are wrapped in ``Ignored``: they are checked like the
rest (a wrong type is still an error), then left out of the normalised config and
listed by ``check`` as "accepted, not implemented by this cri-resmgr, ignored".
Wrong types and bad values refuse the whole config.

This module declares the fields, their types and bounds with the generic specs of
``resmgr.config.validation``.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from typing import Any

from resmgr.config.constraints import parse_cpu_constraint
from resmgr.config.dump_rules import parse_dump_rules
from resmgr.config.errors import ConfigError
from resmgr.config.pool_sizes import parse_instances, parse_pool_cpus
from resmgr.config.validation import (
    Bool,
    Findings,
    Ignored,
    Int,
    ListOf,
    MapOf,
    Number,
    OneOf,
    Opaque,
    Spec,
    Str,
    StrList,
    Struct,
    collecting,
    did_you_mean,
    join_path,
    note_ignored,
    type_name,
)

# Policies this cri-resmgr implements; resmgr.policy.registry must agree (tested).
POLICY_NAMES: tuple[str, ...] = ("none", "static", "topology-aware", "balloons",
                                 "dynamic-pools", "podpools", "static-plus", "static-pools")
# Policies cri-resource-manager knows but this implementation does not run.
# A config that activates one of them is accepted and runs the no-op policy, reported as ignored.
FOREIGN_POLICY_NAMES: tuple[str, ...] = ()
FOREIGN_POLICY_FALLBACK = "none"
# Upstream's alias of topology-aware (the same code, registered twice, options under policy.memtier).
# Memory tiers (PMEM/HBM placement, memory-type and cold-start annotations) are part of topology-aware
# (resmgr.policy.memory_tiers), so the alias runs topology-aware with the memtier section's options.
ALIAS_POLICIES: dict[str, str] = {"memtier": "topology-aware"}


class ResourceMap(Spec):
    """``AvailableResources`` / ``ReservedResources``: resource name -> constraint."""

    def check(self, value: Any, path: str) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ConfigError(path, f"expected a mapping like 'cpu: cpuset:0-3', got {type_name(value)}")
        out: dict[str, str] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(join_path(path, str(key)), "resource names must be strings")
            name = key.lower()
            field = join_path(path, name)
            if name in out:
                raise ConfigError(field, "given twice")
            if name == "cpu":
                try:
                    out[name] = parse_cpu_constraint(item).text()
                except ValueError as exc:
                    raise ConfigError(field, str(exc)) from None
            elif name == "memory":
                if isinstance(item, bool) or not isinstance(item, str | int):
                    raise ConfigError(field, f"expected a memory quantity, got {type_name(item)}")
                out[name] = str(item)
            else:
                raise ConfigError(field, "unknown resource; supported resources: cpu, memory")
        return out


def _check_glob(pattern: str) -> None:
    if not pattern.strip():
        raise ValueError("empty namespace pattern")
    fnmatch.translate(pattern)


_ALLOCATOR_PRIORITIES = {"high": 0, "normal": 1, "low": 2, "none": 3}


class AllocatorPriority(Spec):
    """0..3, or the names high/normal/low/none used by later versions."""

    def check(self, value: Any, path: str) -> int:
        if isinstance(value, str) and value.lower() in _ALLOCATOR_PRIORITIES:
            return _ALLOCATOR_PRIORITIES[value.lower()]
        return Int(0, 3).check(value, path)


# Why fields are ignored, one wording per reason (the compatibility table groups by it).
NO_CPU_CLASSES = "CPU classes (frequency/uncore control) are not implemented"
NO_POLICY = "this policy is not implemented by this cri-resmgr"
NO_STATIC_RDT = "the static policy's own RDT switch is not applied; RDT classes come from the rdt controller"
NO_PAGE_MIGRATION = "page migration (memory tier demotion) is not implemented"
NO_ENERGY_PREFERENCE = ("energy performance preference is not applied "
                        "(upstream's CPU controller does not apply it either)")
NO_RDT_MONITORING = "RDT monitoring groups are not created"
NO_PAGE_DEMOTION = ("dynamic page demotion (dirty-bit scanning, moving idle pages from DRAM to PMEM) is not "
                    "implemented; memory tiers are")
NO_TRACING = "tracing (OpenCensus/Jaeger) is not implemented; metrics are always exported"
NO_KLOG = "this cri-resmgr logs with Python logging: klog options do not apply"
NOT_APPLIED = "accepted for compatibility; this cri-resmgr does not act on it"


def _check_duration(text: str) -> None:
    if not re.fullmatch(r"(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+|0", text.strip()):
        raise ValueError(f"invalid duration {text!r} (expected e.g. 30s, 1m30s)")


DURATION = OneOf(Str(check=_check_duration), Int(), expected="a duration like 30s or a number of nanoseconds")


def _balloon_type_checks(bt: dict[str, Any], path: str) -> None:
    max_cpus = bt.get("MaxCPUs", 0)
    if max_cpus and bt.get("MinCPUs", 0) > max_cpus:
        raise ConfigError(join_path(path, "MinCPUs"),
                          f"MinCPUs ({bt['MinCPUs']}) is larger than MaxCPUs ({max_cpus})")
    max_balloons = bt.get("MaxBalloons", 0)
    if max_balloons and bt.get("MinBalloons", 0) > max_balloons:
        raise ConfigError(join_path(path, "MinBalloons"),
                          f"MinBalloons ({bt['MinBalloons']}) is larger than MaxBalloons ({max_balloons})")


BALLOON_TYPE = Struct({
    "Name": Str(non_empty=True),
    "Namespaces": StrList(item_check=_check_glob),
    "MinCPUs": Int(),
    "MaxCPUs": Int(),
    "MinBalloons": Int(),
    "MaxBalloons": Int(),
    "AllocatorPriority": AllocatorPriority(),
    "PreferSpreadingPods": Bool(),
    "PreferNewBalloons": Bool(),
    # upstream's json name is CpuClass; matching is case-insensitive
    "CPUClass": Str(),
    "PreferPerNamespaceBalloon": Bool(),
    "ShareIdleCPUsInSame": Ignored(Str(choices=("", "system", "package", "die", "numa", "core", "thread")),
                                   NOT_APPLIED),
    "PreferSpreadOnPhysicalCores": Bool(),
    "AllocatorTopologyBalancing": Bool(),
}, required=("Name",), validators=(_balloon_type_checks,))


def _unique_names(list_field: str, what: str) -> Callable[[dict[str, Any], str], None]:
    """A validator: the entries of ``list_field`` have distinct ``Name``s."""
    def check(section: dict[str, Any], path: str) -> None:
        seen: dict[str, int] = {}
        for i, item in enumerate(section.get(list_field, [])):
            if item["Name"] in seen:
                raise ConfigError(f"{join_path(path, list_field)}[{i}].Name",
                                  f"duplicate {what} name {item['Name']!r} (also {list_field}[{seen[item['Name']]}])")
            seen[item["Name"]] = i
    return check


BALLOONS = Struct({
    "PinCPU": Bool(),
    "PinMemory": Bool(),
    "ReservedPoolNamespaces": StrList(item_check=_check_glob),
    "BalloonTypes": ListOf(BALLOON_TYPE),
    "IdleCPUClass": Str(),
    "AllocatorTopologyBalancing": Bool(),
    "PreferSpreadOnPhysicalCores": Bool(),
}, validators=(_unique_names("BalloonTypes", "balloon type"),))

TOPOLOGY_AWARE = Struct({
    "PinCPU": Bool(),
    "PinMemory": Bool(),
    "PreferIsolatedCPUs": Bool(),
    "PreferSharedCPUs": Bool(),
    "ReservedPoolNamespaces": StrList(item_check=_check_glob),
    "ColocatePods": Bool(),
    "ColocateNamespaces": Bool(),
    # documented in upstream's topology-aware.md for memtier's dynamic page demotion
    "DirtyBitScanPeriod": Ignored(DURATION, NO_PAGE_DEMOTION),
    "PageMovePeriod": Ignored(DURATION, NO_PAGE_DEMOTION),
    "PageMoveCount": Ignored(Int(), NO_PAGE_DEMOTION),
})

STATIC = Struct({
    "RelaxedIsolation": Ignored(Bool(), NOT_APPLIED),
    "Rdt": Ignored(OneOf(Bool(), Str(choices=("auto",)), expected="true, false or 'auto'"), NO_STATIC_RDT),
})

STATIC_POOLS = Struct({
    "pools": MapOf(Struct({
        "exclusive": Bool(),
        "cpuLists": ListOf(Struct({"Cpuset": OneOf(Str(), Int(), expected="a CPU list"), "Socket": Int()})),
    })),
    "ConfDirPath": Str(),
    "ConfFilePath": Str(),
    # upstream's static-pools.md spells ConfDirPath this way in one example
    "ConfFileDir": Str(),
    "LabelNode": Bool(),
    "TaintNode": Bool(),
})


def _pod_pool_checks(pool: dict[str, Any], path: str) -> None:
    """CPU and Instances parse as upstream's podpools parses them; only the built-in pools may leave CPU out."""
    builtin = pool["Name"] in ("reserved", "default")
    for name, parse in (("CPU", parse_pool_cpus), ("Instances", parse_instances)):
        if pool.get(name) in (None, "") and (builtin or name == "Instances"):
            continue
        try:
            parse(pool.get(name))
        except ValueError as exc:
            raise ConfigError(join_path(path, name), str(exc)) from None


PODPOOLS = Struct({
    "PinCPU": Bool(),
    "PinMemory": Bool(),
    "Pools": ListOf(Struct({
        "Name": Str(non_empty=True),
        "CPU": OneOf(Str(), Int(), expected="a number of CPUs"),
        "MaxPods": Int(minimum=-1),  # 0: unlimited, -1: no pods
        "Instances": OneOf(Str(), Int(), expected="a count, a CPU quantity or a percentage"),
        "FillOrder": Str(choices=("Balanced", "Packed", "FirstFree")),
    }, required=("Name",), validators=(_pod_pool_checks,))),
}, validators=(_unique_names("Pools", "pool"),))

DYNAMIC_POOLS = Struct({
    "PinCPU": Bool(),
    "PinMemory": Bool(),
    "ReservedPoolNamespaces": StrList(item_check=_check_glob),
    "DynamicPoolTypes": ListOf(Struct({
        "Name": Str(non_empty=True),
        "Namespaces": StrList(item_check=_check_glob),
        "CPUClass": Str(),
        "AllocatorPriority": AllocatorPriority(),
    })),
})


def _reserved_within_available(policy: dict[str, Any], path: str) -> None:
    avail = policy.get("AvailableResources", {}).get("cpu")
    resv = policy.get("ReservedResources", {}).get("cpu")
    if avail is None or resv is None:
        return
    a, r = parse_cpu_constraint(avail), parse_cpu_constraint(resv)
    field = join_path(path, "ReservedResources.cpu")
    if a.kind == "cpuset" and r.kind == "cpuset" and not (r.cpus or frozenset()) <= (a.cpus or frozenset()):
        extra = sorted((r.cpus or frozenset()) - (a.cpus or frozenset()))
        raise ConfigError(field, f"reserved CPUs {extra} are not in AvailableResources ({avail})")
    a_count, r_milli = a.cpu_count(), (r.milli if r.kind == "quantity" else None)
    if r.kind == "cpuset":
        r_milli = len(r.cpus or ()) * 1000
    if a_count is not None and r_milli is not None and a.kind != "cgroup":
        a_milli = a.milli if a.kind == "quantity" else a_count * 1000
        if r_milli > (a_milli or 0):
            raise ConfigError(field, f"reserved resources ({resv}) are larger than available ({avail})")


def _active_known(policy: dict[str, Any], path: str) -> None:
    """Active names a policy this cri-resmgr runs; memtier runs as topology-aware with its own options."""
    active = policy.get("Active")
    field = join_path(path, "Active")
    if active in ALIAS_POLICIES:
        target = ALIAS_POLICIES[active]
        policy["Active"] = target
        if active in policy:
            if target in policy:
                note_ignored(join_path(path, target))  # upstream reads the alias's own section
            policy[target] = policy.pop(active)
        return
    for alias in ALIAS_POLICIES:
        if alias in policy:
            note_ignored(join_path(path, alias))
            del policy[alias]
    if active is None or active in POLICY_NAMES:
        return
    if active in FOREIGN_POLICY_NAMES:
        # Accepted, as every upstream config is: the node runs the no-op policy and says so.
        note_ignored(f"{field}: {active} (not implemented; runs {FOREIGN_POLICY_FALLBACK})")
        policy["Active"] = FOREIGN_POLICY_FALLBACK
        return
    known = [*POLICY_NAMES, *ALIAS_POLICIES, *FOREIGN_POLICY_NAMES]
    raise ConfigError(field, f"unknown policy {active!r}{did_you_mean(active, known)}; "
                             f"policies this cri-resmgr runs: {', '.join([*POLICY_NAMES, *ALIAS_POLICIES])}")


POLICY = Struct({
    "Active": Str(non_empty=True),
    "AvailableResources": ResourceMap(),
    "ReservedResources": ResourceMap(),
    "topology-aware": TOPOLOGY_AWARE,
    "memtier": TOPOLOGY_AWARE,
    "balloons": BALLOONS,
    "static": STATIC,
    "static-plus": Struct({}),  # upstream's static-plus has no options
    "static-pools": STATIC_POOLS,
    "podpools": PODPOOLS,
    "dynamic-pools": DYNAMIC_POOLS,
}, validators=(_active_known, _reserved_within_available))

KLOG_FLAGS = ("add_dir_header", "alsologtostderr", "log_backtrace_at", "log_dir", "log_file", "log_file_max_size",
              "logtostderr", "one_output", "skip_headers", "skip_log_headers", "stderrthreshold", "v", "vmodule")
_SCALAR = OneOf(Bool(), Int(minimum=None), Number(), Str(), expected="a scalar")

LOGGER = Struct({
    "Debug": StrList(comma_string=True),
    "LogSource": Ignored(Bool(), NOT_APPLIED),
    "Klog": Ignored(Struct({flag: _SCALAR for flag in KLOG_FLAGS}), NO_KLOG),
})

def _check_dump_rules(text: str) -> None:
    parse_dump_rules(text)  # DumpConfigError (a ValueError) names the rule


DUMP = Struct({
    "Config": Str(check=_check_dump_rules),
    "File": Str(),
    "Debug": Ignored(Bool(), "dumps are always logged at info level"),
    "Disabled": Ignored(Bool(), NOT_APPLIED),
})

def _check_sampling(text: str) -> None:
    if text.lower() not in ("disabled", "testing", "production"):
        float(text)  # ValueError: neither a name nor a ratio


SAMPLING = OneOf(Number(), Str(check=_check_sampling),
                 expected="a sampling ratio (0..1) or disabled/testing/production")

INSTRUMENTATION = Struct({
    "HTTPEndpoint": Str(),
    "PrometheusExport": Ignored(Bool(), NO_TRACING),
    "ReportPeriod": Ignored(Str(check=_check_duration), NO_TRACING),
    "Sampling": Ignored(SAMPLING, NO_TRACING),
    "JaegerCollector": Ignored(Str(), NO_TRACING),
    "JaegerAgent": Ignored(Str(), NO_TRACING),
})

_CONTROLLER_MODES = ("disabled", "disable", "required", "mandatory", "optional", "relaxed")


def _check_controller_mode(text: str) -> None:
    if text.lower() not in _CONTROLLER_MODES:
        raise ValueError(f"invalid mode {text!r}; expected one of: {', '.join(_CONTROLLER_MODES)}")


RESOURCE_MANAGER = Struct({
    "control": Struct({
        "Controllers": MapOf(Str(check=_check_controller_mode)),
        "page-migration": Ignored(Struct({
            "PageScanInterval": DURATION,
            "PageMoveInterval": DURATION,
            "MaxPageMoveCount": Int(),
        }), NO_PAGE_MIGRATION),
    }),
})

CPU = Struct({
    "classes": MapOf(Struct({
        "minFreq": Int(),
        "maxFreq": Int(),
        "energyPerformancePreference": Ignored(Int(), NO_ENERGY_PREFERENCE),
        "uncoreMinFreq": Int(),
        "uncoreMaxFreq": Int(),
    })),
})

# goresctrl's rdt.Config (v0.5.0, what upstream builds with) plus cri-resmgr's mode options.
_ALLOCATION = Opaque(None)  # "60%", ["100%"], {Code:..., Data:...} or per-cache-id maps
_RDT_CLASS = Struct({
    "l2Allocation": _ALLOCATION,
    "l3Allocation": _ALLOCATION,
    "mbAllocation": _ALLOCATION,
    "kubernetes": Struct({"denyPodAnnotation": Bool(), "denyContainerAnnotation": Bool()}),
})
RDT = Struct({
    "options": Struct({
        "mode": Str(choices=("Disabled", "Discovery", "Full")),
        "monitoringDisabled": Ignored(Bool(), NO_RDT_MONITORING),
        "l2": Struct({"optional": Bool()}),
        "l3": Struct({"optional": Bool()}),
        "mb": Struct({"optional": Bool()}),
    }),
    "partitions": MapOf(Struct({
        "l2Allocation": _ALLOCATION,
        "l3Allocation": _ALLOCATION,
        "mbAllocation": _ALLOCATION,
        "classes": MapOf(_RDT_CLASS),
    })),
})

# Values are checked when the block I/O controller takes the section (resmgr/control/blockio.py): a bad one turns
# that controller off (Relaxed) or refuses the config (Required), as upstream's controller modes do; a config that
# upstream runs with a bad block I/O class (the controller off) must keep running here.
_IO_VALUE = OneOf(Str(), Int(), expected="a number or a quantity like 50M")
BLOCKIO = Struct({
    "Classes": MapOf(ListOf(Struct({
        "Devices": StrList(),
        "ThrottleReadBps": _IO_VALUE,
        "ThrottleWriteBps": _IO_VALUE,
        "ThrottleReadIOPS": _IO_VALUE,
        "ThrottleWriteIOPS": _IO_VALUE,
        "Weight": _IO_VALUE,
    }))),
})

CONFIG = Struct({
    "policy": POLICY,
    "logger": LOGGER,
    "dump": DUMP,
    "instrumentation": INSTRUMENTATION,
    "resource-manager": RESOURCE_MANAGER,
    "cpu": CPU,
    "rdt": RDT,
    "blockio": BLOCKIO,
})


def check(data: Any) -> tuple[dict[str, Any], Findings]:
    """Validate a parsed config: (normalised config without ignored and unknown fields, what was left out)."""
    with collecting() as findings:
        config = CONFIG.check(data, "")
    return config, findings
