"""Linux cpuset/cpulist strings ("0-3,8,10-11") to and from sets of ints."""

from __future__ import annotations

from collections.abc import Iterable

# The kernel's NR_CPUS is at most 8192; anything larger is a typo, not a machine.
MAX_CPU_ID = 8191


class CpusetError(ValueError):
    """A cpuset/cpulist string that is not well formed."""


def parse_cpuset(text: str) -> frozenset[int]:
    """Parse a Linux cpulist ("0-3,8"); the empty string is the empty set."""
    text = text.strip()
    if not text:
        return frozenset()
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise CpusetError(f"empty element in cpuset {text!r}")
        lo_s, sep, hi_s = part.partition("-")
        try:
            lo = int(lo_s)
            hi = int(hi_s) if sep else lo
        except ValueError:
            raise CpusetError(f"invalid element {part!r} in cpuset {text!r}") from None
        if lo < 0 or hi < 0 or lo_s.strip() != lo_s or (sep and hi_s.strip() != hi_s):
            raise CpusetError(f"invalid element {part!r} in cpuset {text!r}")
        if hi < lo:
            raise CpusetError(f"descending range {part!r} in cpuset {text!r}")
        if hi > MAX_CPU_ID:
            raise CpusetError(f"CPU id {hi} in cpuset {text!r} is above {MAX_CPU_ID}")
        out.update(range(lo, hi + 1))
    return frozenset(out)


def format_cpuset(cpus: Iterable[int]) -> str:
    """Format a set of ints as the canonical, sorted Linux cpulist."""
    ids = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)
