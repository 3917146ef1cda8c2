"""Logging setup shared by every program: JSON or text lines on stderr, debug per module.

Every program calls ``setup_logging`` once from its command line. JSON lines carry
``ts``, ``level``, ``logger`` and ``msg`` plus any ``extra=`` context (namespace,
node, method, ...), so log collectors can index them. Debug output can be enabled
for single modules (``--debug relay,dump``) without flooding the rest.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable, Iterable
from typing import IO

from resmgr.options import LOG_FORMATS, LOG_LEVELS

# LogRecord attributes that are not caller-supplied context.
_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def record_context(record: logging.LogRecord) -> dict[str, object]:
    """The caller-supplied ``extra=`` keys of a record."""
    return {k: v for k, v in vars(record).items() if k not in _RESERVED and not k.startswith("_")}


ContextFn = Callable[[logging.LogRecord], dict[str, object]]


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, context, and the exception if any."""

    def __init__(self, context: ContextFn = record_context) -> None:
        super().__init__()
        self.context = context

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in self.context(record).items():
            entry.setdefault(key, value)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """Human-readable lines; context keys are appended as key=value."""

    def __init__(self, context: ContextFn = record_context) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
        self.context = context

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ctx = self.context(record)
        if ctx:
            line += " " + " ".join(f"{k}={v}" for k, v in ctx.items())
        return line


def parse_debug_modules(value: str | Iterable[str] | None) -> list[str]:
    """Split ``"relay,dump"`` (or a list of such strings) into module names; ``*``/``all`` means all."""
    if value is None:
        return []
    items = [value] if isinstance(value, str) else list(value)
    modules: list[str] = []
    for item in items:
        modules.extend(part.strip() for part in item.split(",") if part.strip())
    return modules


def setup_logging(
    *,
    fmt: str = "text",
    level: str = "info",
    debug_modules: Iterable[str] = (),
    root_package: str = "",
    stream: IO[str] | None = None,
    context: ContextFn = record_context,
) -> logging.Handler:
    """Configure the root logger.

    ``debug_modules`` names loggers that log at debug level regardless of ``level``;
    a bare name like ``relay`` is looked up under ``root_package`` (``resmgr.relay``)
    as well as on its own. ``*`` or ``all`` turns on debug everywhere.
    """
    if fmt not in LOG_FORMATS:
        raise ValueError(f"unknown log format {fmt!r}; use one of {', '.join(LOG_FORMATS)}")
    if level.lower() not in LOG_LEVELS:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(LOG_LEVELS)}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(context) if fmt == "json" else TextFormatter(context))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    set_debug_modules(debug_modules, root_package=root_package, base_level=level)
    return handler


_debug_enabled: list[str] = []


def set_debug_modules(modules: Iterable[str], *, root_package: str = "",
                      base_level: str | None = None) -> None:
    """(Re)apply per-module debug; modules no longer listed drop back to the default level."""
    for name in _debug_enabled:
        logging.getLogger(name).setLevel(logging.NOTSET)
    _debug_enabled.clear()
    for module in modules:
        if module in ("*", "all"):
            logging.getLogger().setLevel(logging.DEBUG)
            continue
        names = [module]
        if root_package and not module.startswith(root_package + "."):
            names.append(f"{root_package}.{module}")
        for name in names:
            logging.getLogger(name).setLevel(logging.DEBUG)
            _debug_enabled.append(name)
    if base_level is not None and not any(m in ("*", "all") for m in modules):
        logging.getLogger().setLevel(base_level.upper())


def setup_logging_from_args(args: argparse.Namespace, *, root_package: str = "") -> None:
    """Apply the flags added by ``add_logging_arguments``."""
    setup_logging(fmt=args.log_format, level=args.log_level,
                  debug_modules=parse_debug_modules(args.debug), root_package=root_package)
