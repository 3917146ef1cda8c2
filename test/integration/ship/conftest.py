"""Shipping artefacts for the ship tests: the single-file executable, built once per session (cached by source hash)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def executable() -> Path:
    """hacks/build-executable.sh's output; rebuilt only when the sources changed (a build takes ~1.5 min)."""
    out = REPO / "_out" / "bin" / "cri-resmgr"
    r = subprocess.run(["bash", str(REPO / "hacks" / "build-executable.sh"), str(out)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"build-executable.sh failed:\n{r.stdout}\n{r.stderr}"
    assert out.is_file()
    return out
