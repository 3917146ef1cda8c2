"""A ConfigApplier for tests that keeps what it was given (the plane's side of the contract only)."""

from __future__ import annotations

from resmgr.configplane.adjustments import ContainerOverride, ContainerView
from resmgr.model.placement_change import DryRun, PlacementChange


class RecordingApplier:
    """A ConfigApplier that keeps what it was given and can refuse policy switches."""

    def __init__(self, containers: list[ContainerView] | None = None) -> None:
        self.applied: list[tuple[dict, str, bool]] = []
        self.policy = "topology-aware"
        self.containers = containers or []
        self.overrides: dict[str, ContainerOverride] = {}
        self.fail_containers: set[str] = set()
        self.explanations: list = []
        self.dry_changes: list[PlacementChange] = []  # what a dry run of a config the applier takes reports
        self.dry_runs: list[tuple[dict, str]] = []

    def _refusal(self, config):
        wanted = config.policy.active
        if wanted != self.policy:
            return f"switching the active policy from {self.policy!r} to {wanted!r} at runtime is not supported"
        return None

    def apply_config(self, config, source, *, forced=False):
        refusal = self._refusal(config)
        if refusal:
            return refusal
        self.applied.append((config.raw, source, forced))
        return None

    def dry_run(self, config, source):
        self.dry_runs.append((config.raw, source))
        refusal = self._refusal(config)
        if refusal:
            return DryRun(policy=config.policy.active, error=refusal)
        return DryRun(policy=config.policy.active, containers=len(self.containers), changes=list(self.dry_changes))

    def list_containers(self):
        return list(self.containers)

    def apply_adjustments(self, overrides):
        self.overrides = {k: v for k, v in overrides.items() if k not in self.fail_containers}
        return {cid: "policy could not place it" for cid in overrides if cid in self.fail_containers}

    def placements(self):
        return self.policy, list(self.explanations)
