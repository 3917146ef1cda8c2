"""Resource constraints of ``policy.AvailableResources`` / ``policy.ReservedResources``.

cri-resource-manager accepts a CPU constraint as a cpuset (``cpuset:0-3``, or a bare
list/range such as ``0-3`` or ``#5``), as a quantity (``750m``, ``2``, ``quantity:2``)
or as the cpuset of a cgroup (``cgroup:/path`` or an absolute path).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from resmgr.topology.cpuset import CpusetError, format_cpuset, parse_cpuset

_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(m?)\s*$")
# A Kubernetes quantity: decimal number (with an optional exponent) and a suffix; "2E" is 2 exa, not an exponent.
_MEMORY = re.compile(r"^\s*(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?\s*(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?\s*$")
# Exact integer arithmetic, not decimal.Decimal: importing decimal costs the relay 0.5 MB resident.
# (multiplier, power of ten): "m" is 10**-3.
_MEMORY_FACTORS = {None: (1, 0), "k": (1, 3), "M": (1, 6), "G": (1, 9), "T": (1, 12), "P": (1, 15), "E": (1, 18),
                   "Ki": (2**10, 0), "Mi": (2**20, 0), "Gi": (2**30, 0), "Ti": (2**40, 0), "Pi": (2**50, 0),
                   "Ei": (2**60, 0), "m": (1, -3)}
# Beyond any memory size; a larger exponent would only make the integer arithmetic slow.
_MAX_MEMORY_EXPONENT = 1000


@dataclass(frozen=True)
class CpuConstraint:
    """One CPU constraint: exactly one of ``cpus``, ``milli`` or ``cgroup`` is set."""

    kind: str  # "cpuset" | "quantity" | "cgroup"
    cpus: frozenset[int] | None = None
    milli: int | None = None
    cgroup: str | None = None

    def text(self) -> str:
        if self.kind == "cpuset":
            return "cpuset:" + format_cpuset(self.cpus or ())
        if self.kind == "quantity":
            return f"{self.milli}m"
        return "cgroup:" + (self.cgroup or "")

    def cpu_count(self) -> int | None:
        """Whole CPUs this constraint stands for (a quantity is rounded up)."""
        if self.kind == "cpuset":
            return len(self.cpus or ())
        if self.kind == "quantity":
            return math.ceil((self.milli or 0) / 1000)
        return None


def parse_cpu_quantity(text: str) -> int:
    """A Kubernetes CPU quantity ("750m", "2", "1.5") in milli-CPUs."""
    m = _QUANTITY.match(text)
    if not m:
        raise ValueError(f"invalid CPU quantity {text!r} (expected e.g. 2, 1.5 or 750m)")
    number, milli = m.groups()
    value = float(number) if not milli else float(number) / 1000
    return int(round(value * 1000))


def parse_memory_quantity(value: object) -> int:
    """A Kubernetes memory quantity (``512Mi``, ``1G``, ``2e3``, ``1048576``) in bytes; raises ValueError.

    Fractions of a byte (``500m``, ``1.5``) round up, as the API server rounds a quantity's value.
    """
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected a memory quantity like 512Mi, got {value!r}")
    if isinstance(value, int | float):
        return math.ceil(value)
    m = _MEMORY.match(value)
    if not m:
        raise ValueError(f"invalid memory quantity {value!r} (expected e.g. 512Mi or 1G)")
    whole, fraction, exponent, suffix = m.groups()
    fraction = fraction or ""
    multiplier, power = _MEMORY_FACTORS[suffix]
    power += int(exponent or 0) - len(fraction)
    if power > _MAX_MEMORY_EXPONENT:
        raise ValueError(f"memory quantity {value!r} is out of range")
    scaled = int(whole + fraction) * multiplier
    if power >= 0:
        return scaled * 10**power
    return -(-scaled // 10**-power)  # rounded up


def parse_cpu_constraint(value: object) -> CpuConstraint:
    """Parse a CPU constraint value as written in a config; raises ValueError."""
    if isinstance(value, bool) or value is None:
        raise ValueError(f"expected a cpuset or a CPU quantity, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"CPU quantity must not be negative, got {value!r}")
        return CpuConstraint("quantity", milli=int(round(value * 1000)))
    if not isinstance(value, str):
        raise ValueError(f"expected a cpuset or a CPU quantity string, got {type(value).__name__}")
    text = value.strip()
    if not text:
        raise ValueError("empty CPU constraint")
    try:
        if ":" in text:
            qualifier, _, rest = text.partition(":")
            if qualifier == "cpuset":
                return CpuConstraint("cpuset", cpus=parse_cpuset(rest))
            if qualifier == "quantity":
                return CpuConstraint("quantity", milli=parse_cpu_quantity(rest))
            if qualifier == "cgroup":
                if not rest.strip():
                    raise ValueError("empty cgroup path")
                return CpuConstraint("cgroup", cgroup=rest.strip())
            raise ValueError(f"unknown qualifier {qualifier!r} (expected cpuset:, quantity: or cgroup:)")
        if text.startswith("#"):
            return CpuConstraint("cpuset", cpus=parse_cpuset(text[1:]))
        if text.startswith("/"):
            return CpuConstraint("cgroup", cgroup=text)
        if "-" in text or "," in text:
            return CpuConstraint("cpuset", cpus=parse_cpuset(text))
        return CpuConstraint("quantity", milli=parse_cpu_quantity(text))
    except CpusetError as exc:
        raise ValueError(str(exc)) from None
