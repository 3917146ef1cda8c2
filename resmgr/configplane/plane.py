"""The configuration plane inside cri-resmgr: what the agent may change, and how it is applied.

Precedence of config sources is cri-resource-manager's:

1. ``--force-config FILE``: while it is given, configuration from the agent is refused
   (the agent is told why) and SIGHUP re-reads the file;
2. the last config from the agent that was applied successfully (persisted under the
   relay dir by the applier, so it survives a restart);
3. ``--fallback-config FILE``;
4. built-in defaults.

The plane validates with the shared schema (``resmgr.config``) and hands a valid config
to a ``ConfigApplier``, which the relay/resource manager implements. The applier returns
an error string to reject (for example a policy switch at runtime); then nothing
changes and the error goes back to the agent.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from resmgr.config import ConfigError, ConfigSections, check_config_sections, report_findings
from resmgr.config.errors import AGENT_DISABLED
from resmgr.config.files import read_config_file, sha256_hex
from resmgr.configplane.adjustments import (
    AdjustmentOutcome,
    ContainerOverride,
    ContainerView,
    plan_adjustments,
)
from resmgr.model.explanation import Explanation
from resmgr.model.placement_change import DryRun

log = logging.getLogger("resmgr.configplane")

AGENT_SOURCE = "agent"  # the source label of agent configs cri-resmgr refused (cri_resmgr_config_errors_total)


class ConfigApplier(Protocol):
    """Implemented by the relay/resource manager."""

    def apply_config(self, config: ConfigSections, source: str, *, forced: bool = False) -> str | None:
        """Make ``config`` (checked by the schema, typed; ``config.raw`` is the normalised mapping) active;
        return None, or why it was rejected.

        ``forced`` is set when the config is the re-read ``--force-config`` file.
        A rejected config must leave the previous one fully in effect.
        """
        ...

    def list_containers(self) -> list[ContainerView]:
        """The containers adjustments can select (running ones, with runtime ids)."""
        ...

    def apply_adjustments(self, overrides: dict[str, ContainerOverride]) -> dict[str, str]:
        """Make ``overrides`` (container id -> override) the complete set of overrides.

        Containers not in the mapping return to their own resources. Returns container
        id -> error for containers whose override could not be applied.
        """
        ...

    def placements(self) -> tuple[str, list[Explanation]]:
        """(the active policy, where it placed each container and why) for the agent's Events."""
        ...

    def dry_run(self, config: ConfigSections, source: str) -> DryRun:
        """What ``apply_config(config, source)`` would do, changing nothing: its refusal, or the containers whose
        placement would change."""
        ...


def sections_digest(sections: Mapping[str, str]) -> str:
    """A stable digest of a config in ConfigMap form, for "unchanged" checks."""
    payload = json.dumps(dict(sorted(sections.items())), sort_keys=True, ensure_ascii=False).encode()
    return sha256_hex(payload)


@dataclass
class ConfigStatus:
    """What the plane last did, for logs, metrics and tests."""

    source: str = ""
    digest: str = ""
    applied_at: float = 0.0
    last_error: str = ""
    last_error_at: float = 0.0
    adjustments: dict[str, AdjustmentOutcome] = field(default_factory=dict)


@dataclass(frozen=True)
class _Admitted:
    """An agent config past the plane's checks (``config``), refused by them (``error``), or identical to the active
    one (``identical``: not checked again)."""

    config: ConfigSections | None = None
    error: str = ""
    disabled: bool = False  # refused because the agent is disabled: the operator's choice, not a broken config
    digest: str = ""
    identical: bool = False


class ConfigPlane:
    """Validates and applies configuration coming from the agent or the forced file."""

    def __init__(self, applier: ConfigApplier, *, node_name: str = "", force_config: str | None = None,
                 agent_disabled: bool = False, initial_source: str = "",
                 on_agent_refused: Callable[[str], None] | None = None) -> None:
        self.applier = applier
        # Told the reason of each agent config this node could not use (the metrics count them); not of the
        # refusals while the agent is disabled: those are the operator's choice, not a broken config.
        self.on_agent_refused = on_agent_refused
        self.node_name = node_name
        self.force_config = force_config
        self.agent_disabled = agent_disabled or bool(force_config)
        self.status = ConfigStatus(source=initial_source)
        self._adjustment_specs: dict[str, Any] = {}
        self._adjustment_node = node_name
        # One config change at a time: the agent, SIGHUP and adjustments never interleave.
        self._lock = threading.Lock()

    # -- config ---------------------------------------------------------------------------------
    def _check_node(self, node_name: str) -> str:
        if self.node_name and node_name and node_name != self.node_name:
            return (f"config is for node {node_name!r} but this cri-resmgr runs on {self.node_name!r}; "
                    "is the agent's NODE_NAME right?")
        return ""

    def set_config(self, node_name: str, sections: Mapping[str, str], source: str = "agent") -> str:
        """Apply a config from the agent (ConfigMap form). Returns "" on success or the reason it was refused."""
        source = source or "agent"
        with self._lock:
            admitted = self._admit(node_name, sections, source)
            if admitted.disabled:
                return self._rejected(admitted.error, source)
            if admitted.error:
                return self._agent_refused(self._rejected(admitted.error, source))
            if admitted.identical:
                log.info("config from %s is identical to the active one; nothing to apply", source)
                self.status.source = source
                return ""
            assert admitted.config is not None
            return self._agent_refused(self._apply(admitted.config, source, admitted.digest, forced=False))

    def dry_run(self, node_name: str, sections: Mapping[str, str], source: str = "agent") -> DryRun:
        """What ``set_config`` would do with this config, changing nothing (no status, no metrics): refused (why),
        or which containers would be placed differently. The plane's lock is held only for the checks the agent's
        push would meet here; the applier takes its snapshot under its own."""
        source = source or "agent"
        with self._lock:
            admitted = self._admit(node_name, sections, source)
        if admitted.error:
            return DryRun(error=admitted.error)
        try:
            # A config identical to the active one is tried too: nothing moves, and the reply counts the containers.
            config = admitted.config or check_config_sections(dict(sections), source=source).sections
            return self.applier.dry_run(config, source)
        except Exception as exc:  # as in _apply: the applier must not take the config socket down with it
            log.exception("dry run of the config from %s failed", source)
            return DryRun(error=f"internal error while trying the config: {exc}")

    def _admit(self, node_name: str, sections: Mapping[str, str], source: str) -> _Admitted:
        """The checks before an agent config reaches the applier (the caller holds the lock)."""
        error = self._check_node(node_name)
        if error:
            return _Admitted(error=error)
        if self.agent_disabled:
            why = f"--force-config {self.force_config}" if self.force_config else "--disable-agent"
            return _Admitted(error=f"{AGENT_DISABLED} ({why} is in effect)", disabled=True)
        digest = sections_digest(sections)
        if digest == self.status.digest:
            return _Admitted(digest=digest, identical=True)
        try:
            checked = report_findings(check_config_sections(dict(sections), source=source), source)
        except ConfigError as exc:
            return _Admitted(error=str(exc), digest=digest)
        return _Admitted(config=checked.sections, digest=digest)

    def _agent_refused(self, error: str) -> str:
        if error and self.on_agent_refused is not None:
            self.on_agent_refused(error)
        return error

    def reload_force_config(self) -> str:
        """SIGHUP: re-read and apply ``--force-config``. Returns "" on success or why the old config stays."""
        if not self.force_config:
            return "no --force-config file to reload"
        path = self.force_config
        with self._lock:
            try:
                file = read_config_file(path)
            except ConfigError as exc:
                return self._rejected(str(exc), path)
            return self._apply(file.sections, path, file.digest, forced=True)

    def _apply(self, config: ConfigSections, source: str, digest: str, *, forced: bool) -> str:
        try:
            error = self.applier.apply_config(config, source, forced=forced)
        except Exception as exc:  # the applier must not take the config socket down with it
            log.exception("applying config from %s failed", source)
            error = f"internal error while applying the config: {exc}"
        if error:
            return self._rejected(error, source)
        self.status.source, self.status.digest, self.status.applied_at = source, digest, time.time()
        self.status.last_error = ""
        log.info("config from %s is now active", source, extra={"config_source": source})
        return ""

    def _rejected(self, error: str, source: str) -> str:
        self.status.last_error, self.status.last_error_at = error, time.time()
        log.error("config from %s rejected, the current config stays: %s", source, error,
                  extra={"config_source": source, "active_source": self.status.source})
        return error

    # -- placements ----------------------------------------------------------------------------
    def placements(self) -> tuple[str, list[Explanation]]:
        """The active policy and its placement explanations (GetPlacements); no lock: the applier has its own."""
        return self.applier.placements()

    # -- adjustments ---------------------------------------------------------------------------
    def set_adjustments(self, node_name: str, specs: Mapping[str, Any]) -> tuple[dict[str, AdjustmentOutcome], str]:
        """Replace the node's adjustments. Returns per-adjustment outcomes and a request-level error."""
        with self._lock:
            error = self._check_node(node_name)
            if error:
                return {}, error
            self._adjustment_specs = dict(specs)
            self._adjustment_node = node_name or self.node_name
            return self._apply_adjustments(quiet=False)

    def refresh_adjustments(self) -> None:
        """Apply the current adjustments to containers that appeared since they arrived (no-op without any)."""
        with self._lock:
            if self._adjustment_specs:
                self._apply_adjustments(quiet=True)

    def _apply_adjustments(self, *, quiet: bool) -> tuple[dict[str, AdjustmentOutcome], str]:
        try:
            containers = self.applier.list_containers()
        except Exception as exc:
            log.exception("listing containers for adjustments failed")
            return {}, f"internal error while listing containers: {exc}"
        plan = plan_adjustments(self._adjustment_node, self._adjustment_specs, containers)
        by_id = {c.id: c for c in containers}
        try:
            failures = self.applier.apply_adjustments(plan.overrides)
        except Exception as exc:
            log.exception("applying adjustments failed")
            return plan.outcomes, f"internal error while applying adjustments: {exc}"
        for cid, problem in failures.items():
            override = plan.overrides.get(cid)
            outcome = plan.outcomes.get(override.adjustment) if override else None
            if outcome is None:
                continue
            if cid in outcome.applied:
                outcome.applied.remove(cid)
            outcome.container_errors[by_id[cid].pretty if cid in by_id else cid] = problem
        self.status.adjustments = plan.outcomes
        for name, outcome in plan.outcomes.items():
            problem = bool(outcome.error or outcome.container_errors)
            if quiet and not problem:
                continue
            log.log(logging.WARNING if problem else logging.INFO, "adjustment %s: applied to %d containers", name,
                    len(outcome.applied), extra={"adjustment": name, "error": outcome.error,
                                                 "container_errors": outcome.container_errors})
        return plan.outcomes, ""
