"""Run this project's console scripts from the test venv, as an operator would."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def script_path(script: str) -> str:
    exe = shutil.which(script, path=str(BIN))
    assert exe, f"{script} is not installed in the venv"
    return exe


def run(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([script_path(script), *args], capture_output=True, text=True, timeout=60, env=env)
