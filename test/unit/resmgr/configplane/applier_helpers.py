"""A ConfigApplier for tests that keeps what it was given (the plane's side of the contract only)."""

from __future__ import annotations

from resmgr.configplane.adjustments import ContainerOverride, ContainerView


class RecordingApplier:
    """A ConfigApplier that keeps what it was given and can refuse policy switches."""

    def __init__(self, containers: list[ContainerView] | None = None) -> None:
        self.applied: list[tuple[dict, str, bool]] = []
        self.policy = "topology-aware"
        self.containers = containers or []
        self.overrides: dict[str, ContainerOverride] = {}
        self.fail_containers: set[str] = set()
        self.explanations: list = []

    def apply_config(self, config, source, *, forced=False):
        wanted = config.policy.active
        if wanted != self.policy:
            return f"switching the active policy from {self.policy!r} to {wanted!r} at runtime is not supported"
        self.applied.append((config.raw, source, forced))
        return None

    def list_containers(self):
        return list(self.containers)

    def apply_adjustments(self, overrides):
        self.overrides = {k: v for k, v in overrides.items() if k not in self.fail_containers}
        return {cid: "policy could not place it" for cid in overrides if cid in self.fail_containers}

    def placements(self):
        return self.policy, list(self.explanations)
