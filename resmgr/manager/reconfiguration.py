"""Reconfiguration: the startup config and policy, a config applied at runtime (a policy switch, or the same
policy carrying its allocations over), and containers re-placed for Adjustments."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from resmgr.config import ConfigError
from resmgr.config.files import CACHE, DEFAULTS, FALLBACK, FORCE, choose_config
from resmgr.config.sections import ConfigSections
from resmgr.manager.cache import CacheData
from resmgr.manager.explanations import explain
from resmgr.manager.placement_diff import diff_placements
from resmgr.manager.state import (
    ManagerState,
    RePlaced,
    Resize,
)
from resmgr.model.placement_change import DryRun, placement_changes
from resmgr.model.resources import (
    ContainerInfo,
)
from resmgr.policy.base import Policy, RestoreError
from resmgr.policy.registry import active_policy_name, create_policy
from resmgr.relay.hooks import ContainerUpdate

log = logging.getLogger("resmgr.resource-manager")


class Reconfiguration(ManagerState):
    """Config apply, policy switch and carry-over, ``re_place``."""

    def _startup_config(self, data: CacheData, fallback: dict[str, Any] | None, force: dict[str, Any] | None,
                        disable_switch: bool) -> tuple[dict[str, Any], str]:
        config, source = choose_config(force=force, cached=data.config, cached_source=data.config_source,
                                       fallback=fallback)
        wanted = active_policy_name(config)
        if disable_switch and data.policy and data.policy != wanted:
            log.error("policy switch from %s to %s refused (--disable-policy-switch); keeping %s",
                      data.policy, wanted, data.policy)
            if data.config is not None and active_policy_name(data.config) == data.policy:
                return data.config, data.config_source or "cache"
            return {"policy": {"Active": data.policy}}, CACHE
        return config, source

    def _startup_policy(self, config: dict[str, Any], source: str,
                        fallback: dict[str, Any] | None) -> Policy:
        """The policy for the startup config; a cached config that no longer fits falls back."""
        candidates = [(config, source)]
        if source not in (FORCE, FALLBACK, DEFAULTS):
            # Only a cached (agent-pushed) config falls back: the agent will push again,
            # while a bad file given on the command line must stop the start loudly.
            if fallback is not None:
                candidates.append((fallback, FALLBACK))
            candidates.append(({}, DEFAULTS))
        for i, (cfg, src) in enumerate(candidates):
            try:
                policy = create_policy(cfg, self.topology, sysfs_root=self.sysfs_root, state=self.state)
            except ConfigError as exc:
                if i == len(candidates) - 1:
                    raise exc.with_source(src) from None
                log.error("config from %s does not fit this node: %s; trying the next source", src, exc)
                continue
            self._startup_choice = (cfg, src)
            return policy
        raise AssertionError("unreachable")  # pragma: no cover

    def set_config(self, config: dict[str, Any], *, source: str = "agent") -> list[ContainerUpdate]:
        """Apply a new (already schema-validated) config at runtime.

        Raises ConfigError naming the field if it is rejected; the previous config
        stays active. Another policy is switched to live (every container re-placed, the
        result persisted), unless ``--disable-policy-switch`` was given: then it is refused.
        """
        with self._lock:
            self._check_not_forced(source)
            return self._decided(self._apply(config, source))

    def _check_not_forced(self, source: str) -> None:
        if self.forced:
            raise ConfigError("<document>", "a forced config (--force-config) is in effect; "
                                            "configuration updates are ignored", source=source)

    def _check_switch(self, wanted: str, source: str) -> None:
        if wanted != self.policy.name and self.disable_policy_switch:
            raise ConfigError("policy.Active",
                              f"switching the active policy from {self.policy.name!r} to {wanted!r} is disabled "
                              f"(--disable-policy-switch); {self.policy.name!r} stays active", source=source)

    def dry_run(self, config: dict[str, Any], *, source: str = "agent") -> DryRun:
        """What ``set_config(config)`` would do, done on copies: whether it would be refused (the same checks; the
        controllers' read-only), and which containers the candidate's policy would place differently.

        The candidate places into a fork of the state, as a real apply does, but nothing live changes: not the
        state, the policy, the cache, the timers or the controllers. The lock is held only while the snapshot is
        taken (a fork, the active policy's exported state and placements), so decisions do not wait for the
        candidate's placing, which runs outside it against the snapshot."""
        wanted = active_policy_name(config)
        with self._lock:
            try:
                self._check_not_forced(source)
                self._check_switch(wanted, source)
            except ConfigError as exc:
                return DryRun(policy=wanted, error=str(exc))
            state = self.state.fork()
            live = dict(self.policy.containers)
            exported = None if wanted != self.policy.name else self.policy.export_state()
            known, pods = dict(self.containers.items()), dict(self.pods)
            old = explain(self.policy, known, pods)
        try:
            policy = create_policy(config, self.topology, sysfs_root=self.sysfs_root, state=state)
            self.controllers.check(ConfigSections.of(config))
        except ConfigError as exc:
            return DryRun(policy=wanted, error=str(exc.with_source(source)), containers=len(old))
        failed: dict[str, str] = {}
        if exported is None:
            _allocate(policy, live, failed)
        else:
            self._carry_over(policy, live, exported, failed)
        dry = DryRun(policy=wanted, containers=len(old),
                     changes=placement_changes(old, explain(policy, known, pods), failed))
        if failed:  # a real apply stops at the first container its policy cannot place: the config is refused
            cid, error = next(iter(failed.items()))
            dry.error = (f"the {wanted} policy cannot place {len(failed)} container(s), e.g. {cid[:13]}: {error}; "
                         "applying it would fail")
        return dry

    def reconfigure(self, config: dict[str, Any], source: str = FORCE) -> list[ContainerUpdate]:
        """SIGHUP: apply the re-read ``--force-config`` (same rules as set_config, never refused as forced)."""
        with self._lock:
            return self._decided(self._apply(config, source))

    def _apply(self, config: dict[str, Any], source: str) -> list[ContainerUpdate]:
        wanted = active_policy_name(config)
        switching = wanted != self.policy.name
        self._check_switch(wanted, source)
        # The new policy places into a fork of the state, adopted below once it took it: a config refused on the
        # way leaves the state as the active policy has it.
        state = self.state.fork()
        try:
            policy = create_policy(config, self.topology, sysfs_root=self.sysfs_root, state=state)
            # A Required controller that cannot apply it refuses the config.
            self.controllers.configure(ConfigSections.of(config))
        except ConfigError as exc:
            raise exc.with_source(source) from None
        old = self.policy.placements()
        live = dict(self.policy.containers)
        if switching:
            # A live switch: every container (pending reservations too) is placed again by the new
            # policy; the diff below moves their cgroups through the ordered update path.
            log.info("switching policy from %s to %s at runtime: re-placing %d containers", self.policy.name,
                     wanted, len(live))
            _allocate(policy, live)
        else:
            self._carry_over(policy, live, self.policy.export_state())
        self.state, self.policy = state, policy
        self._mutations += 1
        self.config, self.config_source = config, source
        if not self.forced:
            self._cached_config = (config, source)
        self.save()
        for cid in self._running_ids():  # new class definitions apply to running containers too (upstream)
            self._apply_container_classes(cid)
        log.info("applied config from %s (policy %s)", source, policy.name)
        return diff_placements(old, policy.placements(), reason="config changed")

    def _carry_over(self, policy: Policy, live: dict[str, ContainerInfo], exported: dict[str, Any],
                    failed: dict[str, str] | None = None) -> None:
        """Same policy, new config: keep the allocations (the active policy's ``exported`` state) that still fit,
        re-allocate if they do not. ``failed``: a dry run's (see ``_allocate``)."""
        try:
            policy.restore_state(exported, live)
            if policy.name != "none":
                _allocate(policy, {cid: c for cid, c in live.items() if cid not in policy.grants}, failed)
        except RestoreError as exc:
            log.info("allocations do not fit the new config (%s); re-allocating%s", exc,
                     "" if failed is None else " (dry run)")
            policy.state.unplace_all()
            _allocate(policy, live, failed)

    def re_place(self, resize: Mapping[str, Resize | None], *, reason: str) -> RePlaced:
        """Let the policy place containers again with other resources: release, allocate, save, diff, under the lock.

        For each container id, ``resize`` maps the container's own resources to what the policy should
        see (None: its own). A container the policy cannot place that way goes back to its own resources
        and its error is returned; ids that are not running are listed as missing. The returned updates
        move every container whose placement changed.
        """
        result = RePlaced()
        with self._lock:
            old = self.policy.placements()
            changed = False
            for cid in sorted(resize):
                own = self.containers.get(cid)
                if own is None or cid not in self.policy.containers:
                    result.missing.append(cid)
                    continue
                change = resize[cid]
                try:
                    changed |= self._place(cid, own if change is None else change(own))
                except Exception as exc:  # the policy could not place it: put the container back as it was
                    log.error("re-placing %s failed: %s", cid, exc)
                    result.errors[cid] = f"the {self.policy.name} policy could not apply it: {exc}"
                    self._place(cid, own, always=True)
                    changed = True
            if changed:
                self._mutations += 1
                self.save()
            result.updates = self._decided(diff_placements(old, self.policy.placements(), reason=reason))
        return result


def _allocate(policy: Policy, containers: Mapping[str, ContainerInfo], failed: dict[str, str] | None = None) -> None:
    """Let ``policy`` place each container. With ``failed`` (a dry run) a container it cannot place is recorded there
    and the others are still tried; without, the error stops the apply (the config is refused)."""
    for cid, c in containers.items():
        if failed is None:
            policy.allocate(cid, c)
            continue
        try:
            policy.allocate(cid, c)
        except Exception as exc:  # what would stop a real apply: reported per container
            failed[cid] = str(exc) or type(exc).__name__
