"""EXTRA_OPTIONS: extra cri-resmgr flags from the static config, checked against cri-resmgr's own flag table.

The installer writes them into the unit's EnvironmentFile; the extension checks them before anything
reaches a node. Both use ``parse_extra_options``, which knows the flags from ``resmgr.options`` (argparse
only), so a line one accepts the other accepts too.
"""

from __future__ import annotations

import argparse
import re
import shlex

from resmgr.options import build_parser

EXTRA_OPTIONS_KEY = "EXTRA_OPTIONS"
# Flags EXTRA_OPTIONS may not set: the installer sets them in the unit, the agent and kubelet rely on
# the socket paths, and uninstall must know where the state and pid file are to remove them.
MANAGED_FLAGS = ("--fallback-config", "--force-config", "--relay-socket", "--runtime-socket", "--image-socket",
                 "--config-socket", "--agent-socket", "--relay-dir", "--pid-file")
# Flags that make cri-resmgr exit or do a one-off job instead of serving.
ONE_SHOT_FLAGS = ("--help", "-h", "--version", "--list-policies", "--reset-policy", "--reset-config")
MAX_EXTRA_OPTIONS_BYTES = 16 * 1024
# What systemd's $VAR expansion splits correctly and needs no quoting in an EnvironmentFile.
_SAFE_TOKEN = re.compile(r"^[A-Za-z0-9_@%+=:,./-]+$")
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?EXTRA_OPTIONS\s*=(.*)$")


class ExtraOptionsError(ValueError):
    """EXTRA_OPTIONS is invalid; str() names the key and the problem."""


def _parser_error(message: str) -> None:
    raise ExtraOptionsError(message)


def resmgr_parser() -> argparse.ArgumentParser:
    """cri-resmgr's own parser, made to raise instead of printing and exiting."""
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
        raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY}: {len(text.encode())} bytes, over the limit of "
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
            raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY} line {lineno}: cannot split {body.strip()!r}: {exc}") \
                from exc
        tokens.extend(words)
    for tok in tokens:
        if not _SAFE_TOKEN.match(tok):
            raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY}: {tok!r} contains characters that cannot be passed "
                                    "through a systemd EnvironmentFile (spaces, quotes, $, backslashes, ...)")
    for tok in tokens:
        if not tok.startswith("-"):
            continue
        name = tok.split("=", 1)[0]
        if name in MANAGED_FLAGS:
            raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY}: {name} is fixed by the installer (configs go in the "
                                    "fallback.cfg/force.cfg keys; socket and state paths are part of the "
                                    "node contract); remove it")
        if name in ONE_SHOT_FLAGS:
            raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY}: {name} would stop cri-resmgr from serving; remove it")
        if name not in flags:
            known = ", ".join(sorted(f for f in flags if f.startswith("--") and f not in MANAGED_FLAGS
                                     and f not in ONE_SHOT_FLAGS))
            raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY}: unknown cri-resmgr flag {name!r}; known flags: {known}")
    # Let cri-resmgr's parser check values (types, choices) and stray positional words.
    try:
        parser.parse_args(tokens)
    except ExtraOptionsError as exc:
        raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY}: {exc}") from exc
    except SystemExit as exc:  # argparse paths that exit directly
        raise ExtraOptionsError(f"{EXTRA_OPTIONS_KEY}: rejected by cri-resmgr's argument parser") from exc
    return tokens
