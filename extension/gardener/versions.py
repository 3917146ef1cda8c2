"""Semantic-version constraints as Gardener's image vector writes them.

Supports the Masterminds/semver forms used in image vectors: comparison
operators (=, !=, >, <, >=, <=, =<), tilde and caret ranges, x-wildcards,
comma/space separated AND and ``||`` separated OR.
"""

from __future__ import annotations

import re

Version = tuple[int, int, int]

_VERSION = re.compile(r"^v?(\d+)(?:\.(\d+|[xX*]))?(?:\.(\d+|[xX*]))?(?:[-+].*)?$")
_TERM = re.compile(r"^(>=|=>|<=|=<|!=|>|<|=|~>|~|\^)?\s*(\S+)$")


class ConstraintError(ValueError):
    """A constraint or version string cannot be parsed."""


def parse_version(text: str) -> Version:
    """Parse a full or partial version; missing parts count as 0."""
    m = _VERSION.match(text.strip())
    if not m or any(p is not None and not p.isdigit() for p in m.groups()):
        raise ConstraintError(f"not a version: {text!r}")
    major, minor, patch = (int(p) if p else 0 for p in m.groups())
    return major, minor, patch


def _parts(text: str) -> list[int | None]:
    """Numeric parts of a constraint version; None for a wildcard or a missing part."""
    m = _VERSION.match(text)
    if not m:
        raise ConstraintError(f"not a version in constraint: {text!r}")
    return [int(p) if p and p.isdigit() else None for p in m.groups()]


def _bump(parts: list[int | None], level: int) -> Version:
    """Smallest version above every version that shares the first ``level`` parts."""
    fixed = [p or 0 for p in parts[:level]]
    fixed[-1] += 1
    return tuple(fixed + [0] * (3 - level))  # type: ignore[return-value]


def _term(op: str, text: str) -> list[tuple[str, Version]]:
    """Translate one constraint term into simple comparisons."""
    parts = _parts(text)
    known = 0
    while known < 3 and parts[known] is not None:
        known += 1
    low: Version = tuple(p or 0 for p in parts)  # type: ignore[assignment]
    if op in ("", "="):
        if known == 3:
            return [("==", low)]
        if known == 0:
            return []
        return [(">=", low), ("<", _bump(parts, known))]
    if op == "!=":
        if known == 3:
            return [("!=", low)]
        raise ConstraintError(f"'!=' needs a full version, got {text!r}")
    if op in ("~", "~>"):
        return [(">=", low), ("<", _bump(parts, 2 if known >= 2 else 1))]
    if op == "^":
        level = 1
        if parts[0] == 0:
            level = 2 if known >= 2 and parts[1] != 0 else min(max(known, 1), 3)
        return [(">=", low), ("<", _bump(parts, level))]
    if op in (">=", "=>"):
        return [(">=", low)]
    if op == ">":
        return [(">=", _bump(parts, known))] if known < 3 else [(">", low)]
    if op in ("<=", "=<"):
        return [("<", _bump(parts, known))] if known < 3 else [("<=", low)]
    if op == "<":
        return [("<", low)]
    raise ConstraintError(f"unknown operator {op!r}")


def _holds(cmp: str, version: Version, bound: Version) -> bool:
    return {"==": version == bound, "!=": version != bound, ">=": version >= bound,
            ">": version > bound, "<": version < bound, "<=": version <= bound}[cmp]


def _and_terms(text: str) -> list[tuple[str, str]]:
    # Glue an operator to its version ("> = 1.2" and ">= 1.2" both mean ">=1.2").
    tokens = re.findall(r"(>=|=>|<=|=<|!=|~>|>|<|=|~|\^)?\s*(v?[0-9xX*][^\s,]*)", text)
    leftover = re.sub(r"(>=|=>|<=|=<|!=|~>|>|<|=|~|\^)?\s*(v?[0-9xX*][^\s,]*)", "", text)
    if leftover.replace(",", "").strip():
        raise ConstraintError(f"cannot parse constraint {text!r}")
    return list(tokens)


def matches(constraint: str, version: str) -> bool:
    """Does ``version`` satisfy ``constraint``? Raises ConstraintError when either is malformed."""
    target = parse_version(version)
    alternatives = [alt for alt in constraint.split("||")]
    if not constraint.strip():
        raise ConstraintError("empty constraint")
    for alternative in alternatives:
        terms = _and_terms(alternative)
        if not terms:
            raise ConstraintError(f"empty alternative in constraint {constraint!r}")
        if all(_holds(cmp, target, bound) for op, text in terms for cmp, bound in _term(op, text)):
            return True
    return False


def check_constraint(constraint: str) -> None:
    """Raise ConstraintError if ``constraint`` does not parse."""
    matches(constraint, "0.0.0")
