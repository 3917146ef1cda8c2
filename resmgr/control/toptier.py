"""Top tier memory limits (memory tiers): Adjustments' ``toptierLimit`` and the pod annotation
``toptierlimit.cri-resource-manager.intel.com`` (``/pod``, ``/container.<name>``), as upstream's
memory controller applies them: written after the container started (and again when an Adjustment
changes it) to ``memory.toptier_soft_limit_in_bytes`` in the container's cgroup v1 memory cgroup.

That file is only there on kernels carrying Intel's out-of-tree memory tiering patches; no mainline
kernel (and no cgroup v2 tree) has it. Without it, as upstream, nothing is written: the limit is
reported once as unsupported on this node. A container with no limit gets -1 (unlimited) written,
so a removed Adjustment takes its limit back.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from resmgr.config.constraints import parse_memory_quantity
from resmgr.control.cgroups import controller_root, is_unified
from resmgr.model.resources import ContainerInfo, preference_annotation

log = logging.getLogger("resmgr.control")

TOPTIER_FILE = "memory.toptier_soft_limit_in_bytes"
TOPTIER_LIMIT_KEY = "toptierlimit.cri-resource-manager.intel.com"
OVERRIDE_KEY = "toptier"  # the Adjustment's toptierLimit among a container's class overrides (bytes)
UNLIMITED = -1


class ToptierError(RuntimeError):
    """The limit could not be read or written."""


def supported(cgroup_root: Path) -> bool:
    """Whether this kernel's memory cgroup has top tier soft limits."""
    return not is_unified(cgroup_root) and (controller_root(cgroup_root, "memory") / TOPTIER_FILE).exists()


def toptier_limit(container: ContainerInfo, overrides: Mapping[str, str] | None = None) -> int:
    """The container's limit in bytes: the Adjustment's, else the annotation's, else UNLIMITED."""
    value = (overrides or {}).get(OVERRIDE_KEY)
    source = "Adjustment toptierLimit"
    if value is None:
        value, source = preference_annotation(container, TOPTIER_LIMIT_KEY), TOPTIER_LIMIT_KEY
    if value is None:
        return UNLIMITED
    try:
        return parse_memory_quantity(value)
    except ValueError as exc:
        raise ToptierError(f"{source}: {exc}") from None


def write_limit(memory_cgroup: Path, limit: int) -> None:
    try:
        (memory_cgroup / TOPTIER_FILE).write_text(f"{limit}\n")
    except OSError as exc:
        raise ToptierError(f"cannot write {memory_cgroup / TOPTIER_FILE}: {exc.strerror or exc}") from None
