"""Placement explanations: for each container, where the policy put it and, if it has no CPUs of its own, why.

The record the operator reads (a Kubernetes Event on the pod, posted by cri-resmgr-agent) and the reasons the
unpinned-containers metric counts. A policy gives the reason in its grant (``Grant.unpinned``) or, for a
container it leaves alone, as its ``unplaced_reason``; the resource manager builds the records.
"""

from __future__ import annotations

from dataclasses import dataclass

# Why a container got no CPUs of its own (the label values of cri_resmgr_unpinned_containers: a closed set).
NOT_GUARANTEED = "not-guaranteed"  # QoS class BestEffort or Burstable: the shared CPUs
FRACTIONAL_CPU = "fractional-cpu"  # Guaranteed, but the CPU request is not a whole number of CPUs
PREFERS_SHARED = "prefers-shared"  # Guaranteed and whole, but annotated or configured to share
NO_FREE_CPUS = "not-enough-free-cpus"  # it qualified for CPUs of its own, but not enough were free
RESERVED_NAMESPACE = "reserved-namespace"  # kube-system or a ReservedPoolNamespaces match: the reserved CPUs
PREFERS_RESERVED = "prefers-reserved"  # annotated to run on the reserved CPUs
NO_BALLOON = "no-balloon-fits"  # balloons: no balloon instance could take it; it runs where the runtime put it
POLICY_NONE = "policy-none"  # the none policy places nothing
SHARED_POOL = "shared-pool"  # a shared pool the policy chose without giving a finer reason
NOT_PLACED = "not-placed"  # the policy left it alone without giving a finer reason

UNPINNED_REASONS = (NOT_GUARANTEED, FRACTIONAL_CPU, PREFERS_SHARED, NO_FREE_CPUS, RESERVED_NAMESPACE,
                    PREFERS_RESERVED, NO_BALLOON, POLICY_NONE, SHARED_POOL, NOT_PLACED)

# Why a container did get CPUs of its own (only for the message).
PINNED_KINDS = {"exclusive": "exclusive CPUs", "isolated": "isolated CPUs", "balloon": "its balloon's CPUs",
                "pool": "its pod pool's CPUs"}  # podpools' dedicated pools


@dataclass(frozen=True)
class Explanation:
    """One container's placement as the policy decided it."""

    namespace: str
    pod: str
    pod_uid: str
    container: str
    container_id: str
    cpus: str  # cpuset cpus the policy set ("" : left alone)
    mems: str  # cpuset mems the policy set ("" : left alone)
    pool: str  # the policy's pool, balloon or zone name ("" : none)
    unpinned: str  # why it has no CPUs of its own (one of UNPINNED_REASONS); "" : pinned
    detail: str = ""  # what it was pinned to (PINNED_KINDS' words), for the message

    @property
    def pinned(self) -> bool:
        return not self.unpinned

    @property
    def event_reason(self) -> str:
        return "CPUsPinned" if self.pinned else "NotPinned"

    def message(self) -> str:
        """The Event's message: where it runs and why."""
        where = (f"cpuset {self.cpus or 'unchanged'}, memory nodes {self.mems or 'unchanged'}, "
                 f"pool {self.pool or 'none'}")
        why = f"pinned: {self.detail or 'CPUs of its own'}" if self.pinned else f"not pinned: {self.unpinned}"
        return f"container {self.container}: {why}; {where}"

    def key(self) -> tuple[str, str, str, str, str]:
        """What a new decision changes (a new Event is due when it does)."""
        return (self.cpus, self.mems, self.pool, self.unpinned, self.detail)
