"""Every console script answers --help with an explanation."""

from __future__ import annotations

import pytest
from unit.venv_scripts import run

SCRIPTS = ["gardener-extension-cri-resmgr", "cri-resmgr", "cri-resmgr-agent", "cri-resmgr-agent-probe",
           "cri-resmgr-installer", "cri-resmgr-installer-probe", "cri-resmgr-webhook",
           "gardener-extension-admission-cri-resmgr"]


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(script):
    r = run(script, "--help")
    assert r.returncode == 0, r.stderr
    assert "usage:" in r.stdout
    # A real explanation, not just the usage line.
    assert len(r.stdout.split()) > 30
