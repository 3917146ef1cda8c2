"""The sections of the active config the relay applies itself (dump, instrumentation, logger)."""

from __future__ import annotations

import pytest

from resmgr.relay.settings import (
    SettingsError,
    settings_from_config,
)


def test_bad_relay_sections():
    with pytest.raises(SettingsError, match="HTTPEndpoint"):
        settings_from_config({"instrumentation": {"HTTPEndpoint": 8891}})
    with pytest.raises(SettingsError, match="logger.Debug"):
        settings_from_config({"logger": {"Debug": [1, 2]}})
