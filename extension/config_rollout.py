"""Staged rollout of the dynamic configs: one canary node per worker pool first, the rest once those applied it.

The binary's upgrade already goes one node first (the installer DaemonSet rolls one node at a time, and the
extension judges the nodes' records, extension/node_proof.py). A dynamic config reaches every node through the agents
at once, so it is staged here, with the same pieces: the shoot's nodes and records through ``ShootReader``, the
nodes the installation selects (``node_proof.Selection``), and one judge of per-node reports (``node_proof.judge``).
The agents' side of the contract is resmgr/agent/rollout.py.

* The last good configs stay the ordinary ``cri-resmgr-config.<key>`` ConfigMaps. A changed set is rendered as the
  candidate (``cri-resmgr-candidate.<key>``) with ``cri-resmgr-rollout`` naming the attempt and the canaries.
* Canaries: per worker pool, one selected node whose effective config changes (the agents' own ``select_config``
  over both sets, with the nodes' labels), preferring nodes whose installer reports ``installed`` and that are Ready.
  Nodes whose config does not change need no test; a change no node sees is promoted at once.
* The agents report on their Nodes (annotation ``config-rollout``). Every canary applied it: the candidate becomes
  the good set. One refused it: that canary is already back on the good config; the rollout stops, the candidate
  ConfigMaps go (so other canaries go back too), and the Extension's lastError names the node and the error until
  the providerConfig changes. A canary that does not report within the timeout stops the rollout the same way.
* Before pushing, each canary's agent reports a dry run of the candidate on its Node (annotation
  ``config-rollout-diff``: how many containers would move, the first few as ``namespace/pod/container: old -> new
  cpuset``, or why cri-resmgr would refuse it). The state lists them under ``diffs`` (node, attempt, summary), kept
  after the attempt was promoted or stopped until the next attempt starts, so ``kubectl get extension -o yaml``
  shows what the change moved on each canary.
* The state lives in the Extension's ``status.state`` (Gardener's field for an extension's own state, which a
  control plane migration carries over): the good set, the candidate's digest, the attempt, the canaries, when it
  started and why it stopped. Without a state (the first reconcile, or an Extension from before this feature) the
  configs in force are taken as good: there is nothing older to go back to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import noderecord
from extension.errors import WaitingError
from extension.node_proof import Selection, describe, judge
from resmgr.agent import rollout
from resmgr.agent.selection import CONFIG_MAP_PREFIX, node_pool, select_config

STATE_KEY = "configRollout"  # under the Extension's status.state
Configs = dict[str, dict[str, str]]  # dynamic configs: {key: {section: YAML}}
Observe = Callable[[], tuple[list[dict[str, Any]], list[dict[str, Any]]]]  # the shoot's nodes and node records


@dataclass(frozen=True)
class CanaryDiff:
    """A canary's dry run of an attempt, as its agent summarised it (resmgr.agent.rollout.DiffReport)."""

    node: str
    attempt: str
    diff: str

    def to_status(self) -> dict[str, str]:
        return {"node": self.node, "attempt": self.attempt, "diff": self.diff}


@dataclass(frozen=True)
class RolloutState:
    """What the extension remembers of the rollout between reconciles (the Extension's status.state)."""

    good: Configs = field(default_factory=dict)
    candidate: str = ""  # digest of the candidate set (in progress, or stopped)
    attempt: str = ""
    canaries: tuple[str, ...] = ()
    started: float = 0.0
    stopped: str = ""  # why the candidate stopped; "" while it is in progress
    diffs: tuple[CanaryDiff, ...] = ()  # the canaries' dry runs of the latest attempt

    def to_status(self) -> dict[str, Any]:
        # Every field always written, lists for maps: a merge patch then replaces the old state whole.
        return {"good": [{"name": k, "sections": v} for k, v in sorted(self.good.items())],
                "candidate": self.candidate, "attempt": self.attempt, "canaries": list(self.canaries),
                "started": self.started, "stopped": self.stopped, "diffs": [d.to_status() for d in self.diffs]}

    @classmethod
    def from_extension(cls, extension: Mapping[str, Any]) -> RolloutState | None:
        doc = (((extension.get("status") or {}).get("state") or {}).get(STATE_KEY))
        if not isinstance(doc, dict) or not isinstance(doc.get("good"), list):
            return None
        good = {str(item.get("name")): {str(s): str(t) for s, t in (item.get("sections") or {}).items()}
                for item in doc["good"] if isinstance(item, dict) and item.get("name")}
        diffs = tuple(CanaryDiff(str(d.get("node") or ""), str(d.get("attempt") or ""), str(d.get("diff") or ""))
                      for d in doc.get("diffs") or () if isinstance(d, dict))
        return cls(good=good, candidate=str(doc.get("candidate") or ""), attempt=str(doc.get("attempt") or ""),
                   canaries=tuple(str(n) for n in doc.get("canaries") or ()),
                   started=float(doc.get("started") or 0.0), stopped=str(doc.get("stopped") or ""), diffs=diffs)


@dataclass(frozen=True)
class Plan:
    """What to render and record, and how the reconcile ends after deploying it."""

    good: Configs  # the ordinary ConfigMaps
    candidate: Configs  # the candidate ConfigMaps ({}: no rollout in progress)
    rollout: rollout.Rollout  # the cri-resmgr-rollout ConfigMap
    state: RolloutState  # to record in status.state
    waiting: str = ""  # not done: check again (the Extension stays Processing)
    stopped: str = ""  # refused: a configuration error naming the node and the error
    note: str = ""  # what happened, for the success message

    def chart_values(self) -> dict[str, Any]:
        return {"candidate": self.candidate, "rollout": self.rollout.to_data()}


def _as_config_maps(configs: Configs, prefix: str = CONFIG_MAP_PREFIX) -> dict[str, dict[str, Any]]:
    return {prefix + key: {"metadata": {}, "data": sections} for key, sections in configs.items()}


def changed_nodes(nodes: list[dict[str, Any]], good: Configs, candidate: Configs,
                  selection: Selection) -> list[dict[str, Any]]:
    """The selected nodes whose config (as their agents choose it) differs between the two sets and that get one
    from the candidate (a node the candidate leaves without a config keeps what it has: nothing to test)."""
    good_cms, candidate_cms = _as_config_maps(good), _as_config_maps(candidate)
    out = []
    for node in nodes:
        meta = node["metadata"]
        labels = meta.get("labels") or {}
        if meta.get("deletionTimestamp") or not selection.selects(labels):
            continue
        new = select_config(meta["name"], labels, candidate_cms)
        old = select_config(meta["name"], labels, good_cms)
        if new is not None and (old is None or dict(old.data) != dict(new.data)):
            out.append(node)
    return out


def _ready(node: dict[str, Any]) -> bool:
    return any(cond.get("type") == "Ready" and cond.get("status") == "True"
               for cond in (node.get("status") or {}).get("conditions") or ())


def choose_canaries(nodes: list[dict[str, Any]], leases: list[dict[str, Any]], good: Configs, candidate: Configs,
                    selection: Selection, keep: tuple[str, ...] = ()) -> tuple[str, ...]:
    """One node per worker pool among the nodes whose config changes; a canary in ``keep`` stays while it still
    qualifies. Preferred: the installer's record says installed (relay and agent up), then Ready, then by name."""
    records = {r.node: r for r in (noderecord.from_lease(lease) for lease in leases) if r is not None}
    pools: dict[str, list[dict[str, Any]]] = {}
    for node in changed_nodes(nodes, good, candidate, selection):
        pools.setdefault(node_pool(node["metadata"].get("labels")), []).append(node)

    def rank(node: dict[str, Any]) -> tuple[bool, bool, bool, str]:
        name = node["metadata"]["name"]
        rec = records.get(name)
        return (name not in keep, rec is None or rec.state != noderecord.INSTALLED, not _ready(node), name)

    return tuple(sorted(min(members, key=rank)["metadata"]["name"] for members in pools.values()))


def reports(nodes: list[dict[str, Any]]) -> dict[str, noderecord.NodeRecord]:
    """The agents' reports on their Nodes, as records for ``node_proof.judge`` (digest: the attempt)."""
    out = {}
    for node in nodes:
        meta = node["metadata"]
        report = rollout.parse_report((meta.get("annotations") or {}).get(rollout.ROLLOUT_ANNOTATION))
        if report is not None:
            out[meta["name"]] = noderecord.NodeRecord(meta["name"], report.state, report.attempt, report.reason)
    return out


def canary_diffs(nodes: list[dict[str, Any]], attempt: str, canaries: tuple[str, ...]) -> tuple[CanaryDiff, ...]:
    """The dry runs of ``attempt`` the canaries' agents reported on their Nodes (not every canary may have yet)."""
    out = []
    for node in nodes:
        meta = node["metadata"]
        report = rollout.parse_diff((meta.get("annotations") or {}).get(rollout.DIFF_ANNOTATION))
        if meta["name"] in canaries and report is not None and report.attempt == attempt:
            out.append(CanaryDiff(meta["name"], attempt, report.summary))
    return tuple(sorted(out, key=lambda d: d.node))


def _rollout_map(good: Configs, candidate: Configs | None = None, attempt: str = "",
                 canaries: tuple[str, ...] = ()) -> rollout.Rollout:
    if not candidate:
        return rollout.Rollout(good=rollout.configs_digest(good), good_keys=tuple(sorted(good)))
    return rollout.Rollout(good=rollout.configs_digest(good), good_keys=tuple(sorted(good)), attempt=attempt,
                           candidate=rollout.configs_digest(candidate), canaries=canaries)


def settled(good: Configs, note: str = "", diffs: tuple[CanaryDiff, ...] = ()) -> Plan:
    """No rollout: the good set alone (``diffs``: the canaries' dry runs of the attempt that made it good)."""
    return Plan(good=good, candidate={}, rollout=_rollout_map(good), state=RolloutState(good=good, diffs=diffs),
                note=note)


def plan(state: RolloutState | None, desired: Configs, *, now: float, observe: Observe, selection: Selection,
         timeout: float) -> Plan:
    """The next step of the rollout of ``desired`` from ``state``; ``observe`` reads the shoot (only when needed)."""
    if state is None:
        return settled(desired)
    digest = rollout.configs_digest(desired)
    if digest == rollout.configs_digest(state.good):
        return settled(desired, diffs=state.diffs)
    in_progress = state.candidate == digest
    if in_progress and state.stopped:
        return Plan(good=state.good, candidate={}, rollout=_rollout_map(state.good), state=state,
                    stopped=state.stopped)
    try:
        nodes, leases = observe()
    except WaitingError as err:
        if not in_progress:
            return Plan(good=state.good, candidate={}, rollout=_rollout_map(state.good), state=state,
                        waiting=f"the changed dynamic configs wait for their canary nodes to be chosen: {err}")
        return _step(state, desired, now, timeout, waiting=f"cannot read the canaries' reports: {err}")
    canaries = choose_canaries(nodes, leases, state.good, desired, selection, state.canaries if in_progress else ())
    if not canaries:
        return settled(desired, "no selected node's config changes (or no node is selected): the changed dynamic "
                                "configs apply without canaries")
    if not in_progress:
        attempt = f"{digest[:8]}-{int(now)}"
        started = replace(state, candidate=digest, attempt=attempt, canaries=canaries, started=now, stopped="",
                          diffs=())
        return _step(started, desired, now, timeout,
                     waiting=f"config rollout {attempt} started on the canary node(s) {', '.join(canaries)}")
    if canaries != state.canaries:  # a canary left (deleted, or out of the selection): another takes its place
        state = replace(state, canaries=canaries, started=now)
    state = replace(state, diffs=canary_diffs(nodes, state.attempt, canaries) or state.diffs)
    proof = judge(nodes, reports(nodes), state.attempt, lambda node: node["metadata"]["name"] in canaries,
                  done=(rollout.APPLIED, rollout.FORCED), failed=(rollout.FAILED,))
    if proof.failed:
        return _stop(state, f"canary node {describe(proof.failed)}")
    if proof.pending:
        if now - state.started > timeout:
            return _stop(state, f"canary node(s) did not report within {int(timeout)}s: {describe(proof.pending)}")
        return _step(state, desired, now, timeout, waiting=f"config rollout {state.attempt} waits for the canary "
                                                           f"node(s): {describe(proof.pending)}")
    return settled(desired, f"config rollout {state.attempt} applied on the canary node(s) {', '.join(canaries)} "
                            "and promoted to every node", state.diffs)


def _step(state: RolloutState, desired: Configs, now: float, timeout: float, waiting: str) -> Plan:
    if state.started and now - state.started > timeout:
        return _stop(state, f"no report within {int(timeout)}s: {waiting}")
    return Plan(good=state.good, candidate=desired,
                rollout=_rollout_map(state.good, desired, state.attempt, state.canaries), state=state, waiting=waiting)


def _stop(state: RolloutState, why: str) -> Plan:
    message = (f"config rollout {state.attempt} stopped, {why}; the canaries went back to the last good configs "
               "and the other nodes never got the change: fix the changed configs (or change them back)")
    stopped = replace(state, stopped=message)
    return Plan(good=state.good, candidate={}, rollout=_rollout_map(state.good), state=stopped, stopped=message)
