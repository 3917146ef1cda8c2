"""A config's dry run: which containers a candidate config would place differently than the active one does.

cri-resmgr computes it (``ResourceManager.dry_run``: the candidate's policy places into a copy of the node's state,
nothing else changes), the Config API carries it (``DryRunConfig``), and cri-resmgr-agent reports it on a canary
node of a staged config rollout before it pushes the candidate (resmgr/agent/rollout.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from resmgr.model.explanation import NOT_PLACED, Explanation

MOVED, UNPINNED, PINNED, FAILED = "moved", "unpinned", "pinned", "failed"
KINDS = (MOVED, UNPINNED, PINNED, FAILED)


@dataclass(frozen=True)
class PlacementChange:
    """One container whose placement the candidate config changes."""

    container: str  # namespace/pod/container
    container_id: str
    old_cpus: str
    new_cpus: str
    old_mems: str = ""
    new_mems: str = ""
    old_pool: str = ""
    new_pool: str = ""
    old_unpinned: str = ""  # why it has no CPUs of its own now; "": pinned
    new_unpinned: str = ""  # ... under the candidate
    error: str = ""  # the candidate's policy could not place it at all

    @property
    def kind(self) -> str:
        """FAILED, UNPINNED (loses its own CPUs), PINNED (gets CPUs of its own) or MOVED (other CPUs, memory nodes
        or pool)."""
        if self.error:
            return FAILED
        if self.new_unpinned and not self.old_unpinned:
            return UNPINNED
        if self.old_unpinned and not self.new_unpinned:
            return PINNED
        return MOVED

    def line(self) -> str:
        """``namespace/pod/container: old -> new cpuset`` (and what else changes), for logs and annotations."""
        if self.error:
            return f"{self.container}: {self.old_cpus or '-'} -> fails: {self.error}"
        text = f"{self.container}: {self.old_cpus or '-'} -> {self.new_cpus or '-'}"
        if self.old_mems != self.new_mems:
            text += f" mems {self.old_mems or '-'} -> {self.new_mems or '-'}"
        if self.old_pool != self.new_pool:
            text += f" pool {self.old_pool or '-'} -> {self.new_pool or '-'}"
        if self.kind == UNPINNED:
            text += f" ({self.new_unpinned})"
        return text


@dataclass
class DryRun:
    """What applying a config would do: refused (``error``), or these changes among ``containers`` compared."""

    policy: str = ""  # the candidate's policy
    error: str = ""  # why the config would be refused ("": it would be applied)
    containers: int = 0  # containers compared (those the active policy holds, pending creations left out)
    changes: list[PlacementChange] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Changes by kind (every kind listed)."""
        out = dict.fromkeys(KINDS, 0)
        for c in self.changes:
            out[c.kind] += 1
        return out


def placement_changes(old: Iterable[Explanation], new: Iterable[Explanation],
                      failed: Mapping[str, str] | None = None) -> list[PlacementChange]:
    """The containers of ``old`` whose cpuset, memory nodes, pool or pinning differ in ``new`` (a container ``new``
    lacks counts as not placed), and those in ``failed`` (container id -> error); sorted by container name. A
    different reason for staying unpinned alone moves nothing and is left out."""
    failed = failed or {}
    after = {e.container_id: e for e in new}
    out = []
    for e in old:
        n = after.get(e.container_id)
        error = failed.get(e.container_id, "")
        if n is None:
            n = Explanation(e.namespace, e.pod, e.pod_uid, e.container, e.container_id, "", "", "", NOT_PLACED)
        if not error and (e.cpus, e.mems, e.pool, e.pinned) == (n.cpus, n.mems, n.pool, n.pinned):
            continue
        out.append(PlacementChange(container=f"{e.namespace}/{e.pod}/{e.container}", container_id=e.container_id,
                                   old_cpus=e.cpus, new_cpus=n.cpus, old_mems=e.mems, new_mems=n.mems,
                                   old_pool=e.pool, new_pool=n.pool, old_unpinned=e.unpinned,
                                   new_unpinned=n.unpinned, error=error))
    return sorted(out, key=lambda c: (c.container, c.container_id))
