"""The helm CLI and the other tools run."""

from __future__ import annotations

import subprocess


def test_helm_version(tools):
    out = subprocess.run([tools.helm, "version", "--short"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("v3.")


def test_crictl_and_critest_run(tools):
    assert "crictl version" in subprocess.run([tools.crictl, "--version"], capture_output=True, text=True,
                                              check=True).stdout
    r = subprocess.run([tools.critest, "--help"], capture_output=True, text=True)
    assert "ginkgo" in (r.stdout + r.stderr).lower()
