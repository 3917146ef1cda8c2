"""Config files the relay reads (fallback/force) and what it takes from them."""

from __future__ import annotations

import pytest

from resmgr.relay.settings import (
    SettingsError,
    available_policies,
    effective_config,
    load_config_file,
    settings_from_config,
)

GOOD = """\
policy:
  Active: none
dump:
  Config: 'off:.*,short:((Create)|(Start)|(Run)|(Update)|(Stop)|(Remove)).*'
  File: /tmp/cri-full-message.dump
instrumentation:
  HTTPEndpoint: 127.0.0.1:9999
logger:
  Debug: relay,dump
"""


def test_good_config(tmp_path):
    path = tmp_path / "fallback.cfg"
    path.write_text(GOOD)
    config, source = effective_config(None, str(path))
    assert source == str(path)
    settings = settings_from_config(config, source)
    assert settings.metrics_address == "127.0.0.1:9999"
    assert settings.debug_modules == ["relay", "dump"]
    assert settings.dump.level_for("CreateContainer") == "short"
    assert settings.dump.file == "/tmp/cri-full-message.dump"
    assert settings.policy == "none"


def test_force_wins_over_fallback(tmp_path):
    (tmp_path / "f.cfg").write_text("dump:\n  Config: 'full:.*'\n")
    (tmp_path / "b.cfg").write_text("dump:\n  Config: 'off:.*'\n")
    config, source = effective_config(str(tmp_path / "f.cfg"), str(tmp_path / "b.cfg"))
    assert source.endswith("f.cfg") and settings_from_config(config).dump.level_for("X") == "full"
    assert effective_config(None, None) == ({}, "defaults")


@pytest.mark.parametrize("text, problem", [
    ("policy: [unclosed", ""),
    ("- a\n- b\n", ""),
    ("dump:\n  Config: 'loud:.*'\n", "dump.Config"),
])
def test_bad_configs_name_the_file(tmp_path, text, problem):
    path = tmp_path / "bad.cfg"
    path.write_text(text)
    with pytest.raises(SettingsError) as err:
        settings_from_config(load_config_file(str(path)), str(path))
    assert str(path) in str(err.value)
    assert problem in str(err.value)


def test_missing_oversized_and_binary_files(tmp_path):
    with pytest.raises(SettingsError, match="cannot read config file"):
        load_config_file(str(tmp_path / "nope.cfg"))
    big = tmp_path / "big.cfg"
    big.write_bytes(b"#" * (1024 * 1024 + 1))
    with pytest.raises(SettingsError, match="byte limit"):
        load_config_file(str(big))
    binary = tmp_path / "bin.cfg"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SettingsError, match="not UTF-8"):
        load_config_file(str(binary))


def test_bad_relay_sections():
    with pytest.raises(SettingsError, match="HTTPEndpoint"):
        settings_from_config({"instrumentation": {"HTTPEndpoint": 8891}})
    with pytest.raises(SettingsError, match="logger.Debug"):
        settings_from_config({"logger": {"Debug": [1, 2]}})


def test_policy_registry_always_offers_none():
    assert "none" in available_policies()
