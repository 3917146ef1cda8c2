"""What kubelet's CPU manager would give each container, from its state file."""

from __future__ import annotations

import json
from pathlib import Path

from installer.cpuset_restore import KUBELET_CPU_STATE, ONLINE_CPUS, kubelet_cpusets
from installer.host import CommandRunner, Host


def node(tmp_path: Path, state: dict | str | None) -> Host:
    (tmp_path / ONLINE_CPUS.lstrip("/")).parent.mkdir(parents=True)
    (tmp_path / ONLINE_CPUS.lstrip("/")).write_text("0-7\n")
    if state is not None:
        path = tmp_path / KUBELET_CPU_STATE.lstrip("/")
        path.parent.mkdir(parents=True)
        path.write_text(state if isinstance(state, str) else json.dumps(state))
    return Host(tmp_path, CommandRunner())


def test_policy_none_means_all_online_cpus(tmp_path: Path) -> None:
    assert kubelet_cpusets(node(tmp_path, {"policyName": "none", "defaultCpuSet": ""})) == ("0-7", {})


def test_no_state_file_means_all_online_cpus(tmp_path: Path) -> None:
    assert kubelet_cpusets(node(tmp_path, None)) == ("0-7", {})


def test_static_policy_assignments_and_shared_pool(tmp_path: Path) -> None:
    state = {"policyName": "static", "defaultCpuSet": "0,3-7", "entries": {"uid-1": {"app": "1-2"}}}
    assert kubelet_cpusets(node(tmp_path, state)) == ("0,3-7", {("uid-1", "app"): "1-2"})


def test_unreadable_state_falls_back_to_online(tmp_path: Path) -> None:
    assert kubelet_cpusets(node(tmp_path, "{not json")) == ("0-7", {})
