"""Logging: one JSON object per line (for Loki) or plain text."""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys
from typing import Any

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
# kopf attaches these to its per-object records; they are not JSON-friendly.
_KOPF_PRIVATE = {"k8s_skip", "k8s_ref", "settings"}


def _context(record: logging.LogRecord) -> dict[str, Any]:
    ctx: dict[str, Any] = {}
    ref = getattr(record, "k8s_ref", None)
    if isinstance(ref, dict):
        if ref.get("namespace"):
            ctx["namespace"] = ref["namespace"]
        if ref.get("name"):
            ctx["name"] = ref["name"]
    for key, value in vars(record).items():
        if key in _STANDARD or key in _KOPF_PRIVATE or key.startswith("_"):
            continue
        ctx[key] = value if isinstance(value, (str, int, float, bool)) or value is None else str(value)
    return ctx


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_context(record))
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ctx = " ".join(f"{k}={v}" for k, v in _context(record).items())
        line = f"{self.formatTime(record)} {record.levelname:<7} {record.name}: {record.getMessage()}"
        line = f"{line} [{ctx}]" if ctx else line
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class WaitingIsNotAnError(logging.Filter):
    """kopf logs every retry as an error; a retry we asked for to wait is routine."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "kopf.objects" and "failed temporarily" in str(record.msg) and (
                "waiting for" in str(record.msg)):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def setup(fmt: str = "json", level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(WaitingIsNotAnError())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # The Kubernetes client and aiohttp are chatty at debug level.
    for noisy in ("urllib3", "kubernetes", "aiohttp", "asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.INFO, root.level))
    # kopf reports every handler and timer run at info level; ours log what they did.
    if root.level > logging.DEBUG:
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    logging.captureWarnings(True)
