"""The single-file executable runs on a node that has no Python at all."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

INSIDE = "/opt/cri-resmgr/bin"


def test_runs_on_node_without_python(executable: Path, systemd_node_factory) -> None:
    node = systemd_node_factory(ro_binds=[(str(executable.parent), INSIDE)])
    # The node's root is an overlay: removing python3 here leaves the cached rootfs alone.
    assert node.run("command -v python3", check=False).returncode == 0, "the node rootfs should start with python3"
    node.run("rm -f /usr/bin/python3* /usr/local/bin/python3*")
    assert node.run("command -v python3 || ls /usr/bin/python*", check=False).returncode != 0

    exe = f"{INSIDE}/{executable.name}"
    version = node.run([exe, "--version"])
    assert version.stdout.strip().startswith("cri-resmgr "), version
    policies = node.run([exe, "--list-policies"]).stdout.split()
    assert {"topology-aware", "balloons", "static"} <= set(policies), policies

    # The same file runs the other commands under their own names...
    node.run(["ln", "-sf", exe, "/usr/local/bin/cri-resmgr-installer"])
    installer = node.run(["cri-resmgr-installer", "--help"])
    assert "usage: cri-resmgr-installer" in installer.stdout and "--host-root" in installer.stdout
    # ...or by its first argument.
    probe = node.run([exe, "cri-resmgr-agent-probe", "--help"])
    assert "usage: cri-resmgr-agent-probe" in probe.stdout
    unknown = node.run([exe, "no-such-command"], check=False)
    assert unknown.returncode != 0
    # A bad option still gets argparse's clear error, not a traceback.
    bad = node.run([exe, "--no-such-option"], check=False)
    assert bad.returncode == 2 and "unrecognized arguments" in bad.stderr and "Traceback" not in bad.stderr
