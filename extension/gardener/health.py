"""Health: ManagedResource conditions mapped onto the Extension condition SystemComponentsHealthy.

As Gardener's extensions library (v1.149.3 extensions/pkg/controller/healthcheck/): a missing ManagedResource
is False (general/managed_resource.go), Progressing turns False once it lasted longer than a
ProgressingThreshold (reconciler.go extensionConditionUnsuccessful), and no check runs while the Extension is
being deleted or migrated (reconciler.go isInMigration; see triggers.health_applies).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from extension import constants as c
from extension.gardener import managed_resources
from extension.gardener.cluster import ClusterInfo
from extension.gardener.kube import Apis
from extension.gardener.status import now, patch_status

APPLIED, HEALTHY, PROGRESSING = "ResourcesApplied", "ResourcesHealthy", "ResourcesProgressing"
# How long SystemComponentsHealthy may stay Progressing (a rolling DaemonSet, nodes without their record yet)
# before it is False: the longest threshold Gardener's library sets itself (worker health, scale-down: 15 min,
# extensions/pkg/controller/healthcheck/worker/nodes.go); an install rolls one node at a time.
PROGRESSING_THRESHOLD = 15 * 60.0


def _condition(conditions: list[dict[str, Any]], ctype: str) -> dict[str, Any] | None:
    for cond in conditions:
        if cond.get("type") == ctype:
            return cond
    return None


def assess(mr: dict[str, Any] | None, *, hibernated: bool, error: str | None = None) -> tuple[str, str, str]:
    """Return (status, reason, message) for SystemComponentsHealthy."""
    if hibernated:
        return "True", c.REASON_SUCCESSFUL, "Shoot is hibernated"
    if error is not None:
        return "Unknown", c.REASON_CONDITION_CHECK_ERROR, error
    if mr is None:
        return "False", c.REASON_UNSUCCESSFUL, f"managed resource {c.MANAGED_RESOURCE_NAME} not found"
    status = mr.get("status") or {}
    generation = (mr.get("metadata") or {}).get("generation")
    observed = status.get("observedGeneration")
    if generation is not None and observed != generation:
        return ("Progressing", c.REASON_PROGRESSING,
                f"observed generation of managed resource {c.MANAGED_RESOURCE_NAME} outdated "
                f"({observed}/{generation})")
    conditions = status.get("conditions") or []
    for ctype in (APPLIED, HEALTHY):
        cond = _condition(conditions, ctype)
        if cond is None:
            return ("False", c.REASON_UNSUCCESSFUL,
                    f"condition {ctype} of managed resource {c.MANAGED_RESOURCE_NAME} has not been reported yet")
        if cond.get("status") != "True":
            msg = cond.get("message") or cond.get("reason") or "no message"
            return ("False", c.REASON_UNSUCCESSFUL,
                    f"condition {ctype} of managed resource {c.MANAGED_RESOURCE_NAME} is "
                    f"{cond.get('status')}: {msg}")
    cond = _condition(conditions, PROGRESSING)
    if cond is not None and cond.get("status") == "True":
        return ("Progressing", c.REASON_PROGRESSING,
                f"managed resource {c.MANAGED_RESOURCE_NAME} is progressing: "
                f"{cond.get('message') or cond.get('reason') or ''}".rstrip(": "))
    return "True", c.REASON_SUCCESSFUL, "All health checks successful"


def _parse_time(text: str | None) -> dt.datetime | None:
    try:
        return dt.datetime.strptime(text or "", "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def past_progressing_threshold(old: dict[str, Any] | None, status: str, reason: str, *, threshold: float,
                               at: dt.datetime) -> tuple[str, str]:
    """Gardener's rule for a progressing check: Progressing when there was no condition, it was True, or it has
    not been False and changed status at most ``threshold`` seconds before ``at``; False otherwise."""
    if status != "Progressing" or old is None or old.get("status") == "True":
        return status, reason
    since = _parse_time(old.get("lastTransitionTime"))
    if old.get("status") != "False" and since is not None and (at - since).total_seconds() <= threshold:
        return status, reason
    return "False", c.REASON_UNSUCCESSFUL


def updated_condition(old: dict[str, Any] | None, status: str, reason: str, message: str) -> dict[str, Any]:
    """Gardener condition semantics: lastTransitionTime moves only when the status changes."""
    ts = now()
    transition = old.get("lastTransitionTime") if old and old.get("status") == status else None
    return {"type": c.HEALTH_CONDITION_TYPE, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": transition or ts, "lastUpdateTime": ts}


def merge_conditions(conditions: list[dict[str, Any]], new: dict[str, Any]) -> list[dict[str, Any]]:
    out = [cond for cond in conditions if cond.get("type") != new["type"]]
    out.append(new)
    return out


def is_healthy(mr: dict[str, Any] | None, *, secret_name: str | None = None) -> bool:
    """Applied, healthy and not progressing, at the current generation (and on ``secret_name`` if given)."""
    if mr is None:
        return False
    if secret_name is not None:
        refs = [r.get("name") for r in ((mr.get("spec") or {}).get("secretRefs") or [])]
        if refs != [secret_name]:
            return False
    status, _, _ = assess(mr, hibernated=False)
    return status == "True"


NodeCheck = Callable[[dict[str, Any] | None], "tuple[str, str, str] | None"]


def check_and_report(apis: Apis, extension: dict[str, Any], cluster: ClusterInfo | None,
                     cluster_error: str | None = None, node_check: NodeCheck | None = None,
                     progressing_threshold: float = PROGRESSING_THRESHOLD) -> dict[str, Any]:
    """Assess health now and write the condition onto the Extension; returns the condition.

    ``node_check(mr)`` (the nodes' own records) has the last word once the ManagedResource is healthy.
    Progressing for longer than ``progressing_threshold`` seconds is reported as False.
    """
    meta = extension["metadata"]
    ns, name = meta["namespace"], meta["name"]
    try:
        mr = managed_resources.get(apis, ns, c.MANAGED_RESOURCE_NAME)
        error = cluster_error
    except Exception as err:  # the check itself failed: Gardener reports ConditionCheckError
        mr, error = None, f"cannot read managed resource: {err}"
    status, reason, message = assess(mr, hibernated=bool(cluster and cluster.hibernated), error=error)
    if node_check is not None and not (cluster and cluster.hibernated):
        if status == "True":
            status, reason, message = node_check(mr) or (status, reason, message)
        elif status == "False" and mr is not None:
            # An unhealthy rollout is often a symptom (the agent cannot start where the relay did not): the
            # nodes' own failures say why, so they join the message.
            nodes = node_check(mr)
            if nodes is not None and nodes[0] == "False":
                message = f"{message}; {nodes[2]}"
    conditions = (extension.get("status") or {}).get("conditions") or []
    old = _condition(conditions, c.HEALTH_CONDITION_TYPE)
    status, reason = past_progressing_threshold(old, status, reason, threshold=progressing_threshold,
                                                at=dt.datetime.now(dt.UTC))
    new = updated_condition(old, status, reason, message)
    patch_status(apis, ns, name, {"conditions": merge_conditions(conditions, new)})
    return new
