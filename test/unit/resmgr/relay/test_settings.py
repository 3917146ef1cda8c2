"""The sections of the active config the relay applies itself (dump, instrumentation, logger)."""

from __future__ import annotations

from resmgr.config import check_config_text
from resmgr.config.sections import DEFAULT_HTTP_ENDPOINT, ConfigSections
from resmgr.relay.settings import relay_settings


def test_settings_from_the_typed_sections():
    sections = check_config_text("policy:\n  Active: static\ninstrumentation:\n  HTTPEndpoint: 127.0.0.1:9999\n"
                                 "logger:\n  Debug: relay, dump\ndump:\n  Config: 'full:Create.*'\n").sections
    settings = relay_settings(sections)
    assert settings.metrics_address == "127.0.0.1:9999"
    assert settings.debug_modules == ["relay", "dump"]
    assert settings.dump is sections.dump and settings.dump.level_for("CreateContainer") == "full"
    assert settings.policy == "static"


def test_defaults():
    settings = relay_settings(ConfigSections())
    assert (settings.metrics_address, settings.debug_modules, settings.policy) == (DEFAULT_HTTP_ENDPOINT, [], "none")
