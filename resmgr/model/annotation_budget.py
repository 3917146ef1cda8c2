"""What the resource manager keeps of a pod's or container's annotations (and labels): a budget.

Containers live for weeks and their info is kept in memory and in the cache file, while a
CreateContainer may carry megabytes of annotations (``last-applied-configuration``, workflow
templates; the relay passes up to 16 MiB). Keeping them whole made the relay's RSS grow by the
size of every annotated container. Who reads them afterwards:

* the policies: only cri-resource-manager's own keys (``*cri-resource-manager.intel.com*``,
  e.g. the balloon and prefer-shared/isolated annotations) and ``intel.com/resources`` (read at
  create time, kept for completeness). These are always kept whole;
* Adjustment scopes (resmgr.configplane.adjustments): expressions may name ANY annotation or
  label key, with Exists/NotExist, Equals/In or glob Matches on its value. So every key is kept
  (up to ``MAX_KEYS`` per container, in sorted order), and each value up to ``VALUE_BYTES``;
  a longer value keeps its first ``VALUE_BYTES`` bytes followed by ``TRUNCATED``. An expression
  on such a value still sees the key (Exists) and its prefix (``Matches: prefix*``), but Equals
  against the whole long value no longer matches: the documented price of the budget. Past
  ``TOTAL_BYTES`` of values per table, values are kept empty (the key still exists). Keys past
  ``MAX_KEYS`` are dropped (Kubernetes caps a pod's annotations at 256 KiB, so real pods rarely
  get there).
"""

from __future__ import annotations

from collections.abc import Mapping

# cri-resource-manager's webhook puts the pod's real resource requirements here (see resmgr.model.resources).
RESOURCES_ANNOTATION = "intel.com/resources"
MAX_KEYS = 256
VALUE_BYTES = 1024
TOTAL_BYTES = 64 * 1024
TRUNCATED = "…[truncated by cri-resmgr]"
POLICY_KEY_MARK = "cri-resource-manager.intel.com"


def policy_relevant(key: str) -> bool:
    """Keys a policy reads: kept whole whatever their size."""
    return POLICY_KEY_MARK in key or key == RESOURCES_ANNOTATION


def within_budget(table: Mapping[str, str]) -> dict[str, str]:
    """``table`` as the resource manager keeps it (the same dict's contents if it fits, the common case)."""
    if len(table) <= MAX_KEYS and sum(len(v) for v in table.values()) <= TOTAL_BYTES and \
            all(len(v) <= VALUE_BYTES for v in table.values()):
        return dict(table)
    kept: dict[str, str] = {}
    used = 0
    others = 0
    for key in sorted(table):
        value = table[key]
        if policy_relevant(key):
            kept[key] = value
            continue
        others += 1
        if others > MAX_KEYS:
            continue
        if len(value) > VALUE_BYTES:
            value = value[:VALUE_BYTES] + TRUNCATED
        if used + len(value) > TOTAL_BYTES:
            value = ""
        used += len(value)
        kept[key] = value
    return kept
