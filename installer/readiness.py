"""The readiness file the DaemonSet's probe reads (``cri-resmgr-installer probe``).

It holds one JSON object: ready, reason, mode, ts (unix time of the last heartbeat). A file that
has not been refreshed for ``max_age`` seconds counts as not ready: a hung installer is not
supervising anything.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

DEFAULT_MAX_AGE_S = 120.0
DEFAULT_READY_FILE = "/var/run/cri-resmgr-installer/ready"


def write_ready(path: Path, ready: bool, reason: str, mode: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"ready": ready, "reason": reason, "mode": mode, "ts": time.time()}
    fd, tmp = tempfile.mkstemp(prefix=".ready.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f)
    os.replace(tmp, path)


def read_ready(path: Path) -> dict:
    return json.loads(path.read_text())


def probe(path: Path, max_age_s: float = DEFAULT_MAX_AGE_S, now: float | None = None) -> tuple[bool, str]:
    """(ready, one-line reason) for the readiness probe."""
    try:
        doc = read_ready(path)
    except FileNotFoundError:
        return False, f"not ready: {path} does not exist yet (installer starting)"
    except (OSError, ValueError) as exc:
        return False, f"not ready: cannot read {path}: {exc}"
    now = time.time() if now is None else now
    age = now - float(doc.get("ts", 0))
    mode = doc.get("mode", "?")
    reason = str(doc.get("reason", "")).replace("\n", " ")
    if age > max_age_s:
        return False, f"not ready: the installer has not reported for {age:.0f}s (last: {reason})"
    if not doc.get("ready"):
        return False, f"not ready ({mode}): {reason}"
    return True, f"ready ({mode}): {reason}"
