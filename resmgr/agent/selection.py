"""Which dynamic-config ConfigMap applies to a node: a pure function of names, labels and ConfigMaps.

In ``kube-system``, in order of precedence: ``cri-resmgr-config.node.<NODE>``, then
``cri-resmgr-config.pool.<POOL>`` where the pool is the node's Gardener worker pool (its
``worker.gardener.cloud/pool`` label), then ``cri-resmgr-config.group.<GROUP>`` where the group
is the node's ``cri-resource-manager.intel.com/group`` label, then ``cri-resmgr-config.default``.
The first one that exists wins as a whole; ConfigMaps are never merged. cri-resource-manager
knows node, group and default; pool is ours, so a shoot can configure per worker pool without
labelling nodes by hand.

The extension checks pool config names with ``pool_name_problem``, so a pool config it accepts is
one the agent looks for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CONFIG_NAMESPACE = "kube-system"
CONFIG_MAP_PREFIX = "cri-resmgr-config."
DEFAULT_CONFIG_MAP = "cri-resmgr-config.default"
GROUP_LABEL = "cri-resource-manager.intel.com/group"
POOL_LABEL = "worker.gardener.cloud/pool"

_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE_MAX = 63
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_OBJECT_NAME_MAX = 253


def node_config_map(node: str) -> str:
    return f"{CONFIG_MAP_PREFIX}node.{node}"


def pool_config_map(pool: str) -> str:
    return f"{CONFIG_MAP_PREFIX}pool.{pool}"


def group_config_map(group: str) -> str:
    return f"{CONFIG_MAP_PREFIX}group.{group}"


def node_group(labels: Mapping[str, str] | None) -> str:
    """The node's config group from its labels ("" when it has none)."""
    return ((labels or {}).get(GROUP_LABEL) or "").strip()


def node_pool(labels: Mapping[str, str] | None) -> str:
    """The node's Gardener worker pool from its labels ("" when it has none)."""
    return ((labels or {}).get(POOL_LABEL) or "").strip()


def pool_name_problem(pool: str) -> str:
    """Why ``pool`` cannot name a pool config ("" when it can).

    A pool is the value of the node label worker.gardener.cloud/pool, and it becomes part of a ConfigMap
    name: it must be both. Gardener's worker pool names always are.
    """
    if not pool:
        return f"the pool name is empty (it is the value of the node label {POOL_LABEL})"
    if len(pool) > _LABEL_VALUE_MAX:
        return (f"pool name {pool[:20]!r}... is {len(pool)} characters; a label value has at most "
                f"{_LABEL_VALUE_MAX} (the pool is the value of the node label {POOL_LABEL})")
    if not _LABEL_VALUE.match(pool):
        return (f"pool name {pool!r} is not a valid label value (the pool is the value of the node label "
                f"{POOL_LABEL}): letters, digits, '-', '_' and '.', starting and ending with a letter or digit")
    name = pool_config_map(pool)
    if not _DNS_SUBDOMAIN.match(name) or len(name) > _OBJECT_NAME_MAX:
        return (f"pool name {pool!r} is a label value of {POOL_LABEL} but cannot be part of the ConfigMap name "
                f"{name}: use lower-case letters, digits, '-' and '.' between them (as Gardener's worker pool "
                "names do)")
    return ""


def candidate_names(node: str, group: str = "", pool: str = "", prefix: str = CONFIG_MAP_PREFIX) -> list[str]:
    """ConfigMap names in order of precedence; a pool no ConfigMap can be named after is left out.

    ``prefix`` is the ordinary ConfigMaps' or a staged rollout's candidates' (resmgr.agent.rollout)."""
    names = [f"{prefix}node.{node}"]
    if pool and not pool_name_problem(pool):
        names.append(f"{prefix}pool.{pool}")
    if group:
        names.append(f"{prefix}group.{group}")
    names.append(f"{prefix}default")
    return names


def config_kind(name: str) -> str:
    """node, pool, group or default for a ConfigMap name from ``candidate_names`` (of either prefix)."""
    key = name.partition(".")[2]
    return key.partition(".")[0]


@dataclass(frozen=True)
class Selection:
    """The ConfigMap that applies: its name, resourceVersion and data (section -> YAML)."""

    name: str
    resource_version: str
    data: Mapping[str, str] = field(default_factory=dict)
    # Keys of binaryData: reported as an error, since cri-resmgr sections are text.
    binary_keys: tuple[str, ...] = ()
    # Why it applies to this node, e.g. "the node's worker pool p1 (label worker.gardener.cloud/pool)".
    reason: str = ""
    # The staged rollout attempt this candidate ConfigMap belongs to (resmgr.agent.rollout); "" for the ordinary.
    attempt: str = ""

    @property
    def source(self) -> str:
        return f"ConfigMap {CONFIG_NAMESPACE}/{self.name}"

    @property
    def kind(self) -> str:
        return config_kind(self.name)


def _reason(kind: str, labels: Mapping[str, str] | None) -> str:
    if kind == "node":
        return "the node's own config"
    if kind == "pool":
        return f"the node's worker pool {node_pool(labels)} (label {POOL_LABEL})"
    if kind == "group":
        return f"the node's group {node_group(labels)} (label {GROUP_LABEL})"
    return "the default config"


def select_config(node: str, labels: Mapping[str, str] | None, config_maps: Mapping[str, Mapping[str, Any]],
                  prefix: str = CONFIG_MAP_PREFIX) -> Selection | None:
    """The winning ConfigMap among ``config_maps`` (name -> ConfigMap as a dict), or None."""
    for name in candidate_names(node, node_group(labels), node_pool(labels), prefix):
        cm = config_maps.get(name)
        if cm is None:
            continue
        meta = cm.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        data = cm.get("data") or {}
        binary = tuple(sorted((cm.get("binaryData") or {}).keys()))
        return Selection(name=name, resource_version=str(meta.get("resourceVersion", "")), data=dict(data),
                         binary_keys=binary, reason=_reason(config_kind(name), labels))
    return None
