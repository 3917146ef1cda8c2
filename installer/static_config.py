"""Static configuration from the mounted ``cri-resmgr-installer-config`` ConfigMap.

Keys (all optional): ``fallback.cfg`` (-> ``--fallback-config``), ``force.cfg`` (-> ``--force-config``,
which then replaces the fallback), ``EXTRA_OPTIONS`` (more ``cri-resmgr`` flags, written to an
EnvironmentFile). Everything is validated before anything on the node changes:
configs with the same schema code ``cri-resmgr`` uses, EXTRA_OPTIONS against ``cri-resmgr``'s own
argument parser (``resmgr.cli.build_parser``), so there is one list of known flags.
"""

from __future__ import annotations

import argparse
import logging
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from resmgr.config import MAX_CONFIG_BYTES, ConfigError, validate_config_text

log = logging.getLogger("installer.static_config")

FALLBACK_KEY = "fallback.cfg"
FORCE_KEY = "force.cfg"
EXTRA_OPTIONS_KEY = "EXTRA_OPTIONS"
KNOWN_KEYS = (FALLBACK_KEY, FORCE_KEY, EXTRA_OPTIONS_KEY)
MAX_EXTRA_OPTIONS_BYTES = 16 * 1024

# Flags EXTRA_OPTIONS may not set: the installer sets them in the unit, the agent and kubelet rely on
# the socket paths, and uninstall must know where the state and pid file are to remove them.
MANAGED_FLAGS = ("--fallback-config", "--force-config", "--relay-socket", "--runtime-socket", "--image-socket",
                 "--config-socket", "--agent-socket", "--relay-dir", "--pid-file")
# Flags that make cri-resmgr exit or do a one-off job instead of serving.
ONE_SHOT_FLAGS = ("--help", "-h", "--version", "--list-policies", "--reset-policy", "--reset-config")
# What systemd's $VAR expansion splits correctly and needs no quoting in an EnvironmentFile.
_SAFE_TOKEN = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?EXTRA_OPTIONS\s*=(.*)$")


class StaticConfigError(ValueError):
    """The static config is invalid; str() names the key and the problem."""


@dataclass(frozen=True)
class StaticConfig:
    fallback: bytes | None = None
    force: bytes | None = None
    extra_options: list[str] = field(default_factory=list)


def _parser_error(message: str) -> None:
    raise StaticConfigError(message)


def resmgr_parser() -> argparse.ArgumentParser:
    """cri-resmgr's own parser, made to raise instead of printing and exiting."""
    from resmgr.cli import build_parser

    parser = build_parser()
    parser.error = _parser_error  # type: ignore[method-assign]
    return parser


def known_flags(parser: argparse.ArgumentParser | None = None) -> dict[str, argparse.Action]:
    parser = parser or resmgr_parser()
    return {opt: action for action in parser._actions for opt in action.option_strings}


def parse_extra_options(text: str, parser: argparse.ArgumentParser | None = None) -> list[str]:
    """Validate EXTRA_OPTIONS and return its flags as tokens.

    Accepts plain flags (``--log-level=debug --shutdown-grace 10``) or the environment-file
    form ``EXTRA_OPTIONS="..."``. Comment lines (``#``) and blank lines are ignored.
    """
    if len(text.encode()) > MAX_EXTRA_OPTIONS_BYTES:
        raise StaticConfigError(f"{EXTRA_OPTIONS_KEY}: {len(text.encode())} bytes, over the limit of "
                                f"{MAX_EXTRA_OPTIONS_BYTES}")
    parser = parser or resmgr_parser()
    flags = known_flags(parser)
    tokens: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _ENV_LINE.match(line)
        body = m.group(1) if m else line
        try:
            words = shlex.split(body, comments=True)
        except ValueError as exc:
            raise StaticConfigError(f"{EXTRA_OPTIONS_KEY} line {lineno}: cannot split {body.strip()!r}: {exc}") \
                from exc
        tokens.extend(words)
    for tok in tokens:
        if not _SAFE_TOKEN.match(tok):
            raise StaticConfigError(f"{EXTRA_OPTIONS_KEY}: {tok!r} contains characters that cannot be passed "
                                    "through a systemd EnvironmentFile (spaces, quotes, $, backslashes, ...)")
    for tok in tokens:
        if not tok.startswith("-"):
            continue
        name = tok.split("=", 1)[0]
        if name in MANAGED_FLAGS:
            raise StaticConfigError(f"{EXTRA_OPTIONS_KEY}: {name} is fixed by the installer (configs go in the "
                                    f"{FALLBACK_KEY}/{FORCE_KEY} keys; socket and state paths are part of the "
                                    "node contract); remove it")
        if name in ONE_SHOT_FLAGS:
            raise StaticConfigError(f"{EXTRA_OPTIONS_KEY}: {name} would stop cri-resmgr from serving; remove it")
        if name not in flags:
            known = ", ".join(sorted(f for f in flags if f.startswith("--") and f not in MANAGED_FLAGS
                                     and f not in ONE_SHOT_FLAGS))
            raise StaticConfigError(f"{EXTRA_OPTIONS_KEY}: unknown cri-resmgr flag {name!r}; known flags: {known}")
    # Let cri-resmgr's parser check values (types, choices) and stray positional words.
    try:
        parser.parse_args(tokens)
    except StaticConfigError as exc:
        raise StaticConfigError(f"{EXTRA_OPTIONS_KEY}: {exc}") from exc
    except SystemExit as exc:  # argparse paths that exit directly
        raise StaticConfigError(f"{EXTRA_OPTIONS_KEY}: rejected by cri-resmgr's argument parser") from exc
    return tokens


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
        extra = parse_extra_options(text, parser)
    return StaticConfig(fallback=fallback, force=force, extra_options=extra)
