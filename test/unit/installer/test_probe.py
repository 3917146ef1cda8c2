"""cri-resmgr-installer-probe: the same answers as `cri-resmgr-installer probe`, without importing the installer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from installer import cli, probe
from installer.readiness import write_ready


@pytest.mark.parametrize("state", ["missing", "not ready", "ready", "stale"])
def test_answers_as_the_installers_probe_command(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  state: str) -> None:
    ready = tmp_path / "ready"
    if state != "missing":
        write_ready(ready, state == "ready", "installed" if state == "ready" else "install failed: x", "install")
    max_age = ["--max-age", "0"] if state == "stale" else []
    got = probe.main(["--ready-file", str(ready), *max_age]), capsys.readouterr().out
    old = cli.main(["probe", "--ready-file", str(ready), *(["--probe-max-age", "0"] if max_age else [])])
    assert (got[0], got[1]) == (old, capsys.readouterr().out)
    assert got[0] == (0 if state == "ready" else 1)


def test_imports_only_the_readiness_module() -> None:
    """What makes it cheap every 5 s on every node: none of the installer's heavy imports."""
    code = ("import sys; from installer import probe; "
            "print(sorted(m for m in sys.modules if m.startswith(('installer', 'resmgr', 'grpc'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['installer', 'installer.probe', 'installer.readiness']"
