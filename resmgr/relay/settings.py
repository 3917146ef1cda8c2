"""The parts of the active config the relay itself applies: ``dump``, ``instrumentation`` and ``logger``.

The ``policy`` section belongs to the resource manager. Which config is active is decided in
``resmgr.config.files`` (files) and by the resource manager (the cached agent config). The schema
has checked every value already (a bad one is refused there, once, naming its field); the relay
takes the typed sections it returned (``resmgr.config.sections``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from resmgr.config.dump_rules import DumpConfig
from resmgr.config.sections import DEFAULT_HTTP_ENDPOINT, ConfigSections


@dataclass(frozen=True)
class RelaySettings:
    """What the relay applies from a config: dumping, metrics endpoint, debug modules, policy name."""

    dump: DumpConfig = field(default_factory=DumpConfig)
    metrics_address: str = DEFAULT_HTTP_ENDPOINT
    debug_modules: list[str] = field(default_factory=list)
    policy: str = "none"


def relay_settings(sections: ConfigSections) -> RelaySettings:
    """The relay's own settings from a checked config's typed sections."""
    return RelaySettings(dump=sections.dump, metrics_address=sections.instrumentation.http_endpoint,
                         debug_modules=list(sections.logger.debug), policy=sections.policy.active)
