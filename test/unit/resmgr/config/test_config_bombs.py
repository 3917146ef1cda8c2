"""YAML and JSON bombs get a configuration error from the shared validator and the cache, never a
MemoryError, a RecursionError or a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures.config_bombs import BOMBS, alias_bomb, depth_bomb

from resmgr.config import ConfigError, validate_config, validate_config_sections, validate_config_text
from resmgr.manager.cache import Cache


@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_whole_file_form(kind: str) -> None:
    text, message = BOMBS[kind]
    with pytest.raises(ConfigError, match=message):
        validate_config_text(text, source="test")


@pytest.mark.parametrize("kind", sorted(BOMBS))
def test_configmap_form(kind: str) -> None:
    text, message = BOMBS[kind]
    with pytest.raises(ConfigError, match=message):
        validate_config_sections({"rdt": text.split(":", 1)[1]}, source="test")


def test_ordinary_anchors_and_nesting_still_work() -> None:
    text = ("policy: &p\n  Active: topology-aware\nrdt:\n  partitions:\n    a: {l3Allocation: [[1, 2], [3]]}\n"
            "    b: {l3Allocation: *p}\n")
    assert validate_config_text(text)["policy"]["Active"] == "topology-aware"


def test_parsed_values_are_bounded_too() -> None:
    """Configs that arrive parsed (JSON from the API, a cache file) are held to the same bounds."""
    deep: list = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(ConfigError, match="nested deeper than"):
        validate_config({"rdt": {"partitions": {"p": {"l3Allocation": deep}}}})
    shared = ["x"] * 10
    for _ in range(6):
        shared = [shared] * 10  # one list referenced ten times per level, as YAML aliases make
    with pytest.raises(ConfigError, match="more than"):
        validate_config({"rdt": {"partitions": {"p": {"l3Allocation": shared}}}})


def test_cache_with_absurdly_deep_json_is_set_aside(tmp_path: Path) -> None:
    cache = Cache(tmp_path, fsync=False)
    cache.path.parent.mkdir(parents=True, exist_ok=True)
    cache.path.write_text('{"version": 1, "config": ' + "[" * 100_000 + "]" * 100_000 + "}")
    data = cache.load()
    assert data.config is None
    assert cache.path.with_name(cache.path.name + ".corrupt").exists()


def test_helpers_build_what_they_say() -> None:
    assert len(alias_bomb()) < 600 and depth_bomb(3) == "[[[]]]\n"
    assert json.loads(depth_bomb(3)) == [[[]]]
