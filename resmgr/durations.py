"""Go duration strings (``1m30s``), as upstream's flags and policy options spell them.

A leaf module: the option table and the policies both read durations, so neither imports the other.
"""

from __future__ import annotations

import re
from typing import Any

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(value: Any) -> float:
    """Seconds in a Go duration (``1m30s``, ``-5s``) or an integer of nanoseconds; raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, int):
        return value / 1e9
    text = value.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(body):
        m = _DURATION_PART.match(body, pos)
        if m is None:
            raise ValueError(f"invalid duration {value!r} (expected e.g. 30s, 1m30s)")
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    if not body:
        raise ValueError(f"invalid duration {value!r} (expected e.g. 30s, 1m30s)")
    return sign * total
