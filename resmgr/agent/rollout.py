"""Staged config rollout: the contract between the extension, which stages a changed dynamic config, and the agent.

The extension keeps the last good configs as the ordinary ``cri-resmgr-config.<key>`` ConfigMaps. A changed set
of dynamic configs goes out as a *candidate*: the same keys as ``cri-resmgr-candidate.<key>`` ConfigMaps, plus the
ConfigMap ``cri-resmgr-rollout`` naming the attempt, the candidate set's digest and the canary nodes (one per worker
pool whose nodes' config changes). An agent on a canary node selects among the candidate ConfigMaps (the same
precedence as for the ordinary ones), pushes the winner and reports the outcome on its own Node, in the annotation
``cri-resource-manager.intel.com/config-rollout``: ``<attempt> applied``, ``<attempt> forced`` (a --force-config
wins; nothing to test) or ``<attempt> failed: <error>``. After a failure the agent goes back to the last good
config at once and never selects that attempt again. The extension reads the reports, promotes the candidate when
every canary applied it, and stops the rollout (naming the node and the error) when one failed.

Before it pushes the candidate, a canary asks cri-resmgr for a dry run of it (which containers it would place
differently, or why it would be refused) and writes a bounded summary on its Node, in the annotation
``cri-resource-manager.intel.com/config-rollout-diff``: ``<attempt> <summary>``; the extension shows it in the
Extension's status. The dry run informs and does not gate, except that a config the dry run says cri-resmgr would
refuse is reported ``failed`` without being pushed (the push would be refused by the same checks).

``cri-resmgr-rollout`` also carries the digest of the last good set and its keys. An agent holds (pushes nothing)
while the ConfigMaps it sees do not match the digest they claim: gardener-resource-manager deletes removed objects
before it applies changed ones, so at a promotion or a stop a canary may briefly see neither the candidate nor the
new good set; without the hold it would flap back to the old config and forward again.

Pure functions only: both programs import this module (the extension through ``resmgr.agent``, as it does
``selection``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from resmgr.agent.selection import CONFIG_MAP_PREFIX

CANDIDATE_PREFIX = "cri-resmgr-candidate."
ROLLOUT_CONFIG_MAP = "cri-resmgr-rollout"
ROLLOUT_ANNOTATION = "cri-resource-manager.intel.com/config-rollout"
APPLIED, FORCED, FAILED = "applied", "forced", "failed"
REPORT_STATES = (APPLIED, FORCED, FAILED)
MAX_REASON = 512  # the Node annotation stays small; the agent's log and Event have the whole error
DIFF_ANNOTATION = "cri-resource-manager.intel.com/config-rollout-diff"
MAX_DIFF = 512  # the same bound for the dry-run summary; the agent's log has every container


def configs_digest(configs: Mapping[str, Mapping[str, str]]) -> str:
    """The digest of a set of dynamic configs ({key: {section: YAML}}): the extension names a candidate with it and
    the agent checks the ConfigMaps it sees against it."""
    doc = json.dumps({k: dict(sorted(v.items())) for k, v in sorted(configs.items())}, sort_keys=True,
                     ensure_ascii=False)
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


def configs_of(config_maps: Mapping[str, Mapping[str, Any]], prefix: str) -> dict[str, dict[str, str]]:
    """{key: data} of the ConfigMaps named ``prefix<key>`` (not those being deleted)."""
    out: dict[str, dict[str, str]] = {}
    for name, cm in config_maps.items():
        if name.startswith(prefix) and not (cm.get("metadata") or {}).get("deletionTimestamp"):
            out[name.removeprefix(prefix)] = dict(cm.get("data") or {})
    return out


def is_rollout_config_map(name: str) -> bool:
    """The ConfigMaps the agent watches besides the ordinary ones."""
    return name.startswith(CANDIDATE_PREFIX) or name == ROLLOUT_CONFIG_MAP


@dataclass(frozen=True)
class Rollout:
    """What ``cri-resmgr-rollout`` says; empty candidate: no rollout in progress."""

    good: str = ""  # digest of the last good set
    good_keys: tuple[str, ...] = ()
    attempt: str = ""  # this attempt of the candidate (a digest and a start time): what reports name
    candidate: str = ""  # digest of the candidate set
    canaries: tuple[str, ...] = ()

    def to_data(self) -> dict[str, str]:
        return {"good": self.good, "goodKeys": ",".join(self.good_keys), "attempt": self.attempt,
                "candidate": self.candidate, "canaries": ",".join(self.canaries)}


def parse_rollout(cm: Mapping[str, Any] | None) -> Rollout | None:
    if cm is None or (cm.get("metadata") or {}).get("deletionTimestamp"):
        return None
    data = cm.get("data") or {}

    def items(key: str) -> tuple[str, ...]:
        return tuple(x for x in str(data.get(key) or "").split(",") if x)

    return Rollout(good=str(data.get("good") or ""), good_keys=items("goodKeys"),
                   attempt=str(data.get("attempt") or ""), candidate=str(data.get("candidate") or ""),
                   canaries=items("canaries"))


@dataclass(frozen=True)
class Report:
    """A node's report on a rollout attempt (the agent writes it on its Node, the extension reads it)."""

    attempt: str
    state: str
    reason: str = ""

    def to_annotation(self) -> str:
        reason = " ".join(self.reason.split())[:MAX_REASON]
        return f"{self.attempt} {self.state}" + (f": {reason}" if reason else "")


def parse_report(value: str | None) -> Report | None:
    attempt, _, rest = (value or "").strip().partition(" ")
    state, _, reason = rest.partition(": ")
    if not attempt or state not in REPORT_STATES:
        return None
    return Report(attempt, state, reason)


@dataclass(frozen=True)
class DiffReport:
    """A canary's dry run of a rollout attempt: a one-line summary (the agent writes it, the extension shows it)."""

    attempt: str
    summary: str

    def to_annotation(self) -> str:
        summary = " ".join(self.summary.split())
        if len(summary) > MAX_DIFF:
            summary = summary[: MAX_DIFF - 3] + "..."
        return f"{self.attempt} {summary}"


def parse_diff(value: str | None) -> DiffReport | None:
    attempt, _, summary = (value or "").strip().partition(" ")
    return DiffReport(attempt, summary) if attempt and summary else None


# What the agent on one node does: ---------------------------------------------------------------------------
CANDIDATE, GOOD, HOLD = "candidate", "good", "hold"


def choose(node: str, config_maps: Mapping[str, Mapping[str, Any]],
           failed_attempt: str = "") -> tuple[str, str, str]:
    """(CANDIDATE, GOOD or HOLD; why; the attempt of a CANDIDATE) for this node: the candidate ConfigMaps on a
    canary of a complete candidate whose attempt did not fail here; the ordinary ones otherwise, unless they do not
    match the good digest (HOLD)."""
    rollout = parse_rollout(config_maps.get(ROLLOUT_CONFIG_MAP))
    if rollout is None:  # an extension without staged rollouts: the ordinary ConfigMaps as they are
        return GOOD, "", ""
    if rollout.attempt and node in rollout.canaries and rollout.attempt != failed_attempt:
        seen = configs_digest(configs_of(config_maps, CANDIDATE_PREFIX))
        if seen == rollout.candidate:
            return CANDIDATE, f"canary of config rollout {rollout.attempt}", rollout.attempt
        return HOLD, f"the candidate ConfigMaps of config rollout {rollout.attempt} are not all here yet", ""
    good = configs_of(config_maps, CONFIG_MAP_PREFIX)
    if configs_digest({k: good[k] for k in rollout.good_keys if k in good}) != rollout.good:
        return HOLD, "the cri-resmgr-config ConfigMaps do not match cri-resmgr-rollout yet (being updated)", ""
    return GOOD, "", ""
