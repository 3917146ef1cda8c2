"""The shoot owner's part of the validation: the providerConfig and the configs it carries.

One implementation for two callers: the actuator runs it at every reconcile (extension/actuator.py, before it
adds the operator's base configs), and the garden's admission (admission/) runs it when a Shoot is created or
updated, so ``kubectl apply`` refuses what the reconcile would refuse. What only the seed knows stays out of it:
the operator's base configs (the ConfigMap from the ControllerDeployment's values.configs) are checked by the
reconcile alone; a shoot config replaces a base config of the same name, so the shoot's configs are validated
on their own, exactly as they end up in the merged set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from extension.configs import SplitConfigs, validate_and_split
from extension.errors import ConfigurationError
from extension.gardener import versions
from extension.provider_config import (
    ProviderConfig,
    check_pool_configs,
    check_pool_modes,
    check_worker_pools,
    parse_provider_config,
)

# The nri and auto installers label their node; a ValidatingAdmissionPolicy (GA in 1.30) keeps them to the one label
# of their own node (charts/internal/cri-resmgr-installation/templates/installer-node-record.yaml).
NRI_MIN_KUBERNETES = ">= 1.30"


@dataclass(frozen=True)
class ShootConfig:
    """A valid providerConfig, with its own configs validated and split."""

    provider_config: ProviderConfig
    configs: SplitConfigs
    # Worker pools named that the shoot does not have (only when the caller passes the shoot's pools): a
    # warning, never a refusal (a pool removed from the shoot must not block it).
    pool_warnings: tuple[str, ...] = ()

    @property
    def warnings(self) -> tuple[str, ...]:
        """What to tell the shoot owner without refusing: the pools, then the config fields left out or
        accepted but not applied."""
        return (*self.pool_warnings, *self.configs.notes)


def shoot_configs(pc: ProviderConfig, *, where: str = "providerConfig") -> SplitConfigs:
    """The shoot's own configs (``<where>.configs``), validated with cri-resmgr's schema and split."""
    return validate_and_split(pc.configs, where=f"{where}.configs")


def check_shoot_config(raw: Any, *, where: str = "providerConfig", shoot_pools: list[str] | None = None,
                       kubernetes_version: str = "") -> ShootConfig:
    """Parse and validate a shoot's providerConfig (None: not set); ConfigurationError names the field under
    ``where``. With ``shoot_pools`` (the shoot's worker pool names), pools it names that the shoot lacks are
    warnings. With ``kubernetes_version`` (the shoot's), a mode the shoot's Kubernetes cannot run is refused."""
    pc = parse_provider_config(raw, where=where)
    check_mode_supported(pc, kubernetes_version, where=where)
    split = shoot_configs(pc, where=where)
    pools: list[str] = []
    if shoot_pools is not None:
        pools = [*check_worker_pools(pc.worker_pools, shoot_pools, where=f"{where}.workerPools"),
                 *check_pool_configs(pc.configs, shoot_pools, where=f"{where}.configs"),
                 *check_pool_modes(pc.pool_modes, shoot_pools, where=f"{where}.modes")]
    return ShootConfig(pc, split, tuple(pools))


def check_mode_supported(pc: ProviderConfig, kubernetes_version: str, *, where: str = "providerConfig") -> None:
    """ConfigurationError when a node would leave the relay on a Kubernetes without ValidatingAdmissionPolicy."""
    uses = sorted({pc.mode, *pc.pool_modes.values()} - {"relay"})
    if uses and kubernetes_version and not versions.matches(NRI_MIN_KUBERNETES, kubernetes_version):
        field = f"{where}.mode" if pc.mode != "relay" else f"{where}.modes"
        raise ConfigurationError(field, f"mode {uses[0]} needs Kubernetes {NRI_MIN_KUBERNETES.removeprefix('>= ')} or "
                                        f"later (the shoot runs {kubernetes_version}): the installer's node label is "
                                        "limited to its own node by a ValidatingAdmissionPolicy")


def with_base(shoot: SplitConfigs, base: SplitConfigs) -> SplitConfigs:
    """The shoot's configs over the base configs (already validated without the names the shoot sets)."""
    return SplitConfigs(static={**base.static, **shoot.static}, dynamic={**base.dynamic, **shoot.dynamic},
                        notes=[*base.notes, *shoot.notes])
