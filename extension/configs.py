"""Merging, validating and splitting cri-resmgr configs.

Base configs come from the operator's ConfigMap, shoot configs from the
providerConfig; per key the shoot wins. Every config is validated with the
same schema code cri-resmgr uses, so a bad one never reaches a node. An unknown
field is no reason to refuse (upstream ignores it): it is a note, like a field
accepted but not applied, and the config goes to the nodes as written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from extension.errors import ConfigurationError
from resmgr.agent.selection import pool_name_problem

STATIC_KEYS = ("fallback", "force", "EXTRA_OPTIONS")
DEFAULT_KEY = "default"
# Node and group names end up in ConfigMap names: cri-resmgr-config.node.<NODE>.
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
# The ConfigMap name prefix plus the suffix must stay a valid object name.
_MAX_SUFFIX = 253 - len("cri-resmgr-config.group.")


@dataclass(frozen=True)
class SplitConfigs:
    """Configs ready for the installation chart.

    ``static`` maps fallback/force/EXTRA_OPTIONS to their text (files on the node).
    ``dynamic`` maps default/node.X/pool.X/group.X to {section: section YAML}, the
    ConfigMap form the agent reads (resmgr.agent.selection).
    """

    static: dict[str, str] = field(default_factory=dict)
    dynamic: dict[str, dict[str, str]] = field(default_factory=dict)
    # Unknown fields, and what is accepted but not applied by this cri-resmgr: one line per config and kind,
    # for the Extension's status (as warnings: they never fail the reconcile).
    notes: list[str] = field(default_factory=list)


def classify(name: str, *, where: str) -> str:
    """Return "static" or "dynamic" for a config name, or raise naming the key."""
    if name in STATIC_KEYS:
        return "static"
    if name == DEFAULT_KEY:
        return "dynamic"
    kind, dot, rest = name.partition(".")
    if dot and kind == "pool":
        # The agent's own rule: a pool config accepted here is one a node of that pool looks for.
        problem = pool_name_problem(rest)
        if problem:
            raise ConfigurationError(where, problem)
        return "dynamic"
    if dot and kind in ("node", "group"):
        if not _NAME.match(rest) or len(rest) > _MAX_SUFFIX:
            raise ConfigurationError(where, f"{kind} name {rest!r} must be a lowercase DNS name "
                                            "(it becomes part of a ConfigMap name)")
        return "dynamic"
    raise ConfigurationError(where, "unknown config name; expected one of fallback, force, EXTRA_OPTIONS, "
                                    "default, node.<NODE>, pool.<POOL>, group.<GROUP>")


def validate_extra_options(text: str, *, where: str) -> str:
    """EXTRA_OPTIONS is a line of cri-resmgr flags: checked with the code the installer uses, so a
    line the node would refuse becomes lastError here instead of a failed rollout. Returns '' or what
    is accepted but ignored (upstream flags this cri-resmgr does not implement)."""
    from resmgr.config.extra_options import ExtraOptionsError, check_extra_options

    try:
        return check_extra_options(text).summary()
    except ExtraOptionsError as err:
        raise ConfigurationError(where, str(err)) from None


def _validate_text(text: str, *, where: str) -> tuple[dict[str, Any], list[str]]:
    """Validate with cri-resmgr's schema; return the config as written (not normalised) and what the nodes
    leave out of it: the unknown fields (a warning) and the fields this cri-resmgr does not apply."""
    from resmgr.config import MAX_CONFIG_BYTES, ConfigError, check_config_text

    size = len(text.encode())
    if size > MAX_CONFIG_BYTES:
        raise ConfigurationError(where, f"is {size} bytes, over the limit of {MAX_CONFIG_BYTES} bytes")
    try:
        checked = check_config_text(text, source=where)
    except ConfigError as err:
        raise _config_error(err, where) from None
    # Keep the user's spelling: the agent and cri-resmgr normalise on their side (and warn there too).
    return yaml.safe_load(text) or {}, [note for note in (checked.warning, checked.info) if note]


def _config_error(err: Exception, where: str) -> ConfigurationError:
    inner = getattr(err, "field", "") or ""
    problem = getattr(err, "problem", None) or str(err)
    if inner and not inner.startswith("<"):
        return ConfigurationError(f"{where}.{inner}", problem)
    return ConfigurationError(where, problem)


def _check_sections(sections: dict[str, str], *, where: str) -> None:
    """The ConfigMap form must validate too: that is what the agent will read."""
    from resmgr.config import ConfigError, check_config_sections

    try:
        check_config_sections(sections, source=where)
    except ConfigError as err:
        raise _config_error(err, where) from None


def sections_of(parsed: dict[str, Any]) -> dict[str, str]:
    """Turn a parsed config into ConfigMap data: one key per top-level section."""
    return {section: yaml.safe_dump(value, sort_keys=False, default_flow_style=False)
            for section, value in parsed.items()}


def validate_and_split(configs: dict[str, str], *, where: str = "configs",
                       origins: dict[str, str] | None = None) -> SplitConfigs:
    """Validate every config and sort them into static and dynamic ones.

    ``origins`` maps a config name to where it came from, so errors name the
    right place (the shoot's providerConfig or the operator's ConfigMap).
    """
    static: dict[str, str] = {}
    dynamic: dict[str, dict[str, str]] = {}
    notes: list[str] = []
    for name in sorted(configs):
        text = configs[name]
        path = f"{(origins or {}).get(name, where)}.{name}"
        if not isinstance(text, str):
            raise ConfigurationError(path, f"must be a string, got {type(text).__name__}")
        kind = classify(name, where=path)
        if name == "EXTRA_OPTIONS":
            note = validate_extra_options(text, where=path)
            if note:
                notes.append(f"{path}: {note.removeprefix('EXTRA_OPTIONS: ')}")
            static[name] = text
            continue
        parsed, left_out = _validate_text(text, where=path)
        notes += [f"{path}: {note}" for note in left_out]
        if kind == "static":
            static[name] = text
        else:
            if not parsed:
                raise ConfigurationError(path, "is empty; a dynamic config needs at least one section")
            if not isinstance(parsed, dict):
                raise ConfigurationError(path, "must be a mapping of config sections")
            sections = sections_of(parsed)
            _check_sections(sections, where=path)
            dynamic[name] = sections
    return SplitConfigs(static=static, dynamic=dynamic, notes=notes)
