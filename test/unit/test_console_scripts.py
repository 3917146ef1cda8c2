"""Every console script answers --help with an explanation."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = ["gardener-extension-cri-resmgr", "cri-resmgr", "cri-resmgr-agent", "cri-resmgr-agent-probe",
           "cri-resmgr-installer"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(script):
    exe = shutil.which(script, path=str(Path(sys.executable).parent))
    assert exe, f"{script} is not installed in the venv"
    r = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "usage:" in r.stdout
    # A real explanation, not just the usage line.
    assert len(r.stdout.split()) > 30
