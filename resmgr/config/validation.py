"""The validation kit: specs that check a parsed YAML/JSON value against a declared shape.

A ``Spec`` checks one value and returns its normalised form, or raises ``ConfigError`` with the
dotted path of the culprit (``policy.balloons.BalloonTypes[0].MinCPUs``). ``Struct`` matches field
names case-insensitively, like Go's JSON decoder; a field it does not know is left out and
recorded as unknown (with a "did you mean"), a field wrapped in ``Ignored`` is checked, then left
out and recorded as ignored. Which fields cri-resource-manager's config has is declared in
``resmgr.config.schema``; nothing here knows about it.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from resmgr.config.errors import ConfigError

log = logging.getLogger("resmgr.config")


def join_path(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def type_name(value: Any) -> str:
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
            raise ConfigError(path, f"expected true or false, got {type_name(value)} {value!r}")
        return value


class Int(Spec):
    def __init__(self, minimum: int | None = 0, maximum: int | None = None) -> None:
        self.minimum, self.maximum = minimum, maximum

    def check(self, value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, f"expected an integer, got {type_name(value)} {value!r}")
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
            raise ConfigError(path, f"expected a string, got {type_name(value)} {value!r}")
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
            raise ConfigError(path, f"expected a list of strings, got {type_name(value)} {value!r}")
        out = []
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise ConfigError(f"{path}[{i}]", f"expected a string, got {type_name(item)} {item!r}")
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
            raise ConfigError(path, f"expected a {type_name(self.kind())}, got {type_name(value)}")
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, str):
                    raise ConfigError(join_path(path, str(key)), "keys must be strings")
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
        raise ConfigError(path, f"expected {self.expected}, got {type_name(value)} {value!r}")


class Number(Spec):
    def check(self, value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(path, f"expected a number, got {type_name(value)} {value!r}")
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
DROP = object()


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
        return DROP


class ListOf(Spec):
    def __init__(self, item: Spec) -> None:
        self.item = item

    def check(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise ConfigError(path, f"expected a list, got {type_name(value)}")
        return [self.item.check(v, f"{path}[{i}]") for i, v in enumerate(value)]


class MapOf(Spec):
    """A mapping of user-chosen names (classes, partitions, ...) to values of one kind."""

    def __init__(self, value: Spec) -> None:
        self.value = value

    def check(self, value: Any, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ConfigError(path, f"expected a mapping, got {type_name(value)}")
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(join_path(path, str(key)), "keys must be strings")
            checked = self.value.check(item, join_path(path, key))
            if checked is not DROP:
                out[key] = checked
        return out


def did_you_mean(name: str, candidates: list[str]) -> str:
    """' (did you mean X?)' for the closest known spelling, or ''."""
    import difflib  # only for a config with a mistake in it: 0.4 MB the relay otherwise never needs

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
            raise ConfigError(path or "<document>", f"expected a mapping, got {type_name(value)} {value!r}")
        out: dict[str, Any] = {}
        seen: set[str] = set()
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(join_path(path, str(key)), "field names must be strings")
            name = self._by_lower.get(key.lower())
            if name is None:
                # Upstream's decoder skips it (its value unchecked: its type is unknown too); so do we, saying so.
                note_unknown(join_path(path, key) + did_you_mean(key, list(self.fields)))
                continue
            if name in seen:
                raise ConfigError(join_path(path, key), f"given twice (also as {name!r})")
            seen.add(name)
            checked = self.fields[name].check(item, join_path(path, name))
            if checked is not DROP:
                out[name] = checked
        for name in self.required:
            if name not in seen:
                raise ConfigError(join_path(path, name), "is required")
        for validator in self.validators:
            validator(out, path)
        return out


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
