"""Parsing of the shoot's providerConfig for the cri-resmgr-extension."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from extension.errors import ConfigurationError

API_VERSION = "cri-resmgr.extensions.gardener.cloud/v1alpha1"
KIND = "CriResMgrConfig"
_KNOWN_KEYS = {"apiVersion", "kind", "configs", "nodeSelector", "workerPools", "webhook", "mode", "modes"}
# How cri-resmgr sits on a node (docs/usage/configuration.md, "Relay or NRI"): the CRI relay kubelet is
# repointed at, containerd's NRI plugin in a DaemonSet pod, or NRI where the node's containerd has it on.
RELAY, NRI, AUTO = "relay", "nri", "auto"
MODES = (RELAY, NRI, AUTO)
# Label keys/values as Kubernetes accepts them (prefix/name, value <= 63 chars).
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True)
class ProviderConfig:
    """What the shoot owner asked for; empty when no providerConfig is set."""

    configs: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    worker_pools: tuple[str, ...] = ()
    # cri-resmgr-webhook in the shoot (extension/webhook_certs.py, the chart's templates/webhook.yaml).
    webhook_enabled: bool = False
    # The shoot's mode (``mode``), and the worker pools that differ from it (``modes: {<pool>: <mode>}``).
    mode: str = RELAY
    pool_modes: dict[str, str] = field(default_factory=dict)

    def mode_of(self, pool: str) -> str:
        """The mode of the nodes of worker pool ``pool``."""
        return self.pool_modes.get(pool, self.mode)

    def pools_in_mode(self, mode: str) -> tuple[str, ...]:
        return tuple(sorted(p for p, m in self.pool_modes.items() if m == mode))


def _parse_mode(raw: Any, where: str) -> str:
    if raw is None:
        return RELAY
    if raw not in MODES:
        raise ConfigurationError(where, f"must be one of {', '.join(MODES)}, got {raw!r}")
    return str(raw)


def _parse_pool_modes(raw: Any, where: str, pools: list[str]) -> dict[str, str]:
    """``modes: {<worker pool>: relay|nri|auto}``; a pool outside a given ``workerPools`` is an error (it
    would select no node, and the two fields of one providerConfig contradict each other)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigurationError(where, f"must be a mapping of worker pool name to mode, got {type(raw).__name__}")
    modes: dict[str, str] = {}
    for pool, mode in raw.items():
        if not isinstance(pool, str) or not pool:
            raise ConfigurationError(where, f"worker pool names must be non-empty strings, got {pool!r}")
        _check_label_value(pool, f"{where}.{pool}")
        if pools and pool not in pools:
            raise ConfigurationError(f"{where}.{pool}", f"worker pool {pool!r} is not in workerPools "
                                                        f"({', '.join(pools)}); it would select no node")
        modes[pool] = _parse_mode(mode, f"{where}.{pool}")
    return modes


def _parse_webhook(raw: Any, where: str) -> bool:
    """``webhook: {enabled: true|false}``; absent means disabled."""
    if raw is None:
        return False
    if not isinstance(raw, dict):
        raise ConfigurationError(where, f"must be a mapping like {{enabled: true}}, got {type(raw).__name__}")
    unknown = sorted(set(raw) - {"enabled"})
    if unknown:
        raise ConfigurationError(f"{where}.{unknown[0]}", "unknown field (known: enabled)")
    enabled = raw.get("enabled", False)
    if not isinstance(enabled, bool):
        raise ConfigurationError(f"{where}.enabled", f"must be true or false, got {enabled!r}")
    return enabled


def _check_label_key(key: str, where: str) -> None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise ConfigurationError(where, f"label key {key!r} has an invalid prefix")
    if not _LABEL_NAME.match(name):
        raise ConfigurationError(where, f"label key {key!r} is not a valid label name")


def _check_label_value(value: str, where: str) -> None:
    if value and not _LABEL_NAME.match(value):
        raise ConfigurationError(where, f"label value {value!r} is not a valid label value")


def parse_provider_config(raw: Any, *, where: str = "providerConfig") -> ProviderConfig:
    """Validate and convert a providerConfig mapping (None means "not set")."""
    if raw is None:
        return ProviderConfig()
    if not isinstance(raw, dict):
        raise ConfigurationError(where, f"must be a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _KNOWN_KEYS)
    if unknown:
        raise ConfigurationError(f"{where}.{unknown[0]}",
                                 f"unknown field (known: {', '.join(sorted(_KNOWN_KEYS))})")
    if "apiVersion" in raw and raw["apiVersion"] != API_VERSION:
        raise ConfigurationError(f"{where}.apiVersion", f"must be {API_VERSION!r}, got {raw['apiVersion']!r}")
    if "kind" in raw and raw["kind"] != KIND:
        raise ConfigurationError(f"{where}.kind", f"must be {KIND!r}, got {raw['kind']!r}")

    configs = raw.get("configs") or {}
    if not isinstance(configs, dict):
        raise ConfigurationError(f"{where}.configs", "must be a mapping of config name to config text")
    for name, text in configs.items():
        if not isinstance(text, str):
            raise ConfigurationError(f"{where}.configs.{name}",
                                     f"must be a string holding YAML text, got {type(text).__name__}")

    selector = raw.get("nodeSelector") or {}
    if not isinstance(selector, dict):
        raise ConfigurationError(f"{where}.nodeSelector", "must be a mapping of label key to value")
    for key, value in selector.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ConfigurationError(f"{where}.nodeSelector.{key}", "keys and values must be strings")
        _check_label_key(key, f"{where}.nodeSelector")
        _check_label_value(value, f"{where}.nodeSelector.{key}")

    pools = raw.get("workerPools")
    if pools is None:
        pools = []
    if not isinstance(pools, list) or not all(isinstance(p, str) and p for p in pools):
        raise ConfigurationError(f"{where}.workerPools", "must be a list of worker pool names")
    for i, pool in enumerate(pools):
        _check_label_value(pool, f"{where}.workerPools[{i}]")
    if len(set(pools)) != len(pools):
        raise ConfigurationError(f"{where}.workerPools", "lists a worker pool more than once")
    mode = _parse_mode(raw.get("mode"), f"{where}.mode")
    pool_modes = _parse_pool_modes(raw.get("modes"), f"{where}.modes", pools)
    return ProviderConfig(configs=dict(configs), node_selector=dict(selector), worker_pools=tuple(pools),
                          webhook_enabled=_parse_webhook(raw.get("webhook"), f"{where}.webhook"),
                          mode=mode, pool_modes=pool_modes)


def check_worker_pools(pools: tuple[str, ...], shoot_pools: list[str], *,
                       where: str = "providerConfig.workerPools") -> list[str]:
    """Warnings for the pools the shoot owner names that the shoot does not have (any more).

    Not an error: a pool removed from the shoot must not block the shoot's reconciliation. Such an
    entry selects no node; the other entries keep working.
    """
    have = ", ".join(shoot_pools) or "none"
    return [f"{where}[{i}]: worker pool {pool!r} does not exist in the shoot (pools: {have}); it selects no node"
            for i, pool in enumerate(pools) if pool not in shoot_pools]


def check_pool_modes(pool_modes: dict[str, str], shoot_pools: list[str], *,
                     where: str = "providerConfig.modes") -> list[str]:
    """Warnings for the modes given to pools the shoot does not have (any more): not an error, as for workerPools."""
    have = ", ".join(shoot_pools) or "none"
    return [f"{where}.{pool}: worker pool {pool!r} does not exist in the shoot (pools: {have}); its mode applies "
            "to no node" for pool in sorted(pool_modes) if pool not in shoot_pools]


def check_pool_configs(configs: dict[str, str], shoot_pools: list[str], *,
                       where: str = "providerConfig.configs") -> list[str]:
    """Warnings for the shoot's pool.<POOL> configs whose pool the shoot does not have (any more).

    Not an error, as for workerPools: the ConfigMap is deployed and waits for a node of that pool.
    """
    have = ", ".join(shoot_pools) or "none"
    pools = sorted(name.partition(".")[2] for name in configs if name.startswith("pool."))
    return [f"{where}.pool.{pool}: worker pool {pool!r} does not exist in the shoot (pools: {have}); "
            "no node gets this config" for pool in pools if pool not in shoot_pools]
