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
"""

from __future__ import annotations

import contextvars
import difflib
import fnmatch
import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from resmgr.config.constraints import parse_cpu_constraint, parse_cpu_quantity
from resmgr.config.errors import ConfigError
from resmgr.config.pool_sizes import parse_instances, parse_pool_cpus

log = logging.getLogger("resmgr.config")

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


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string",
            list: "list", dict: "mapping"}.get(type(value), type(value).__name__)


class Spec:
    """Checks one value and returns its normalised form."""

    def check(self, value: Any, path: str) -> Any:  # pragma: no cover - interface
        raise NotImplementedError


class Bool(Spec):
    def check(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"expected true or false, got {_type_name(value)} {value!r}")
        return value


class Int(Spec):
    def __init__(self, minimum: int | None = 0, maximum: int | None = None) -> None:
        self.minimum, self.maximum = minimum, maximum

    def check(self, value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, f"expected an integer, got {_type_name(value)} {value!r}")
        if self.minimum is not None and value < self.minimum:
            raise ConfigError(path, f"must be >= {self.minimum}, got {value}")
        if self.maximum is not None and value > self.maximum:
            raise ConfigError(path, f"must be <= {self.maximum}, got {value}")
        return value


class Str(Spec):
    def __init__(self, choices: tuple[str, ...] | None = None, non_empty: bool = False,
                 check: Callable[[str], None] | None = None) -> None:
        self.choices, self.non_empty, self.extra = choices, non_empty, check

    def check(self, value: Any, path: str) -> str:
        if not isinstance(value, str):
            raise ConfigError(path, f"expected a string, got {_type_name(value)} {value!r}")
        if self.non_empty and not value.strip():
            raise ConfigError(path, "must not be empty")
        if self.choices is not None and value not in self.choices:
            raise ConfigError(path, f"unknown value {value!r}; expected one of: {', '.join(self.choices)}")
        if self.extra is not None:
            try:
                self.extra(value)
            except ValueError as exc:
                raise ConfigError(path, str(exc)) from None
        return value


class StrList(Spec):
    """A list of strings; ``comma_string`` also accepts "a,b" (cri-resmgr's flag form)."""

    def __init__(self, comma_string: bool = False, item_check: Callable[[str], None] | None = None) -> None:
        self.comma_string, self.item_check = comma_string, item_check

    def check(self, value: Any, path: str) -> list[str]:
        if self.comma_string and isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if value is None:
            return []
        if not isinstance(value, list):
            raise ConfigError(path, f"expected a list of strings, got {_type_name(value)} {value!r}")
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise ConfigError(f"{path}[{i}]", f"expected a string, got {_type_name(item)} {item!r}")
            if self.item_check is not None:
                try:
                    self.item_check(item)
                except ValueError as exc:
                    raise ConfigError(f"{path}[{i}]", str(exc)) from None
            out.append(item)
        return out


# Bounds no real config comes near (upstream's deepest is 6 levels, the largest a few hundred
# values) that stop bombs before they cost memory or a stack; the YAML loader applies them while
# parsing, and opaque sections are held to them again, whatever produced them (JSON, a cache file).
MAX_DEPTH = 64
MAX_NODES = 100_000


def check_bounded(value: Any, path: str) -> None:
    """Raise ConfigError if ``value`` nests deeper than MAX_DEPTH or has more than MAX_NODES
    values, each shared reference counted once per use (as a serializer would write it)."""
    count = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > MAX_NODES:
            raise ConfigError(path, f"has more than {MAX_NODES} values (YAML aliases count once per use)")
        if depth > MAX_DEPTH:
            raise ConfigError(path, f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


class Opaque(Spec):
    """A value passed through without interpreting it (within bounds); ``kind`` None takes any type."""

    def __init__(self, kind: type | None = dict) -> None:
        self.kind = kind

    def check(self, value: Any, path: str) -> Any:
        if self.kind is None:
            check_bounded(value, path)
            return value
        if value is None:
            return self.kind()
        if not isinstance(value, self.kind):
            raise ConfigError(path, f"expected a {_type_name(self.kind())}, got {_type_name(value)}")
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, str):
                    raise ConfigError(_join(path, str(key)), "keys must be strings")
        check_bounded(value, path)
        return value


class OneOf(Spec):
    """The first of ``specs`` that accepts the value (upstream types that decode several JSON forms)."""

    def __init__(self, *specs: Spec, expected: str) -> None:
        self.specs, self.expected = specs, expected

    def check(self, value: Any, path: str) -> Any:
        for spec in self.specs:
            try:
                return spec.check(value, path)
            except ConfigError:
                continue
        raise ConfigError(path, f"expected {self.expected}, got {_type_name(value)} {value!r}")


class Number(Spec):
    def check(self, value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(path, f"expected a number, got {_type_name(value)} {value!r}")
        return value


# -- accepted but not applied, and unknown ----------------------------------------------------------
@dataclass
class Findings:
    """What a check met that is no reason to refuse the config, in document order."""

    ignored: list[str] = field(default_factory=list)  # paths of known fields this cri-resmgr does not apply
    unknown: list[str] = field(default_factory=list)  # "path (did you mean 'X'?)" of fields nobody knows


# The findings of the check() in progress (None: nobody collects).
_FINDINGS: contextvars.ContextVar[Findings | None] = contextvars.ContextVar("resmgr_config_findings", default=None)
# What Ignored.check returns: Struct and MapOf leave such a field out of the normalised config.
_DROP = object()


def note_ignored(path: str) -> None:
    """Record that the field at ``path`` was accepted but will not be applied."""
    found = _FINDINGS.get()
    if found is not None and path not in found.ignored:
        found.ignored.append(path)


def note_unknown(entry: str) -> None:
    """Record an unknown field (its path and suggestion); with nobody collecting, the log says it."""
    found = _FINDINGS.get()
    if found is None:
        log.warning("%s", unknown_summary([entry]), extra={"unknown_fields": [entry]})
    elif entry not in found.unknown:
        found.unknown.append(entry)


@contextmanager
def collecting() -> Iterator[Findings]:
    """Collect the ignored and unknown fields met by the checks run inside the block."""
    found = Findings()
    token = _FINDINGS.set(found)
    try:
        yield found
    finally:
        _FINDINGS.reset(token)


class Ignored(Spec):
    """A field cri-resource-manager knows and this cri-resmgr does not apply: checked, reported, dropped.

    ``why`` says what is missing, for the compatibility table (docs/upstream-compat.md)."""

    def __init__(self, inner: Spec, why: str) -> None:
        self.inner, self.why = inner, why

    def check(self, value: Any, path: str) -> Any:
        self.inner.check(value, path)
        note_ignored(path)
        return _DROP


class ListOf(Spec):
    def __init__(self, item: Spec) -> None:
        self.item = item

    def check(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise ConfigError(path, f"expected a list, got {_type_name(value)}")
        return [self.item.check(v, f"{path}[{i}]") for i, v in enumerate(value)]


class MapOf(Spec):
    """A mapping of user-chosen names (classes, partitions, ...) to values of one kind."""

    def __init__(self, value: Spec) -> None:
        self.value = value

    def check(self, value: Any, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ConfigError(path, f"expected a mapping, got {_type_name(value)}")
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(_join(path, str(key)), "keys must be strings")
            checked = self.value.check(item, _join(path, key))
            if checked is not _DROP:
                out[key] = checked
        return out


def did_you_mean(name: str, candidates: list[str]) -> str:
    """' (did you mean X?)' for the closest known spelling, or ''."""
    by_lower = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


class Struct(Spec):
    """A mapping with known fields, matched case-insensitively like Go's JSON decoder."""

    def __init__(self, fields: dict[str, Spec], *, required: tuple[str, ...] = (),
                 validators: tuple[Callable[[dict[str, Any], str], None], ...] = ()) -> None:
        self.fields = fields
        self.required = required
        self.validators = validators
        self._by_lower = {name.lower(): name for name in fields}

    def check(self, value: Any, path: str) -> dict[str, Any]:
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise ConfigError(path or "<document>", f"expected a mapping, got {_type_name(value)} {value!r}")
        out: dict[str, Any] = {}
        seen: set[str] = set()
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(_join(path, str(key)), "field names must be strings")
            name = self._by_lower.get(key.lower())
            if name is None:
                # Upstream's decoder skips it (its value unchecked: its type is unknown too); so do we, saying so.
                note_unknown(_join(path, key) + did_you_mean(key, list(self.fields)))
                continue
            if name in seen:
                raise ConfigError(_join(path, key), f"given twice (also as {name!r})")
            seen.add(name)
            checked = self.fields[name].check(item, _join(path, name))
            if checked is not _DROP:
                out[name] = checked
        for name in self.required:
            if name not in seen:
                raise ConfigError(_join(path, name), "is required")
        for validator in self.validators:
            validator(out, path)
        return out


class ResourceMap(Spec):
    """``AvailableResources`` / ``ReservedResources``: resource name -> constraint."""

    def check(self, value: Any, path: str) -> dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ConfigError(path, f"expected a mapping like 'cpu: cpuset:0-3', got {_type_name(value)}")
        out: dict[str, str] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(_join(path, str(key)), "resource names must be strings")
            name = key.lower()
            field = _join(path, name)
            if name in out:
                raise ConfigError(field, "given twice")
            if name == "cpu":
                try:
                    out[name] = parse_cpu_constraint(item).text()
                except ValueError as exc:
                    raise ConfigError(field, str(exc)) from None
            elif name == "memory":
                if isinstance(item, bool) or not isinstance(item, str | int):
                    raise ConfigError(field, f"expected a memory quantity, got {_type_name(item)}")
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
        raise ConfigError(_join(path, "MinCPUs"),
                          f"MinCPUs ({bt['MinCPUs']}) is larger than MaxCPUs ({max_cpus})")
    max_balloons = bt.get("MaxBalloons", 0)
    if max_balloons and bt.get("MinBalloons", 0) > max_balloons:
        raise ConfigError(_join(path, "MinBalloons"),
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
                raise ConfigError(f"{_join(path, list_field)}[{i}].Name",
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
            raise ConfigError(_join(path, name), str(exc)) from None


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
    field = _join(path, "ReservedResources.cpu")
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
    field = _join(path, "Active")
    if active in ALIAS_POLICIES:
        target = ALIAS_POLICIES[active]
        policy["Active"] = target
        if active in policy:
            if target in policy:
                note_ignored(_join(path, target))  # upstream reads the alias's own section
            policy[target] = policy.pop(active)
        return
    for alias in ALIAS_POLICIES:
        if alias in policy:
            note_ignored(_join(path, alias))
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

DUMP = Struct({
    "Config": Str(),
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


def ignored_summary(ignored: list[str]) -> str:
    """The one wording every component reports ignored fields with ('' when there are none)."""
    if not ignored:
        return ""
    return "accepted, not implemented by this cri-resmgr, ignored: " + ", ".join(ignored)


def unknown_summary(unknown: list[str]) -> str:
    """The one wording every component warns about unknown fields with ('' when there are none)."""
    if not unknown:
        return ""
    return f"unknown field{'s' if len(unknown) > 1 else ''}, left out of the config: " + ", ".join(unknown)


# Exposed for callers that want to check a quantity the same way the schema does.
parse_quantity_milli = parse_cpu_quantity
