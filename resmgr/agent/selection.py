"""Which dynamic-config ConfigMap applies to a node: a pure function of names, labels and ConfigMaps.

In ``kube-system``, in order of precedence (as in cri-resource-manager):
``cri-resmgr-config.node.<NODE>``, then ``cri-resmgr-config.group.<GROUP>`` where the
group is the node's ``cri-resource-manager.intel.com/group`` label, then
``cri-resmgr-config.default``. The first one that exists wins as a whole; ConfigMaps
are never merged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CONFIG_NAMESPACE = "kube-system"
CONFIG_MAP_PREFIX = "cri-resmgr-config."
DEFAULT_CONFIG_MAP = "cri-resmgr-config.default"
GROUP_LABEL = "cri-resource-manager.intel.com/group"


def node_config_map(node: str) -> str:
    return f"{CONFIG_MAP_PREFIX}node.{node}"


def group_config_map(group: str) -> str:
    return f"{CONFIG_MAP_PREFIX}group.{group}"


def node_group(labels: Mapping[str, str] | None) -> str:
    """The node's config group from its labels ("" when it has none)."""
    return ((labels or {}).get(GROUP_LABEL) or "").strip()


def candidate_names(node: str, group: str) -> list[str]:
    """ConfigMap names in order of precedence."""
    names = [node_config_map(node)]
    if group:
        names.append(group_config_map(group))
    names.append(DEFAULT_CONFIG_MAP)
    return names


@dataclass(frozen=True)
class Selection:
    """The ConfigMap that applies: its name, resourceVersion and data (section -> YAML)."""

    name: str
    resource_version: str
    data: Mapping[str, str] = field(default_factory=dict)
    # Keys of binaryData: reported as an error, since cri-resmgr sections are text.
    binary_keys: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        return f"ConfigMap {CONFIG_NAMESPACE}/{self.name}"


def select_config(node: str, labels: Mapping[str, str] | None,
                  config_maps: Mapping[str, Mapping[str, Any]]) -> Selection | None:
    """The winning ConfigMap among ``config_maps`` (name -> ConfigMap as a dict), or None."""
    for name in candidate_names(node, node_group(labels)):
        cm = config_maps.get(name)
        if cm is None:
            continue
        meta = cm.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        data = cm.get("data") or {}
        binary = tuple(sorted((cm.get("binaryData") or {}).keys()))
        return Selection(name=name, resource_version=str(meta.get("resourceVersion", "")), data=dict(data),
                         binary_keys=binary)
    return None
