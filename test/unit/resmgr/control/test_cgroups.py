"""Finding a container's cgroup like upstream: cgroupfs and systemd naming, unknown parents, pids."""

from __future__ import annotations

from pathlib import Path

import pytest

from resmgr.control.cgroups import CgroupError, container_pids, find_container_dir, parent_dir


def test_parent_dir_of_both_drivers() -> None:
    assert parent_dir("/kubepods/burstable/pod1") == "kubepods/burstable/pod1"
    assert parent_dir("kubepods-burstable-pod1.slice") == \
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice"


@pytest.mark.parametrize(("parent", "name"), [
    ("/kubepods/besteffort/pod1", "abc"),
    ("kubepods-besteffort-pod1.slice", "cri-containerd-abc.scope"),
])
def test_container_dirs_are_found(tmp_path: Path, parent: str, name: str) -> None:
    d = tmp_path / parent_dir(parent) / name
    d.mkdir(parents=True)
    (d / "cgroup.procs").write_text("7\n9\n")
    assert find_container_dir(tmp_path, parent, "abc") == d
    assert find_container_dir(tmp_path, "", "abc") == d  # adopted pod, parent unknown: searched
    assert container_pids(d) == [7, 9]
    with pytest.raises(CgroupError, match="no cgroup of container other"):
        find_container_dir(tmp_path, parent, "other")
