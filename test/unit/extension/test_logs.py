"""The extension logs one JSON object per line with kopf context."""

from __future__ import annotations

import json
import logging

from extension.logs import JsonFormatter, kopf_context


def test_json_log_line_has_context():
    rec = logging.LogRecord("extension.x", logging.INFO, __file__, 1, "hello %s", ("world",), None)
    rec.namespace = "shoot--a--b"
    rec.k8s_ref = {"namespace": "shoot--a--b", "name": "cri-resmgr"}
    out = json.loads(JsonFormatter(kopf_context).format(rec))
    assert out["msg"] == "hello world" and out["level"] == "info" and out["logger"] == "extension.x"
    assert out["namespace"] == "shoot--a--b" and out["name"] == "cri-resmgr" and "ts" in out
