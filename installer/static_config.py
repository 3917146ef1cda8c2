"""Static configuration from the mounted ``cri-resmgr-installer-config`` ConfigMap.

Keys (all optional): ``fallback.cfg`` (-> ``--fallback-config``), ``force.cfg`` (-> ``--force-config``,
which then replaces the fallback), ``EXTRA_OPTIONS`` (more ``cri-resmgr`` flags, written to an
EnvironmentFile). Everything is validated before anything on the node changes:
configs with the same schema code ``cri-resmgr`` uses, EXTRA_OPTIONS against ``cri-resmgr``'s own
flag table (``resmgr.config.extra_options``), so there is one list of known flags.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, field
from pathlib import Path

from resmgr.config import MAX_CONFIG_BYTES, ConfigError, validate_config_text
from resmgr.config.extra_options import (
    EXTRA_OPTIONS_KEY,
    MAX_EXTRA_OPTIONS_BYTES,
    ExtraOptionsError,
    parse_extra_options,
)

log = logging.getLogger("installer.static_config")

FALLBACK_KEY = "fallback.cfg"
FORCE_KEY = "force.cfg"
KNOWN_KEYS = (FALLBACK_KEY, FORCE_KEY, EXTRA_OPTIONS_KEY)

class StaticConfigError(ValueError):
    """The static config is invalid; str() names the key and the problem."""


@dataclass(frozen=True)
class StaticConfig:
    fallback: bytes | None = None
    force: bytes | None = None
    extra_options: list[str] = field(default_factory=list)


def _validate_config(key: str, data: bytes) -> bytes | None:
    if len(data) > MAX_CONFIG_BYTES:
        raise StaticConfigError(f"{key}: {len(data)} bytes, over the limit of {MAX_CONFIG_BYTES}")
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise StaticConfigError(f"{key}: not UTF-8 text ({exc})") from exc
    if not text.strip():
        log.info("%s is empty; treating it as absent", key, extra={"key": key})
        return None
    try:
        validate_config_text(text, source=key)
    except ConfigError as exc:
        raise StaticConfigError(f"{key}: {exc}") from exc
    return data


def read_config_dir(config_dir: Path, parser: argparse.ArgumentParser | None = None) -> StaticConfig:
    """Read and validate the mounted ConfigMap. A missing directory means no static config."""
    if not config_dir.exists():
        log.info("static config directory %s does not exist; no fallback/force config, no extra options",
                 config_dir, extra={"path": str(config_dir)})
        return StaticConfig()
    if not config_dir.is_dir():
        raise StaticConfigError(f"static config path {config_dir} is not a directory")
    # ConfigMap volumes hold ..data and ..<timestamp> entries next to the key symlinks.
    present = {p.name for p in config_dir.iterdir() if not p.name.startswith("..")}
    unknown = sorted(present - set(KNOWN_KEYS))
    if unknown:
        raise StaticConfigError(f"unknown key(s) {', '.join(unknown)} in the static config; "
                                f"expected only {', '.join(KNOWN_KEYS)}")
    values: dict[str, bytes] = {}
    for key in present:
        path = config_dir / key
        if not path.is_file():
            raise StaticConfigError(f"{key}: {path} is not a regular file")
        if path.stat().st_size > max(MAX_CONFIG_BYTES, MAX_EXTRA_OPTIONS_BYTES):
            raise StaticConfigError(f"{key}: {path.stat().st_size} bytes, over the limit")
        values[key] = path.read_bytes()
    fallback = _validate_config(FALLBACK_KEY, values[FALLBACK_KEY]) if FALLBACK_KEY in values else None
    force = _validate_config(FORCE_KEY, values[FORCE_KEY]) if FORCE_KEY in values else None
    if fallback is not None and force is not None:
        log.warning("both %s and %s are set: %s wins and the fallback config is not installed",
                    FALLBACK_KEY, FORCE_KEY, FORCE_KEY)
        fallback = None
    extra: list[str] = []
    if EXTRA_OPTIONS_KEY in values:
        try:
            text = values[EXTRA_OPTIONS_KEY].decode()
        except UnicodeDecodeError as exc:
            raise StaticConfigError(f"{EXTRA_OPTIONS_KEY}: not UTF-8 text ({exc})") from exc
        try:
            extra = parse_extra_options(text, parser)
        except ExtraOptionsError as exc:
            raise StaticConfigError(str(exc)) from exc
    return StaticConfig(fallback=fallback, force=force, extra_options=extra)
