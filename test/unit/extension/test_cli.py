"""The command line fails clearly on bad setup, and logs are JSON lines."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from extension.cli import max_unavailable


def run(*args):
    return subprocess.run([sys.executable, "-m", "extension.cli", *args], capture_output=True, text=True,
                          timeout=60)


def test_help_explains():
    r = run("--help")
    assert r.returncode == 0
    for word in ("--ignore-operation-annotation", "--health-interval", "--heartbeat-namespace",
                 "EXTENSION_CONFIGMAP_NAMESPACE", "IMAGEVECTOR_OVERWRITE", "wait-for-state"):
        assert word in r.stdout


def test_missing_chart_dir_is_a_clear_error(tmp_path):
    r = run("--charts-dir", str(tmp_path), "--helm", "/bin/true")
    assert r.returncode == 2 and "holds no Chart.yaml" in r.stderr


def test_missing_helm_is_a_clear_error(tmp_path):
    r = run("--helm", str(tmp_path / "helm"))
    assert r.returncode == 2 and "helm not found" in r.stderr


def test_missing_kubeconfig_is_a_clear_error(tmp_path):
    r = subprocess.run([sys.executable, "-m", "extension.cli", "--helm", "/bin/true",
                        "--kubeconfig", str(tmp_path / "nope")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "cannot load Kubernetes credentials" in r.stderr


def test_bad_interval(tmp_path):
    r = run("--helm", "/bin/true", "--health-interval", "0")
    assert r.returncode == 2 and "--health-interval must be > 0" in r.stderr


@pytest.mark.parametrize("text, want", [("50%", "50%"), ("100%", "100%"), ("1", 1), (" 20 ", 20)])
def test_uninstall_max_unavailable_takes_counts_and_percentages(text, want) -> None:
    assert max_unavailable(text) == want


@pytest.mark.parametrize("text", ["0", "0%", "101%", "-1", "half", "5.5", ""])
def test_uninstall_max_unavailable_refuses_the_rest(text) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="not a node count"):
        max_unavailable(text)
