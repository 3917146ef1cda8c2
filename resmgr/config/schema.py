"""Schema of cri-resource-manager's YAML configuration.

Matching follows what the Go implementation does when it decodes the YAML (via
JSON) into its option structs: field names match case-insensitively (so both
``CPU:`` and ``cpu:`` work), unknown fields are rejected, and types are strict (a
quoted ``"3"`` is not an integer, ``"true"`` is not a boolean). Sections whose
options this implementation does not interpret (``rdt``, ``blockio``, ...) are
accepted as opaque mappings so that existing configs keep working.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from typing import Any

from resmgr.config.constraints import parse_cpu_constraint, parse_cpu_quantity
from resmgr.config.errors import ConfigError

# Policies this cri-resmgr implements; resmgr.policy.registry must agree (tested).
POLICY_NAMES: tuple[str, ...] = ("none", "static", "topology-aware", "balloons")
# Policies cri-resource-manager knows but this implementation does not run.
FOREIGN_POLICY_NAMES: tuple[str, ...] = (
    "static-plus", "static-pools", "podpools", "memtier", "dynamic-pools")


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
    """A section this implementation passes through without interpreting it (within bounds)."""

    def __init__(self, kind: type = dict) -> None:
        self.kind = kind

    def check(self, value: Any, path: str) -> Any:
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


class ListOf(Spec):
    def __init__(self, item: Spec) -> None:
        self.item = item

    def check(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise ConfigError(path, f"expected a list, got {_type_name(value)}")
        return [self.item.check(v, f"{path}[{i}]") for i, v in enumerate(value)]


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
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(_join(path, str(key)), "field names must be strings")
            name = self._by_lower.get(key.lower())
            if name is None:
                known = ", ".join(self.fields)
                raise ConfigError(_join(path, key), f"unknown field; known fields here: {known}")
            if name in out:
                raise ConfigError(_join(path, key), f"given twice (also as {name!r})")
            out[name] = self.fields[name].check(item, _join(path, name))
        for name in self.required:
            if name not in out:
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
    "CPUClass": Str(),
    "PreferSpreadingPods": Bool(),
    "PreferPerNamespaceBalloon": Bool(),
    "PreferNewBalloons": Bool(),
    "ShareIdleCPUsInSame": Str(choices=("", "system", "package", "die", "numa", "core", "thread")),
}, required=("Name",), validators=(_balloon_type_checks,))


def _unique_balloon_names(section: dict[str, Any], path: str) -> None:
    seen: dict[str, int] = {}
    for i, bt in enumerate(section.get("BalloonTypes", [])):
        if bt["Name"] in seen:
            first = seen[bt["Name"]]
            raise ConfigError(f"{_join(path, 'BalloonTypes')}[{i}].Name",
                              f"duplicate balloon type name {bt['Name']!r} (also BalloonTypes[{first}])")
        seen[bt["Name"]] = i


BALLOONS = Struct({
    "PinCPU": Bool(),
    "PinMemory": Bool(),
    "IdleCPUClass": Str(),
    "ReservedPoolNamespaces": StrList(item_check=_check_glob),
    "AllocatorTopologyBalancing": Bool(),
    "BalloonTypes": ListOf(BALLOON_TYPE),
    "BalloonInstances": Opaque(list),
}, validators=(_unique_balloon_names,))

TOPOLOGY_AWARE = Struct({
    "PinCPU": Bool(),
    "PinMemory": Bool(),
    "PreferIsolatedCPUs": Bool(),
    "PreferSharedCPUs": Bool(),
    "ReservedPoolNamespaces": StrList(item_check=_check_glob),
    "ColocatePods": Bool(),
    "ColocateNamespaces": Bool(),
})

STATIC = Struct({"RelaxedIsolation": Bool()})


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
    active = policy.get("Active")
    if active is None or active in POLICY_NAMES:
        return
    if active in FOREIGN_POLICY_NAMES:
        problem = f"policy {active!r} is not implemented by this cri-resmgr"
    else:
        problem = f"unknown policy {active!r}"
    raise ConfigError(_join(path, "Active"), f"{problem}; available policies: {', '.join(POLICY_NAMES)}")


POLICY = Struct({
    "Active": Str(non_empty=True),
    "AvailableResources": ResourceMap(),
    "ReservedResources": ResourceMap(),
    "topology-aware": TOPOLOGY_AWARE,
    "balloons": BALLOONS,
    "static": STATIC,
    "static-plus": Opaque(),
    "static-pools": Opaque(),
    "podpools": Opaque(),
    "memtier": Opaque(),
    "dynamic-pools": Opaque(),
}, validators=(_active_known, _reserved_within_available))

LOGGER = Struct({
    "Debug": StrList(comma_string=True),
    "LogSource": Bool(),
    "Klog": Opaque(),
})

DUMP = Struct({"Config": Str(), "File": Str()})


def _check_duration(text: str) -> None:
    import re

    if not re.fullmatch(r"(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+|0", text.strip()):
        raise ValueError(f"invalid duration {text!r} (expected e.g. 30s, 1m30s)")


INSTRUMENTATION = Struct({
    "HTTPEndpoint": Str(),
    "PrometheusExport": Bool(),
    "ReportPeriod": Str(check=_check_duration),
    "SamplingRatePerMillion": Int(0, 1_000_000),
    "JaegerCollector": Str(),
    "JaegerAgent": Str(),
})

CONFIG = Struct({
    "policy": POLICY,
    "logger": LOGGER,
    "dump": DUMP,
    "instrumentation": INSTRUMENTATION,
    "resource-manager": Opaque(),
    "cpu": Opaque(),
    "blockio": Opaque(),
    "rdt": Opaque(),
    "memory": Opaque(),
    "control": Opaque(),
})

# Exposed for callers that want to check a quantity the same way the schema does.
parse_quantity_milli = parse_cpu_quantity
