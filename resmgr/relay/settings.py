"""The parts of the active config the relay itself applies: ``dump``, ``instrumentation`` and ``logger``.

The ``policy`` section belongs to the resource manager. Which config is active is decided in
``resmgr.config.files`` (files) and by the resource manager (the cached agent config); the config
is already validated with the shared schema when it gets here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from resmgr.relay.dump import DumpConfig, dump_config_from_section
from resmgr.relay.metrics import DEFAULT_METRICS_ADDRESS


class SettingsError(ValueError):
    """A config the relay cannot use; the message names its source and the problem."""


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
