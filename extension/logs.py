"""Logging for the operator: resmgr's JSON/text lines (one object per line, for Loki) plus kopf's context."""

from __future__ import annotations

import logging
from typing import Any

from resmgr.logsetup import JsonFormatter, TextFormatter, record_context, setup_logging

__all__ = ["JsonFormatter", "TextFormatter", "WaitingIsNotAnError", "kopf_context", "setup"]

# kopf attaches these to its per-object records; they are not JSON-friendly.
_KOPF_PRIVATE = {"k8s_skip", "k8s_ref", "settings"}


def kopf_context(record: logging.LogRecord) -> dict[str, Any]:
    """The record's extra keys plus the namespace and name of the object kopf is handling."""
    ctx: dict[str, Any] = {}
    ref = getattr(record, "k8s_ref", None)
    if isinstance(ref, dict):
        if ref.get("namespace"):
            ctx["namespace"] = ref["namespace"]
        if ref.get("name"):
            ctx["name"] = ref["name"]
    for key, value in record_context(record).items():
        if key in _KOPF_PRIVATE:
            continue
        ctx[key] = value if isinstance(value, (str, int, float, bool)) or value is None else str(value)
    return ctx


class WaitingIsNotAnError(logging.Filter):
    """kopf logs every retry as an error; a retry we asked for to wait is routine."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "kopf.objects" and "failed temporarily" in str(record.msg) and (
                "waiting for" in str(record.msg)):
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def setup(fmt: str = "json", level: str = "info") -> None:
    handler = setup_logging(fmt=fmt, level=level, context=kopf_context)
    handler.addFilter(WaitingIsNotAnError())
    root = logging.getLogger()
    # The Kubernetes client and aiohttp are chatty at debug level.
    for noisy in ("urllib3", "kubernetes", "aiohttp", "asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.INFO, root.level))
    # kopf reports every handler and timer run at info level; ours log what they did.
    if root.level > logging.DEBUG:
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    logging.captureWarnings(True)
