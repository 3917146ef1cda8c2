"""JSON/text logging with per-module debug."""

from __future__ import annotations

import io
import json
import logging

import pytest

from resmgr.logsetup import parse_debug_modules, setup_logging


@pytest.fixture(autouse=True)
def _restore_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name in ("resmgr.relay", "relay", "resmgr.dump", "dump"):
        logging.getLogger(name).setLevel(logging.NOTSET)


def test_json_lines_with_context():
    out = io.StringIO()
    setup_logging(fmt="json", level="info", stream=out)
    logging.getLogger("resmgr.relay.server").info("hello %s", "x", extra={"method": "Version", "node": "n1"})
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logging.getLogger("resmgr.cli").exception("failed")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["msg"] == "hello x" and first["level"] == "info" and first["logger"] == "resmgr.relay.server"
    assert first["method"] == "Version" and first["node"] == "n1" and first["ts"].endswith("Z")
    assert second["level"] == "error" and "RuntimeError: boom" in second["exc"]


def test_debug_per_module_only():
    out = io.StringIO()
    setup_logging(fmt="text", level="info", debug_modules=parse_debug_modules(["relay", ""]),
                  root_package="resmgr", stream=out)
    logging.getLogger("resmgr.relay.forwarding").debug("relay detail")
    logging.getLogger("resmgr.dump").debug("dump detail")
    text = out.getvalue()
    assert "relay detail" in text and "dump detail" not in text


def test_star_enables_everything_and_bad_values_are_rejected():
    out = io.StringIO()
    setup_logging(fmt="text", level="warning", debug_modules=["*"], stream=out)
    logging.getLogger("anything").debug("deep")
    assert "deep" in out.getvalue()
    with pytest.raises(ValueError, match="log format"):
        setup_logging(fmt="xml")
    with pytest.raises(ValueError, match="log level"):
        setup_logging(level="loud")
    assert parse_debug_modules("a, b,,c") == ["a", "b", "c"]
