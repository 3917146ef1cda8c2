"""Config files (fallback/force) and the parts of them the relay itself applies.

The relay reads ``dump``, ``instrumentation`` and ``logger`` itself; the ``policy``
section belongs to the resource manager. Validation uses the shared schema in
``resmgr.config`` so a file the extension accepted is accepted here and vice versa.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import yaml

from resmgr.relay.dump import DumpConfig, dump_config_from_section
from resmgr.relay.metrics import DEFAULT_METRICS_ADDRESS

log = logging.getLogger(__name__)

_FALLBACK_MAX_CONFIG_BYTES = 1024 * 1024


class SettingsError(ValueError):
    """A config file the relay cannot use; the message names the file and the problem."""


def _validate_text(text: str, source: str) -> dict[str, Any]:
    try:
        from resmgr.config import validate_config_text
    except ImportError:  # the shared schema not installed: parse, and check only the shape
        data = yaml.safe_load(text) if text.strip() else {}
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ValueError(f"{source}: the config must be a YAML mapping of sections") from None
        return data
    return validate_config_text(text, source=source)


def max_config_bytes() -> int:
    try:
        from resmgr.config import MAX_CONFIG_BYTES
    except ImportError:
        return _FALLBACK_MAX_CONFIG_BYTES
    return MAX_CONFIG_BYTES


def load_config_file(path: str) -> dict[str, Any]:
    """Read and validate a cri-resource-manager config file; raise SettingsError with the reason."""
    limit = max_config_bytes()
    try:
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as err:
        raise SettingsError(f"cannot read config file {path}: {err.strerror or err}") from None
    if len(raw) > limit:
        raise SettingsError(f"config file {path} is larger than the {limit} byte limit")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SettingsError(f"config file {path} is not UTF-8 text: {err}") from None
    try:
        return _validate_text(text, path)
    except ValueError as err:
        raise SettingsError(f"invalid config file {path}: {err}") from None


def available_policies() -> list[str]:
    """Policy names the resource manager offers; extended by ``resmgr.policy.registry`` when present."""
    try:
        from resmgr.policy.registry import available_policies as registered
    except ImportError:
        return ["none"]
    names = list(registered())
    return names if "none" in names else ["none", *names]


@dataclass
class RelaySettings:
    """What the relay applies from a config: dumping, metrics endpoint, debug modules, policy name."""

    dump: DumpConfig = field(default_factory=DumpConfig)
    metrics_address: str = DEFAULT_METRICS_ADDRESS
    debug_modules: list[str] = field(default_factory=list)
    policy: str = "none"
    raw: dict[str, Any] = field(default_factory=dict)


def settings_from_config(config: dict[str, Any], source: str = "") -> RelaySettings:
    """Extract the relay's own settings; raise SettingsError naming the field on bad values."""
    where = f"{source}: " if source else ""
    try:
        dump = dump_config_from_section(config.get("dump"))
    except ValueError as err:
        raise SettingsError(f"{where}{err}") from None
    instrumentation = config.get("instrumentation") or {}
    if not isinstance(instrumentation, dict):
        raise SettingsError(f"{where}instrumentation must be a mapping")
    address = instrumentation.get("HTTPEndpoint", DEFAULT_METRICS_ADDRESS)
    if not isinstance(address, str):
        raise SettingsError(f"{where}instrumentation.HTTPEndpoint must be a string like ':8891'")
    logger = config.get("logger") or {}
    if not isinstance(logger, dict):
        raise SettingsError(f"{where}logger must be a mapping")
    debug = logger.get("Debug", [])
    if isinstance(debug, str):
        debug = [part.strip() for part in debug.split(",") if part.strip()]
    if not isinstance(debug, list) or not all(isinstance(item, str) for item in debug):
        raise SettingsError(f"{where}logger.Debug must be a comma-separated string or a list of module names")
    policy = (config.get("policy") or {}).get("Active", "none") if isinstance(config.get("policy"), dict) \
        else "none"
    return RelaySettings(dump=dump, metrics_address=address, debug_modules=list(debug),
                         policy=str(policy or "none"), raw=config)


def effective_config(force_path: str | None, fallback_path: str | None) -> tuple[dict[str, Any], str]:
    """The config in force and where it came from: the forced file wins, else the fallback, else empty.

    (Configuration pushed by the agent slots in between once the config plane exists.)
    """
    if force_path:
        return load_config_file(force_path), force_path
    if fallback_path:
        return load_config_file(fallback_path), fallback_path
    return {}, "defaults"
