"""The agent's core: what the cluster says, what cri-resmgr has, and pushing the difference.

Watchers feed ``AgentState`` (ConfigMaps, the node's labels, Adjustments). One
``Pusher`` thread reconciles: it selects the ConfigMap for the node, validates it
with the shared schema, and pushes it to cri-resmgr when it differs from what was
last delivered. Pushes are rate limited (at most one per ``min_interval`` seconds,
so a burst of edits becomes one push of the latest state), transport failures are
retried with exponential backoff, and an unchanged config is never re-pushed; a
rejected config is not retried until it changes. When the connection to cri-resmgr
is re-established (it restarted), everything is delivered again.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from resmgr.agent import rollout
from resmgr.agent.selection import (
    CONFIG_MAP_PREFIX,
    GROUP_LABEL,
    POOL_LABEL,
    Selection,
    node_group,
    node_pool,
    pool_name_problem,
    select_config,
)
from resmgr.config import ConfigError, check_config_sections
from resmgr.config.errors import AGENT_DISABLED
from resmgr.configplane.adjustments import AdjustmentError, parse_adjustment
from resmgr.configplane.plane import sections_digest
from resmgr.model.placement_change import DryRun

log = logging.getLogger("resmgr.agent")

QUERY_CONFIG_STATUS = "config-status"
FORCE_IN_EFFECT = "force config in effect; dynamic configs not applied"
HEALTH_QUERIES = ("", "liveness", QUERY_CONFIG_STATUS)
DIFF_EXAMPLES = 5  # containers a dry-run summary names (the log has them all)


class PushError(RuntimeError):
    """cri-resmgr could not be reached (retried); not a rejection of the config."""


class ConfigTarget(Protocol):
    """cri-resmgr's Config API as the agent uses it (see resmgr.agent.target)."""

    def set_config(self, node: str, sections: Mapping[str, str], source: str) -> str: ...

    def dry_run(self, node: str, sections: Mapping[str, str], source: str) -> DryRun | None:
        """What set_config would do, changing nothing; None: this cri-resmgr has no dry run."""
        ...

    def set_adjustments(self, node: str, specs: Mapping[str, str]) -> tuple[dict[str, dict[str, Any]], str]: ...

    def epoch(self) -> int: ...


class Reporter(Protocol):
    """Where outcomes go (Events, node annotations, Adjustment status; see resmgr.agent.reporting)."""

    def config_outcome(self, selection: Selection | None, error: str, info: str = "", *,
                       applied: bool = True, warning: str = "") -> None: ...

    def rollout_outcome(self, selection: Selection, report: rollout.Report) -> None: ...

    def rollout_diff(self, selection: Selection, report: rollout.DiffReport, *, refused: bool) -> None: ...

    def adjustment_outcomes(self, results: Mapping[str, dict[str, Any]],
                            adjustments: Mapping[str, Mapping[str, Any]]) -> None: ...


@dataclass
class Outcome:
    """The result of the last config delivery attempt."""

    selection: Selection | None = None
    digest: str = ""
    error: str = ""
    info: str = ""  # not an error: fields accepted but ignored, or force config in effect
    warning: str = ""  # not an error either: unknown fields, left out of the applied config
    at: float = 0.0
    delivered: bool = False
    rejected: bool = False  # by the schema or by cri-resmgr: not retried until the ConfigMap changes


@dataclass(frozen=True)
class Held:
    """Push nothing now: the ConfigMaps are between two consistent states (resmgr.agent.rollout.choose)."""

    reason: str


def _watched(name: str) -> bool:
    return name.startswith(CONFIG_MAP_PREFIX) or rollout.is_rollout_config_map(name)


class AgentState:
    """What the watchers saw; every change wakes the pusher."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.config_maps: dict[str, dict[str, Any]] = {}
        self.node_labels: dict[str, str] = {}
        # The staged rollout attempt that failed on this node: never selected again (kept on the Node, so it
        # survives a restart of the agent).
        self.failed_attempt = ""
        self.node_seen = False
        self.adjustments: dict[str, dict[str, Any]] = {}  # namespace/name -> Adjustment object
        self.lock = threading.Lock()
        self.changed = threading.Event()

    # ConfigMaps ------------------------------------------------------------------------
    def replace_config_maps(self, items: list[dict[str, Any]]) -> None:
        with self.lock:
            self.config_maps = {cm["metadata"]["name"]: cm for cm in items if _watched(cm["metadata"]["name"])}
        self.changed.set()

    def config_map_event(self, kind: str, cm: dict[str, Any]) -> None:
        name = cm["metadata"]["name"]
        if not _watched(name):
            return
        with self.lock:
            if kind == "DELETED":
                self.config_maps.pop(name, None)
            else:
                self.config_maps[name] = cm
        log.info("ConfigMap %s %s", name, kind.lower(),
                 extra={"configmap": name, "resourceVersion": cm["metadata"].get("resourceVersion")})
        self.changed.set()

    # the node ------------------------------------------------------------------------------
    def replace_nodes(self, items: list[dict[str, Any]]) -> None:
        for node in items:
            self.node_event("ADDED", node)

    def node_event(self, kind: str, node: dict[str, Any]) -> None:
        if node["metadata"]["name"] != self.node:
            return
        labels = {} if kind == "DELETED" else dict(node["metadata"].get("labels") or {})
        report = rollout.parse_report((node["metadata"].get("annotations") or {}).get(rollout.ROLLOUT_ANNOTATION))
        with self.lock:
            if report is not None and report.state == rollout.FAILED:
                self.failed_attempt = report.attempt
            old_group, old_pool = node_group(self.node_labels), node_pool(self.node_labels)
            self.node_labels = labels
            self.node_seen = kind != "DELETED"
        if node_group(labels) != old_group:
            log.info("node group label %s changed: %r -> %r", GROUP_LABEL, old_group, node_group(labels))
        pool = node_pool(labels)
        if pool != old_pool:
            log.info("node worker pool label %s changed: %r -> %r", POOL_LABEL, old_pool, pool)
            if pool and pool_name_problem(pool):
                log.warning("no pool config applies to this node: %s", pool_name_problem(pool))
        self.changed.set()

    # Adjustments ----------------------------------------------------------------------------
    def replace_adjustments(self, items: list[dict[str, Any]]) -> None:
        with self.lock:
            self.adjustments = {_key(a): a for a in items}
        self.changed.set()

    def adjustment_event(self, kind: str, adj: dict[str, Any]) -> None:
        with self.lock:
            if kind == "DELETED":
                self.adjustments.pop(_key(adj), None)
            else:
                self.adjustments[_key(adj)] = adj
        self.changed.set()

    # views ----------------------------------------------------------------------------------------
    def selection(self, hold: bool = True) -> Selection | Held | None:
        """The ConfigMap for this node: a staged rollout's candidate on its canaries, the ordinary one elsewhere;
        Held while the ConfigMaps are between two consistent states (with ``hold`` False: the ordinary one then)."""
        with self.lock:
            choice, why, attempt = rollout.choose(self.node, self.config_maps, self.failed_attempt)
            if choice == rollout.HOLD and not hold:
                choice = rollout.GOOD
            if choice == rollout.HOLD:
                return Held(why)
            if choice == rollout.GOOD:
                return select_config(self.node, self.node_labels, self.config_maps)
            selected = select_config(self.node, self.node_labels, self.config_maps, rollout.CANDIDATE_PREFIX)
        if selected is None:
            return None
        return dataclasses.replace(selected, attempt=attempt, reason=f"{selected.reason}; {why}")

    def mark_failed(self, attempt: str) -> None:
        with self.lock:
            self.failed_attempt = attempt

    def node_adjustments(self) -> dict[str, dict[str, Any]]:
        """Adjustments whose scope can include this node (a bad spec is passed on to be reported)."""
        out = {}
        with self.lock:
            items = dict(self.adjustments)
        for key, adj in items.items():
            spec = adj.get("spec")
            try:
                if not parse_adjustment(key, spec).applies_to_node(self.node):
                    continue
            except AdjustmentError:
                pass  # cri-resmgr rejects it with the same message, and it lands in the status
            out[key] = adj
        return out


def _key(adj: dict[str, Any]) -> str:
    meta = adj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _adjustments_digest(adjustments: Mapping[str, Mapping[str, Any]]) -> str:
    return json.dumps({k: a.get("spec") for k, a in adjustments.items()}, sort_keys=True, default=str)


def validate_selection(selection: Selection) -> tuple[str, str, str]:
    """The schema's verdict on a ConfigMap, checked before anything is pushed: (error, warning, info), "" for
    none; warning names the unknown fields (left out, as upstream does), info the fields accepted but not
    applied by this cri-resmgr. Only an error stops the push."""
    if selection.binary_keys:
        return (f"{selection.source}: binaryData keys {', '.join(selection.binary_keys)} are not supported; "
                "put each config section under data as YAML text"), "", ""
    try:
        checked = check_config_sections(dict(selection.data), source=selection.source)
    except ConfigError as exc:
        return str(exc), "", ""
    return "", checked.warning, checked.info


def diff_summary(dry: DryRun) -> str:
    """A dry run in one line, for the Node annotation and the Event: the counts, then the first few containers
    (``namespace/pod/container: old -> new cpuset``) while they fit ``rollout.MAX_DIFF``."""
    if dry.error:
        return f"refused: {dry.error}"
    if not dry.changes:
        return f"{dry.containers} containers, none would move"
    kinds = ", ".join(f"{n} {kind}" for kind, n in dry.counts().items() if n)
    text = f"{dry.containers} containers, {len(dry.changes)} would change ({kinds})"
    shown = 0
    for change in dry.changes[:DIFF_EXAMPLES]:
        line = change.line()
        if shown and len(text) + len(line) + 30 > rollout.MAX_DIFF:
            break
        text += (": " if not shown else "; ") + line
        shown += 1
    more = len(dry.changes) - shown
    return text + (f"; {more} more in the agent's log" if more else "")


def one_line(text: str, limit: int = 400) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


@dataclass
class Pusher:
    """Delivers config and adjustments to cri-resmgr; see the module docstring."""

    state: AgentState
    target: ConfigTarget
    reporter: Reporter
    min_interval: float = 1.0
    retry_initial: float = 0.5
    retry_max: float = 30.0
    clock: Callable[[], float] = time.monotonic
    outcome: Outcome = field(default_factory=Outcome)
    pushes: int = 0
    _last_push: float = float("-inf")
    _retry_delay: float = 0.0
    _retry_at: float = 0.0
    _epoch: int = -1
    _adj_digest: str | None = None
    hold_max: float = 60.0  # longest hold on ConfigMaps that disagree with cri-resmgr-rollout
    _held_since: float | None = None
    _held_warned: bool = False
    # The schema's verdict on the selection with this digest: a push that is retried is not checked again.
    _verdict: tuple[str, tuple[str, str, str]] | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    # one reconcile step (tests call this directly) -------------------------------------------
    def reconcile(self) -> float | None:
        """Do what is due now; returns seconds until the next step is due (None: only on change)."""
        now = self.clock()
        epoch = self.target.epoch()
        if epoch != self._epoch:
            # A new connection: cri-resmgr may have restarted and lost adjustments; deliver again.
            self._epoch = epoch
            self.outcome.delivered = False
            self.outcome.digest = ""
            self._adj_digest = None
        if now < self._retry_at:
            return self._retry_at - now
        wait = self._last_push + self.min_interval - now
        if wait > 0 and self._pending():
            return wait
        try:
            next_in = self._reconcile_config()
            self._reconcile_adjustments()
        except PushError as exc:
            self._retry_delay = min(self.retry_max, max(self.retry_initial, self._retry_delay * 2))
            self._retry_at = self.clock() + self._retry_delay
            message = one_line(f"cannot deliver to cri-resmgr: {exc}")
            if self.outcome.error != message:
                log.warning("%s; retrying in %.1fs", message, self._retry_delay)
            self.outcome.error, self.outcome.at = message, time.time()
            self.outcome.delivered = self.outcome.rejected = False
            return self._retry_delay
        self._retry_delay = 0.0
        return next_in

    def _pending(self) -> bool:
        selection = self.state.selection()
        if _adjustments_digest(self.state.node_adjustments()) != self._adj_digest:
            return True
        return not isinstance(selection, Held) and self._digest(selection) != self.outcome.digest

    @staticmethod
    def _digest(selection: Selection | None) -> str:
        if selection is None:
            return "none"
        return (selection.name + ":" + sections_digest(selection.data) + ":" + ",".join(selection.binary_keys)
                + ":" + selection.attempt)

    def _reconcile_config(self) -> float | None:
        """Push what is due; returns seconds until a hold ends (None: nothing to wait for)."""
        selection = self.state.selection()
        if isinstance(selection, Held):
            now = self.clock()
            if self._held_since is None:
                log.info("not pushing now, cri-resmgr keeps its config: %s", selection.reason)
                self._held_since = now
            if now - self._held_since < self.hold_max:
                return self._held_since + self.hold_max - now
            # A promotion or a stop settles within seconds; a hold this long is a mismatch that would otherwise
            # keep every node (new ones too) without its config: go by the ordinary ConfigMaps, as before rollouts.
            if not self._held_warned:
                log.warning("the ConfigMaps still disagree with cri-resmgr-rollout after %.0fs (%s); using the "
                            "cri-resmgr-config ConfigMaps as they are", self.hold_max, selection.reason)
                self._held_warned = True
            selection = self.state.selection(hold=False)
            assert not isinstance(selection, Held)
        else:
            self._held_since, self._held_warned = None, False
        self._push_config(selection)
        return None

    def _push_config(self, selection: Selection | None) -> None:
        digest = self._digest(selection)
        if digest == self.outcome.digest and self.outcome.delivered:
            return
        if selection is None:
            if self.outcome.digest != digest:
                log.info("no cri-resmgr-config ConfigMap applies to node %s; cri-resmgr keeps its config",
                         self.state.node)
                self.outcome = Outcome(selection=None, digest=digest, delivered=True, at=time.time())
                self.reporter.config_outcome(None, "")
            return
        if digest == self.outcome.digest and self.outcome.rejected:
            return  # rejected before and unchanged since: never re-push
        if self._verdict is None or self._verdict[0] != digest:
            self._verdict = (digest, validate_selection(selection))
        error, warning, info = self._verdict[1]
        if not error and selection.attempt:
            error = self._dry_run(selection)  # may raise PushError
        if not error:
            self._last_push = self.clock()
            self.pushes += 1
            log.info("pushing %s (resourceVersion %s; %s) to cri-resmgr", selection.source,
                     selection.resource_version, selection.reason, extra={"configmap": selection.name})
            error = self.target.set_config(self.state.node, selection.data, selection.source)  # may raise PushError
        error = one_line(error) if error else ""
        applied = not error
        if error.startswith(AGENT_DISABLED):
            # Upstream's precedence: --force-config wins over every dynamic config. Not an error: the node
            # works as configured, and the agent stays Ready; the ConfigMap waits until it changes.
            error, info, applied = "", f"{FORCE_IN_EFFECT} ({error})", False
        if error or not applied:
            warning = ""  # about a config that is not in force
        self.outcome = Outcome(selection=selection, digest=digest, error=error, info=info, warning=warning,
                               at=time.time(), delivered=not error, rejected=bool(error))
        if error:
            log.error("%s was not applied, cri-resmgr keeps its current config: %s", selection.source, error)
        elif not applied:
            log.info("%s: %s", selection.source, info, extra={"configmap": selection.name})
        else:
            log.info("%s is active in cri-resmgr", selection.source, extra={"configmap": selection.name})
            for note in (warning, info):
                if note:
                    log.warning("%s: %s", selection.source, note, extra={"configmap": selection.name})
        self.reporter.config_outcome(selection, error, info, applied=applied, warning=warning)
        if selection.attempt:
            self._report_attempt(selection, error, applied)

    def _dry_run(self, selection: Selection) -> str:
        """A canary's dry run of the candidate, before the push: reported on the Node and in an Event, every
        container in the log. Returns why cri-resmgr would refuse the candidate ("": push it): then it is reported
        failed without a push, which would meet the same checks."""
        attempt = selection.attempt
        dry = self.target.dry_run(self.state.node, selection.data, selection.source)  # may raise PushError
        if dry is None:
            log.info("config rollout %s: this cri-resmgr has no dry run; pushing without reporting a diff", attempt)
            return ""
        if dry.error.startswith(AGENT_DISABLED):
            return ""  # --force-config wins: the push finds that out too and reports the attempt forced
        summary = diff_summary(dry)
        log.log(logging.WARNING if dry.error else logging.INFO, "config rollout %s, dry run of %s on this canary: %s",
                attempt, selection.source, summary, extra={"configmap": selection.name})
        for change in dry.changes:
            log.info("config rollout %s would change %s", attempt, change.line(),
                     extra={"container_id": change.container_id, "change": change.kind})
        self.reporter.rollout_diff(selection, rollout.DiffReport(attempt, summary), refused=bool(dry.error))
        return dry.error

    def _report_attempt(self, selection: Selection, error: str, applied: bool) -> None:
        """A canary's outcome goes on the Node for the extension; a failed candidate is replaced by the last good
        config at once, so the node does not wait for the extension to stop the rollout."""
        state = rollout.FAILED if error else rollout.APPLIED if applied else rollout.FORCED
        self.reporter.rollout_outcome(selection, rollout.Report(selection.attempt, state, error))
        if not error:
            log.info("config rollout %s: %s on this canary", selection.attempt, state)
            return
        log.error("config rollout %s failed on this canary; going back to the last good config",
                  selection.attempt, extra={"configmap": selection.name})
        self.state.mark_failed(selection.attempt)
        self._reconcile_config()  # now selects the ordinary ConfigMap (or holds); may raise PushError: retried

    def _reconcile_adjustments(self) -> None:
        adjustments = self.state.node_adjustments()
        specs = {k: json.dumps(a.get("spec"), sort_keys=True, default=str) for k, a in adjustments.items()}
        digest = _adjustments_digest(adjustments)
        if digest == self._adj_digest:
            return
        if not specs and self._adj_digest is None:
            self._adj_digest = digest  # nothing to say yet, and cri-resmgr starts with no adjustments
            return
        self._last_push = self.clock()
        self.pushes += 1
        results, error = self.target.set_adjustments(self.state.node, specs)  # may raise PushError
        if error:
            log.error("cri-resmgr refused the adjustments: %s", error)
            results = {name: {"error": error, "container_errors": {}, "applied": []} for name in specs}
        self._adj_digest = digest
        self.reporter.adjustment_outcomes(results, adjustments)

    # health -----------------------------------------------------------------------------------------
    def health(self, query: str) -> str:
        """"" when healthy for ``query``, else a one-line reason."""
        if query not in HEALTH_QUERIES:
            return f"unknown health query {query!r}; supported: {', '.join(q for q in HEALTH_QUERIES if q)}"
        if query != QUERY_CONFIG_STATUS:
            return ""
        o = self.outcome
        if o.error:
            where = o.selection.source if o.selection else "config"
            return one_line(o.error if o.error.startswith(where) else f"{where}: {o.error}")
        if o.selection is not None and not o.delivered:
            return f"{o.selection.source} has not been delivered to cri-resmgr yet"
        return ""

    # thread ------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pusher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.state.changed.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        next_in: float | None = 0.0
        while not self._stop.is_set():
            self.state.changed.wait(timeout=next_in)
            if self._stop.is_set():
                return
            self.state.changed.clear()
            try:
                next_in = self.reconcile()
            except Exception:  # keep pushing whatever happens; the error is in the log
                log.exception("agent reconcile failed")
                next_in = self.retry_max
