"""The landscape's teardown removes a node's cgroups even when processes outlived its machine
(its nspawn was killed before its systemd finished powering off)."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import pytest

from devland.node import leftover_cgroups, own_cgroup_name, remove_cgroups, shut_down

HIERARCHIES = [h for h in (Path("/sys/fs/cgroup/systemd"), Path("/sys/fs/cgroup/unified")) if h.is_dir()]


@pytest.fixture
def cgroup_root():
    if os.geteuid() != 0 or not HIERARCHIES:
        pytest.fail("needs root and a cgroup v1 name=systemd or unified hierarchy", pytrace=False)
    root = f"/crl-cleanup-{secrets.token_hex(3)}-1"
    yield root
    for h in HIERARCHIES:  # only if the test failed: deepest first
        for top in (h / root.strip("/"), h / own_cgroup_name(root)):
            for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                d.rmdir()
            if top.is_dir():
                top.rmdir()


def test_processes_left_in_a_node_cgroup_are_killed_and_the_cgroups_removed(cgroup_root):
    h = HIERARCHIES[0]
    service = h / own_cgroup_name(cgroup_root) / "payload" / "system.slice" / "stuck.service"
    service.mkdir(parents=True)
    (h / cgroup_root.strip("/") / "kubepods").mkdir(parents=True)
    stuck = subprocess.Popen(["sleep", "1000"])
    try:
        (service / "cgroup.procs").write_text(str(stuck.pid))
        lines: list[str] = []
        assert remove_cgroups(cgroup_root, log=lines.append) == []
        assert stuck.wait(10) == -9
        assert lines == [f"killing what outlived the machine: {stuck.pid} sleep"]
        assert leftover_cgroups(cgroup_root.strip("/").rsplit("-", 1)[0]) == []
    finally:
        stuck.kill()
        stuck.wait()


def test_empty_node_cgroups_are_removed_without_a_word(cgroup_root):
    for h in HIERARCHIES:
        (h / own_cgroup_name(cgroup_root) / "payload" / "init.scope").mkdir(parents=True)
    lines: list[str] = []
    assert remove_cgroups(cgroup_root, log=lines.append) == []
    assert lines == []
    assert not any((h / own_cgroup_name(cgroup_root)).exists() for h in HIERARCHIES)


def test_a_machine_that_is_off_needs_no_shutdown():
    assert shut_down(0, lambda: True) == ""
    assert shut_down(12345, lambda: False) == ""
