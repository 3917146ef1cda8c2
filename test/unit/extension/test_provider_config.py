"""The example configs and the example shoot validate with the extension's own checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from extension.configs import validate_and_split
from extension.errors import ConfigurationError
from extension.provider_config import check_pool_configs, check_worker_pools, parse_provider_config

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
# Which config key each example file is meant for.
CONFIG_KEYS = {"fallback.yaml": "fallback", "default-topology-aware.yaml": "default", "balloons.yaml": "default",
               "default-static.yaml": "default", "node.worker-1.yaml": "node.worker-1", "group.db.yaml": "group.db",
               "pool.cpu-pinned.yaml": "pool.cpu-pinned"}


@pytest.mark.parametrize("filename", sorted(CONFIG_KEYS))
def test_example_config_validates(filename):
    text = (EXAMPLES / "configs" / filename).read_text()
    split = validate_and_split({CONFIG_KEYS[filename]: text})
    assert split.static or split.dynamic


def test_every_example_config_is_covered():
    assert {p.name for p in (EXAMPLES / "configs").iterdir()} == set(CONFIG_KEYS)


def test_example_shoot_provider_config_validates():
    shoot = yaml.safe_load((EXAMPLES / "shoot.yaml").read_text())
    [ext] = [e for e in shoot["spec"]["extensions"] if e["type"] == "cri-resmgr-extension"]
    pc = parse_provider_config(ext["providerConfig"])
    assert check_worker_pools(pc.worker_pools, [w["name"] for w in shoot["spec"]["provider"]["workers"]]) == []
    assert check_pool_configs(pc.configs, [w["name"] for w in shoot["spec"]["provider"]["workers"]]) == []
    split = validate_and_split(pc.configs)
    assert "group.db" in split.dynamic and "pool.cpu-pinned" in split.dynamic and "fallback" in split.static


def test_a_worker_pool_the_shoot_lacks_is_a_warning_not_an_error():
    assert check_worker_pools(("a",), ["a", "b"]) == []
    [warning] = check_worker_pools(("a", "c"), ["a", "b"])
    assert warning.startswith("providerConfig.workerPools[1]: worker pool 'c' does not exist in the shoot")
    assert len(check_worker_pools(("x", "y"), [])) == 2


def test_a_pool_config_for_a_pool_the_shoot_lacks_is_a_warning_not_an_error():
    configs = {"default": "", "pool.a": "", "pool.c": "", "group.c": ""}
    assert check_pool_configs({"pool.a": ""}, ["a", "b"]) == []
    [warning] = check_pool_configs(configs, ["a", "b"])
    assert warning == ("providerConfig.configs.pool.c: worker pool 'c' does not exist in the shoot (pools: a, b); "
                       "no node gets this config")


def test_webhook_option():
    assert parse_provider_config(None).webhook_enabled is False
    assert parse_provider_config({"webhook": {"enabled": True}}).webhook_enabled is True
    assert parse_provider_config({"webhook": {}}).webhook_enabled is False
    for bad, where in (({"webhook": True}, "providerConfig.webhook"),
                       ({"webhook": {"enabled": "yes"}}, "providerConfig.webhook.enabled"),
                       ({"webhook": {"enable": True}}, "providerConfig.webhook.enable")):
        with pytest.raises(ConfigurationError) as err:
            parse_provider_config(bad)
        assert err.value.field == where, err.value


def test_mode_defaults_to_relay_so_existing_shoots_are_unchanged():
    pc = parse_provider_config(None)
    assert (pc.mode, pc.pool_modes) == ("relay", {})
    assert parse_provider_config({"configs": {}}).mode == "relay"
    pc = parse_provider_config({"mode": "auto", "modes": {"cpu": "nri", "db": "relay"}})
    assert pc.mode == "auto" and pc.mode_of("cpu") == "nri" and pc.mode_of("db") == "relay"
    assert pc.mode_of("other") == "auto" and pc.pools_in_mode("nri") == ("cpu",)


@pytest.mark.parametrize("raw, where, words", [
    ({"mode": "NRI"}, "providerConfig.mode", "must be one of relay, nri, auto, got 'NRI'"),
    ({"mode": True}, "providerConfig.mode", "must be one of"),
    ({"modes": ["nri"]}, "providerConfig.modes", "mapping of worker pool name to mode"),
    ({"modes": {"a": "fast"}}, "providerConfig.modes.a", "must be one of relay, nri, auto, got 'fast'"),
    ({"modes": {"A_": "nri"}}, "providerConfig.modes.A_", "not a valid label value"),
    ({"modes": {"": "nri"}}, "providerConfig.modes", "non-empty strings"),
    ({"workerPools": ["a"], "modes": {"b": "nri"}}, "providerConfig.modes.b", "is not in workerPools (a)"),
    ({"mode": "nri", "moded": {}}, "providerConfig.moded", "unknown field"),
])
def test_modes_are_parsed_strictly_and_errors_name_the_field(raw, where, words):
    with pytest.raises(ConfigurationError) as err:
        parse_provider_config(raw)
    assert err.value.field == where, err.value
    assert words in str(err.value)


def test_a_mode_for_a_pool_the_shoot_lacks_is_a_warning_not_an_error():
    from extension.provider_config import check_pool_modes

    assert check_pool_modes({"a": "nri"}, ["a", "b"]) == []
    [warning] = check_pool_modes({"a": "nri", "gone": "auto"}, ["a", "b"])
    assert warning.startswith("providerConfig.modes.gone: worker pool 'gone' does not exist in the shoot")
