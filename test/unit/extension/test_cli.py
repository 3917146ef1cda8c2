"""The command line fails clearly on bad setup, and logs are JSON lines."""

from __future__ import annotations

import subprocess
import sys


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
