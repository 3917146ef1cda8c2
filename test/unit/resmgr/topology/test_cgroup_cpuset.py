"""A CPU constraint given as a cgroup resolves as upstream's parseCPUFromCgroup (policy/flags.go) does:
the path itself, then below the cgroup mount, then below the cpuset controller (cgroup v1 and v2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from resmgr.topology.cgroup_cpuset import CgroupCpusetError, read_cgroup_cpuset


def cgroup(path: Path, cpus: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "cpuset.cpus").write_text(cpus + "\n")
    return path


@pytest.fixture
def v1(tmp_path: Path) -> Path:
    """cgroup v1: one hierarchy per controller below /sys/fs/cgroup."""
    mount = tmp_path / "v1" / "sys" / "fs" / "cgroup"
    cgroup(mount / "cpuset" / "kubepods", "2-5")
    cgroup(mount / "cpuset" / "kubepods" / "besteffort", "4-5")
    cgroup(mount / "cpuset", "0-7")
    (mount / "memory").mkdir()
    return tmp_path / "v1"


@pytest.fixture
def v2(tmp_path: Path) -> Path:
    """cgroup v2: one unified tree at /sys/fs/cgroup."""
    mount = tmp_path / "v2" / "sys" / "fs" / "cgroup"
    mount.mkdir(parents=True)
    (mount / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    cgroup(mount / "kubepods.slice", "1-3")
    cgroup(mount / "kubepods.slice" / "kubepods-besteffort.slice", "3")
    return tmp_path / "v2"


def test_cgroup_v1_below_the_cpuset_controller_or_the_mount(v1: Path) -> None:
    assert read_cgroup_cpuset("/kubepods", v1) == {2, 3, 4, 5}  # below /sys/fs/cgroup/cpuset
    assert read_cgroup_cpuset("kubepods/besteffort", v1) == {4, 5}
    assert read_cgroup_cpuset("cpuset/kubepods", v1) == {2, 3, 4, 5}  # below /sys/fs/cgroup
    assert read_cgroup_cpuset("/", v1) == set(range(8))  # the controller's root


def test_cgroup_v2_below_the_mount(v2: Path) -> None:
    assert read_cgroup_cpuset("/kubepods.slice", v2) == {1, 2, 3}
    assert read_cgroup_cpuset("kubepods.slice/kubepods-besteffort.slice", v2) == {3}


def test_absolute_path_first(v1: Path, tmp_path: Path) -> None:
    own = cgroup(tmp_path / "elsewhere" / "kubepods", "6-7")
    assert read_cgroup_cpuset(str(own), v1) == {6, 7}
    assert read_cgroup_cpuset(str(own / "cpuset.cpus"), v1) == {6, 7}  # the file itself


def test_clear_errors(v1: Path, v2: Path) -> None:
    with pytest.raises(CgroupCpusetError, match=r"cgroup '/nope' has no cpuset.cpus \(tried /nope/cpuset.cpus, "
                                                r".*/sys/fs/cgroup/nope/cpuset.cpus, .*/sys/fs/cgroup/cpuset/nope"):
        read_cgroup_cpuset("/nope", v1)
    with pytest.raises(CgroupCpusetError, match="tried .*/sys/fs/cgroup/nope/cpuset.cpus\\)$"):
        read_cgroup_cpuset("nope", v2)  # v2: the mount is the controller, tried once
    bad = v2 / "sys" / "fs" / "cgroup" / "bad"
    cgroup(bad, "1-x")
    with pytest.raises(CgroupCpusetError, match="cpuset.cpus of cgroup '/bad': invalid element"):
        read_cgroup_cpuset("/bad", v2)
    (v2 / "sys" / "fs" / "cgroup" / "dir" / "cpuset.cpus").mkdir(parents=True)
    with pytest.raises(CgroupCpusetError, match="cannot read .*dir/cpuset.cpus for cgroup '/dir'"):
        read_cgroup_cpuset("/dir", v2)
    with pytest.raises(CgroupCpusetError, match="empty cgroup path"):
        read_cgroup_cpuset(" ", v2)
