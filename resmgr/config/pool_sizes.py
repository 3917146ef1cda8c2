"""podpools' pool sizes: ``CPU`` (CPUs per pool instance) and ``Instances`` (how many), parsed as upstream does.

``Instances`` is one of: empty (one instance), ``N`` (N instances), ``N CPUs`` (at most N CPUs for all
instances, also ``N CPU``/``Ncpus``, any case) or ``N %`` (at most N % of the CPUs that are neither
reserved nor taken by a customised default pool). Numbers are read like Go's ``strconv.ParseInt`` with
base 0 (``0x10``, ``0o20``, ``020`` and ``16`` are all sixteen), since upstream reads them that way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_GO_INT = re.compile(r"([+-]?)(0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+|0[0-7_]*|[1-9][0-9_]*)")
_INT32 = 1 << 31


def go_parse_int(text: str) -> int:
    """Go's ``strconv.ParseInt(text, 0, 32)``; raises ValueError."""
    m = _GO_INT.fullmatch(text)
    if m is None:
        raise ValueError(f"not an integer: {text!r}")
    sign, body = m.groups()
    if len(body) > 1 and body[0] == "0" and body[1] not in "xXoObB":
        body = "0o" + body[1:]  # Go's legacy octal
    value = int(sign + body, 0)  # also rejects misplaced underscores, as Go does
    if not -_INT32 <= value < _INT32:
        raise ValueError(f"out of the 32-bit range: {text!r}")
    return value


def parse_pool_cpus(value: str | int | None) -> int:
    """CPUs per pool instance (``CPU``): a whole number > 0; raises ValueError."""
    if value is None or value == "":
        raise ValueError("missing CPUs: every pool instance needs CPU: <number of CPUs>")
    try:
        count = value if isinstance(value, int) else go_parse_int(value)
    except ValueError:
        count = 0
    if count <= 0:
        raise ValueError(f"invalid CPUs per pool: {value!r}, a whole number > 0 expected (e.g. 2)")
    return count


@dataclass(frozen=True)
class Instances:
    """A parsed ``Instances``: ``kind`` is "count", "cpus" or "percent"."""

    kind: str
    value: int

    def count(self, cpus_per_pool: int, free_cpus: int) -> int:
        """How many instances of ``cpus_per_pool`` CPUs; ``free_cpus`` is what the percentage refers to.
        Raises ValueError if a CPU budget is larger than ``free_cpus``."""
        if self.kind == "count":
            return self.value
        if self.kind == "percent":
            return free_cpus * self.value // 100 // cpus_per_pool
        if self.value > free_cpus:
            raise ValueError(f"insufficient CPUs: {self.value} required for instances but {free_cpus} are available")
        return self.value // cpus_per_pool


def parse_instances(value: str | int | None) -> Instances:
    """Parse ``Instances``; raises ValueError naming the value."""
    if value is None or value == "":
        return Instances("count", 1)
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"invalid Instances: {value!r}, expected N, 'N CPUs' or 'N %'")
        return Instances("count", value)
    kind, number = "count", value
    if value.endswith("%"):
        kind, number = "percent", value[:-1].strip()
    else:
        lower = value.lower()
        for suffix in ("cpus", "cpu"):
            if lower.endswith(suffix):
                kind, number = "cpus", lower[: -len(suffix)].strip()
                break
    try:
        n = go_parse_int(number)
    except ValueError:
        n = -1
    if n < 0:
        raise ValueError(f"invalid Instances: {value!r}, expected N, 'N CPUs' or 'N %'")
    return Instances(kind, n)
