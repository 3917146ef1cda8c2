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
                        "--kubeconfig", str(tmp_path / "nope"), "--leader-election-namespace", "garden"],
                       capture_output=True, text=True, timeout=60)
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


def test_help_explains_leader_election():
    r = run("--help")
    for word in ("--leader-election", "--no-leader-election", "--leader-election-id",
                 "--leader-election-namespace", "--leader-election-lease-duration",
                 "--leader-election-renew-deadline", "--leader-election-retry-period", "coordination.k8s.io/v1",
                 "deprecated alias of --no-leader-election"):
        assert word in r.stdout, word
    for gone in ("--peering", "--priority"):
        assert gone not in r.stdout


@pytest.mark.parametrize("durations, problem", [
    (("10", "10", "2"), "must be longer than the renew deadline"),
    (("15", "2", "2"), "1.2 x the retry period"),
])
def test_bad_leader_election_durations_are_clear_errors(durations, problem):
    lease, renew, retry = durations
    r = run("--helm", "/bin/true", "--leader-election-namespace", "garden",
            "--leader-election-lease-duration", lease, "--leader-election-renew-deadline", renew,
            "--leader-election-retry-period", retry)
    assert r.returncode == 2 and problem in r.stderr, r.stderr


def test_leader_election_needs_a_namespace_outside_a_cluster(tmp_path):
    r = run("--helm", "/bin/true", "--kubeconfig", str(tmp_path / "nope"))
    assert r.returncode == 2 and "--leader-election-namespace is required" in r.stderr, r.stderr
    # Without leader election (and with its deprecated spelling) no namespace is needed.
    for flag in ("--no-leader-election", "--standalone"):
        r = run("--helm", "/bin/true", "--kubeconfig", str(tmp_path / "nope"), flag)
        assert r.returncode == 2 and "cannot load Kubernetes credentials" in r.stderr, r.stderr


def test_leader_election_namespace_defaults_to_the_pods(monkeypatch):
    from extension import cli

    monkeypatch.setattr(cli, "in_cluster_namespace", lambda: "extension-cri-resmgr")
    args = cli.build_parser().parse_args([])
    assert args.leader_election and cli.leader_election_problem(args) is None
    assert args.leader_election_namespace == "extension-cri-resmgr"
    assert (args.leader_election_lease_duration, args.leader_election_renew_deadline,
            args.leader_election_retry_period) == (15, 10, 2)  # controller-runtime's defaults
    assert args.leader_election_id == "gardener-extension-cri-resmgr-leader-election"
    assert not cli.build_parser().parse_args(["--standalone"]).leader_election
