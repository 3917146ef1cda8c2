"""Config files given on the command line (fallback/force), read once, and the precedence between sources."""

from __future__ import annotations

from pathlib import Path

import pytest
from fixtures.relay_sections import RELAY_SECTIONS

from resmgr.config import MAX_CONFIG_BYTES, ConfigError
from resmgr.config.files import StartupConfigs, choose_config, read_config_file
from resmgr.relay.settings import relay_settings

GOOD = """\
policy:
  Active: none
""" + RELAY_SECTIONS


def test_good_config(tmp_path):
    path = tmp_path / "fallback.cfg"
    path.write_text(GOOD)
    files = StartupConfigs.load(None, str(path))
    config, source = choose_config(force=files.force_config, fallback=files.fallback_config)
    assert files.describe(source) == str(path)
    assert config is files.fallback.sections.raw
    settings = relay_settings(files.fallback.sections)
    assert settings.metrics_address == "127.0.0.1:9999"
    assert settings.debug_modules == ["relay", "dump"]
    assert settings.dump.level_for("CreateContainer") == "short"
    assert settings.dump.file == "/tmp/cri-full-message.dump"
    assert settings.policy == "none"


def test_force_wins_over_fallback(tmp_path):
    (tmp_path / "f.cfg").write_text("dump:\n  Config: 'full:.*'\n")
    (tmp_path / "b.cfg").write_text("dump:\n  Config: 'off:.*'\n")
    files = StartupConfigs.load(str(tmp_path / "f.cfg"), str(tmp_path / "b.cfg"))
    config, source = choose_config(force=files.force_config, fallback=files.fallback_config)
    assert files.describe(source).endswith("f.cfg") and config is files.force.config
    assert relay_settings(files.force.sections).dump.level_for("X") == "full"
    assert choose_config() == ({}, "defaults")


def test_precedence_force_cache_fallback_defaults():
    force, cached, fallback = {"a": 1}, {"b": 2}, {"c": 3}
    assert choose_config(force=force, cached=cached, cached_source="agent", fallback=fallback) == \
        (force, "force-config")
    assert choose_config(cached=cached, cached_source="agent", fallback=fallback) == (cached, "agent")
    assert choose_config(cached=cached, fallback=fallback) == (cached, "cache")
    assert choose_config(fallback=fallback) == (fallback, "fallback-config")


@pytest.mark.parametrize("text, problem", [
    ("policy: [unclosed", ""),
    ("- a\n- b\n", ""),
    ("dump:\n  Config: 'loud:.*'\n", "dump.Config"),  # the relay's own section: refused by the schema too
])
def test_bad_configs_name_the_file(tmp_path, text, problem):
    path = tmp_path / "bad.cfg"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        read_config_file(str(path))
    assert str(path) in str(err.value)
    assert problem in str(err.value)


def test_missing_oversized_and_binary_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        read_config_file(str(tmp_path / "nope.cfg"))
    big = tmp_path / "big.cfg"
    big.write_bytes(b"#" * (1024 * 1024 + 1))
    with pytest.raises(ConfigError, match="over the limit of 1048576 bytes"):
        read_config_file(str(big))
    binary = tmp_path / "bin.cfg"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_config_file(str(binary))


def test_config_files_too_big_or_binary(tmp_path: Path) -> None:
    big = tmp_path / "big.cfg"
    big.write_text("logger:\n  Debug: " + "x" * (MAX_CONFIG_BYTES + 10) + "\n")
    with pytest.raises(ConfigError, match="over the limit"):
        read_config_file(big)
    binary = tmp_path / "bin.cfg"
    binary.write_bytes(b"\xff\xfe\x00policy")
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_config_file(binary)


def test_digest_is_of_the_bytes_read(tmp_path: Path) -> None:
    import hashlib

    path = tmp_path / "f.cfg"
    path.write_bytes(GOOD.encode())
    assert read_config_file(path).digest == hashlib.sha256(GOOD.encode()).hexdigest()


def test_startup_files_with_an_unknown_field_load_without_it_and_log_a_warning(tmp_path, caplog):
    """cri-resmgr's startup (the relay reads both files through load_startup_files): a typo is no problem
    that drops the file; the file's config is used without the key, and the log says which key and file."""
    import logging

    from resmgr.relay.startup import load_startup_files

    (tmp_path / "force.cfg").write_text("policy:\n  Active: static\n  Activ: none\n")
    (tmp_path / "fallback.cfg").write_text("logger:\n  Debug: relay\n  Debugs: dump\n")
    with caplog.at_level(logging.WARNING, logger="resmgr.config"):
        files, problems = load_startup_files(str(tmp_path / "force.cfg"), str(tmp_path / "fallback.cfg"))
    assert problems == []
    assert files.force_config == {"policy": {"Active": "static"}}
    assert files.fallback_config == {"logger": {"Debug": ["relay"]}}
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"config from {tmp_path / 'force.cfg'}: unknown field, left out of the config: "
                    "policy.Activ (did you mean 'Active'?)"),
        ("WARNING", f"config from {tmp_path / 'fallback.cfg'}: unknown field, left out of the config: "
                    "logger.Debugs (did you mean 'Debug'?)"),
    ]
