"""What a policy is handed to decide into: the containers it placed and their grants (as kubelet's cpumanager
hands ``state.State`` to its policy). The resource manager creates one per policy and owns it; the policy
reads and writes placements only through it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from resmgr.model.resources import ContainerInfo


@dataclass
class PolicyState:
    """Container id -> the container the policy placed, and -> its grant (the policy's ``Grant``)."""

    containers: dict[str, ContainerInfo] = field(default_factory=dict)
    grants: dict[str, Any] = field(default_factory=dict)

    def replace(self, containers: Mapping[str, ContainerInfo], grants: Mapping[str, Any]) -> None:
        """Hold exactly these placements (a restore); the dicts stay the same objects."""
        self.containers.clear()
        self.containers.update(containers)
        self.grants.clear()
        self.grants.update(grants)

    def clear(self) -> None:
        """Hold nothing (every container is allocated again next)."""
        self.replace({}, {})
