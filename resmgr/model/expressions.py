"""cri-resource-manager's expression language: one ``key operator values`` test against a container.

Adjustment scopes and container affinities both select containers with these
expressions, so both use this one implementation. The semantics follow upstream
(``pkg/apis/resmgr/expression.go``):

- keys are paths resolved against the container: ``name``, ``namespace``,
  ``qosclass``, ``id``, ``labels/<key>``, ``tags/<key>``, and ``pod/<pod key>``
  with the pod keys ``name``, ``namespace``, ``qosclass``, ``id``, ``uid``,
  ``labels/<key>``. A bare key containing a dot is a label (``io.kubernetes.pod.name``
  means ``labels/io.kubernetes.pod.name``). ``annotations/<key>`` and
  ``pod/annotations/<key>`` are our addition;
- joint keys join several keys' values: ``:pod/name:name`` (colon-separated) or
  ``:<ksep><vsep>key<ksep>key...``; a joint key exists if any part exists;
- ``Equals`` and ``In`` treat the value ``*`` as "any value"; the ``Matches*``
  operators use Go's ``filepath.Match`` globs (``*`` and ``?`` stop at ``/``,
  ``[^...]`` negates, ``\\`` escapes), and a key that does not exist matches only
  the negated operators.

Where we differ: a label key containing ``/`` (``labels/app.kubernetes.io/name``)
is looked up whole, where upstream looks up ``app.kubernetes.io`` and drops the
rest; malformed glob patterns are errors when parsed, where upstream silently
never matches them.
"""

from __future__ import annotations

import functools
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from resmgr.model.resources import POD_UID_LABEL

OPERATORS = ("Equals", "NotEqual", "In", "NotIn", "Exists", "NotExist", "AlwaysTrue",
             "Matches", "MatchesNot", "MatchesAny", "MatchesNone")
_NO_VALUES = ("Exists", "NotExist", "AlwaysTrue")
_ONE_VALUE = ("Equals", "NotEqual", "Matches", "MatchesNot")
_SOME_VALUES = ("In", "NotIn", "MatchesAny", "MatchesNone")
_GLOB_OPERATORS = ("Matches", "MatchesNot", "MatchesAny", "MatchesNone")
# A missing key equals nothing and matches no pattern: only the negated operators hold.
_TRUE_WHEN_MISSING = ("NotEqual", "NotIn", "MatchesNot", "MatchesNone", "NotExist")


class ExpressionError(ValueError):
    """An expression is invalid; ``field`` is the dotted path of the culprit."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"invalid expression field {field}: {problem}")


class Evaluable(Protocol):
    """What an expression is evaluated against: one path element at a time."""

    def eval_key(self, key: str) -> str | Mapping[str, str] | Evaluable | None:
        """The value of ``key``: a string, a mapping (labels), a nested subject (pod), None if unknown."""


class _KeyTable:
    """``eval_key`` by a table of expression key -> attribute."""

    _KEYS: ClassVar[dict[str, str]] = {}

    def eval_key(self, key: str) -> Any:
        attr = self._KEYS.get(key)
        return None if attr is None else getattr(self, attr)


@dataclass(frozen=True)
class PodView(_KeyTable):
    """The pod part of a ``ContainerView`` (``pod/...`` keys)."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    id: str = ""
    qos_class: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)

    _KEYS: ClassVar[dict[str, str]] = {"name": "name", "namespace": "namespace", "qosclass": "qos_class", "id": "id",
                                       "uid": "uid", "labels": "labels", "annotations": "annotations"}


@dataclass(frozen=True)
class ContainerView(_KeyTable):
    """What expressions can look at in a container (adjustment scopes, affinities)."""

    id: str
    name: str
    namespace: str = ""
    pod_name: str = ""
    pod_uid: str = ""
    pod_id: str = ""
    qos_class: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    pod_annotations: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)

    _KEYS: ClassVar[dict[str, str]] = {"pod": "pod", "name": "name", "namespace": "namespace", "qosclass": "qos_class",
                                       "id": "id", "labels": "labels", "tags": "tags", "annotations": "annotations"}

    @property
    def pretty(self) -> str:
        """``namespace/pod/container``: stable across restarts, unlike the runtime's id."""
        return f"{self.namespace}/{self.pod_name}/{self.name}"

    @functools.cached_property
    def key_cache(self) -> dict[str, str | None]:
        """Resolved expression keys: a view is evaluated against many expressions (affinities, per decision)."""
        return {}

    @functools.cached_property
    def pod(self) -> PodView:
        return PodView(name=self.pod_name, namespace=self.namespace, uid=self.pod_uid, id=self.pod_id,
                       qos_class=self.qos_class, labels=self.pod_labels, annotations=self.pod_annotations)


@functools.lru_cache(maxsize=1024)
def _ref_path(spec: str) -> tuple[str, ...]:
    """A key's path elements, cleaned like Go's path.Clean; a bare dotted key names a label."""
    spec = posixpath.normpath(spec) if spec else "."
    if spec.startswith("//"):
        spec = spec[1:]
    if "/" not in spec and "." in spec:
        return ("labels", spec)
    return tuple(spec.split("/"))


def resolve_ref(subject: Evaluable, spec: str) -> str | None:
    """Walk ``subject`` along the path ``spec`` (upstream's ResolveRef); None if it leads nowhere."""
    ref = _ref_path(spec)
    obj: Any = subject
    for i, key in enumerate(ref):
        if isinstance(obj, str):
            return obj  # as upstream: path elements after a plain value are ignored
        if isinstance(obj, Mapping):
            # Label keys may themselves contain '/': look the rest of the path up whole.
            value = obj.get("/".join(ref[i:]))
            return value if isinstance(value, str) else None
        eval_key = getattr(obj, "eval_key", None)
        if eval_key is None:
            return None
        obj = eval_key(key)
        if obj is None:
            return None
    return obj if isinstance(obj, str) else None


def _valid_separator(ch: str) -> bool:
    return not (ch.isascii() and (ch.isalnum() or ch in "/."))


@functools.lru_cache(maxsize=1024)
def split_keys(key: str) -> tuple[tuple[str, ...], str]:
    """A joint key's parts and value separator (upstream's splitKeys); a plain key is one part."""
    if len(key) < 4 or key[0] != ":":
        return (key,), ""
    rest = key[1:]
    ksep, vsep = rest[0], rest[1]
    if _valid_separator(ksep) and _valid_separator(vsep):
        rest = rest[2:]
    else:
        ksep = vsep = ":"
    return tuple(rest.split(ksep)), vsep


def key_value(subject: Evaluable, key: str) -> str | None:
    """The value ``key`` (plain or joint) has in ``subject``; None if it does not exist."""
    cache = getattr(subject, "key_cache", None)
    if cache is not None and key in cache:
        return cache[key]
    keys, vsep = split_keys(key)
    if len(keys) == 1:
        value = resolve_ref(subject, keys[0])
    else:
        values = [resolve_ref(subject, k) for k in keys]
        value = None if all(v is None for v in values) else vsep.join(v or "" for v in values)
    if cache is not None:
        cache[key] = value
    return value


@functools.lru_cache(maxsize=1024)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    """Go's filepath.Match pattern as a regex; raises ValueError for a malformed pattern."""
    out, i, n = [], 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "\\":
            if i + 1 >= n:
                raise ValueError(f"malformed pattern {pattern!r}: trailing backslash")
            i += 1
            out.append(re.escape(pattern[i]))
        elif ch == "[":
            i += 1
            negate = i < n and pattern[i] == "^"
            if negate:
                i += 1
            ranges = []
            while True:
                if i >= n:
                    raise ValueError(f"malformed pattern {pattern!r}: unclosed '['")
                if pattern[i] == "]" and ranges:
                    break
                lo, i = _class_char(pattern, i)
                hi = lo
                if i < n and pattern[i] == "-":
                    hi, i = _class_char(pattern, i + 1)
                    if hi < lo:
                        raise ValueError(f"malformed pattern {pattern!r}: range {lo}-{hi}")
                ranges.append(re.escape(lo) if lo == hi else f"{re.escape(lo)}-{re.escape(hi)}")
            out.append(f"[{'^' if negate else ''}{''.join(ranges)}]")
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out), re.DOTALL)


def _class_char(pattern: str, i: int) -> tuple[str, int]:
    if i >= len(pattern) or pattern[i] in "-]":
        raise ValueError(f"malformed pattern {pattern!r}: bad character class")
    if pattern[i] == "\\":
        i += 1
        if i >= len(pattern):
            raise ValueError(f"malformed pattern {pattern!r}: trailing backslash")
    return pattern[i], i + 1


def glob_match(pattern: str, value: str) -> bool:
    """Go's ``filepath.Match`` on Linux; a malformed pattern matches nothing (as upstream)."""
    try:
        return _glob_regex(pattern).fullmatch(value) is not None
    except ValueError:
        return False


@dataclass(frozen=True)
class Expression:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, subject: Evaluable) -> bool:
        op, values = self.operator, self.values
        if op == "AlwaysTrue":
            return True
        cache = getattr(subject, "key_cache", None)
        value = cache[self.key] if cache is not None and self.key in cache else key_value(subject, self.key)
        if value is None:
            return op in _TRUE_WHEN_MISSING
        if op == "Exists":
            return True
        if op == "NotExist":
            return False
        if op == "Equals":
            return value == values[0] or values[0] == "*"
        if op == "NotEqual":
            return value != values[0]
        if op in ("In", "NotIn"):
            return (value in values or "*" in values) == (op == "In")
        if op in ("Matches", "MatchesNot"):
            return glob_match(values[0], value) == (op == "Matches")
        return any(glob_match(p, value) for p in values) == (op == "MatchesAny")

    def __str__(self) -> str:
        return f"<{self.key} {self.operator} {','.join(self.values)}>"


def parse_expression(raw: Any, path: str) -> Expression:
    """Validate one ``{key, operator, values}`` mapping; raises ExpressionError naming the field."""
    if not isinstance(raw, dict):
        raise ExpressionError(path, f"expected a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - {"key", "operator", "values"})
    if unknown:
        raise ExpressionError(f"{path}.{unknown[0]}", "unknown field; known fields: key, operator, values")
    op = raw.get("operator")
    if op not in OPERATORS:
        raise ExpressionError(f"{path}.operator",
                              f"unknown operator {op!r}; expected one of {', '.join(OPERATORS)}")
    key = raw.get("key", "")
    if op != "AlwaysTrue" and (not isinstance(key, str) or not key):
        raise ExpressionError(f"{path}.key", "a non-empty key is required")
    values = raw.get("values")
    if values is None:
        values = []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ExpressionError(f"{path}.values", f"expected a list of strings, got {values!r}")
    if op in _NO_VALUES and values:
        raise ExpressionError(f"{path}.values", f"operator {op} takes no values")
    if op in _ONE_VALUE and len(values) != 1:
        raise ExpressionError(f"{path}.values", f"operator {op} takes exactly one value, got {len(values)}")
    if op in _SOME_VALUES and not values:
        raise ExpressionError(f"{path}.values", f"operator {op} needs at least one value")
    if op in _GLOB_OPERATORS:
        for i, pattern in enumerate(values):
            try:
                _glob_regex(pattern)
            except ValueError as exc:
                raise ExpressionError(f"{path}.values[{i}]", str(exc)) from None
    return Expression(key=str(key or ""), operator=op, values=tuple(values))


def container_view(info: Any, pod: Any = None) -> ContainerView:
    """A ContainerView of the resource manager's ContainerInfo (and its PodInfo, if known).

    The mappings are shared, not copied: views are made per decision and never modified."""
    pod_labels = getattr(pod, "labels", None) or getattr(info, "pod_labels", None) or {}
    return ContainerView(
        id=str(getattr(info, "id", "")),
        name=str(getattr(info, "name", "")),
        namespace=str(getattr(info, "namespace", "") or getattr(pod, "namespace", "")),
        pod_name=str(getattr(info, "pod_name", "") or getattr(pod, "name", "")),
        pod_uid=str(getattr(pod, "uid", "") or pod_labels.get(POD_UID_LABEL, "")),
        pod_id=str(getattr(info, "pod_id", "")),
        qos_class=str(getattr(info, "qos", "") or ""),
        labels=getattr(info, "labels", None) or {},
        annotations=getattr(info, "annotations", None) or {},
        pod_labels=pod_labels,
        pod_annotations=getattr(info, "pod_annotations", None) or getattr(pod, "annotations", None) or {},
    )
