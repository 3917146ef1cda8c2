"""Where a container's cgroup is on the host, and which processes are in it.

The controllers that act outside the CRI (block I/O, RDT) need the container's cgroup
directory. Like cri-resource-manager, it is found from the pod's cgroup parent and the
container id, trying the names runtimes give it (containerd/CRI-O, cgroupfs or systemd
driver). Both cgroup v1 (one hierarchy per controller) and v2 (one unified tree) are handled.
"""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


class CgroupError(RuntimeError):
    """The container's cgroup cannot be found or read."""


def is_unified(cgroup_root: Path) -> bool:
    """True on cgroup v2 (the root itself is the unified tree)."""
    return (cgroup_root / "cgroup.controllers").exists()


def controller_root(cgroup_root: Path, controller: str) -> Path:
    """The hierarchy a cgroup v1 controller is mounted at (v2: the unified root)."""
    return cgroup_root if is_unified(cgroup_root) else cgroup_root / controller


def parent_dir(cgroup_parent: str) -> str:
    """A pod's cgroup parent as a directory below the hierarchy root.

    The cgroupfs driver gives a path (``/kubepods/burstable/pod<uid>``); the systemd driver gives
    a slice name (``kubepods-burstable-pod<uid>.slice``) whose directory nests every prefix slice.
    """
    parent = cgroup_parent.strip()
    if not parent.endswith(".slice") or "/" in parent:
        return parent.strip("/")
    parts = parent.removesuffix(".slice").split("-")
    return "/".join("-".join(parts[:i + 1]) + ".slice" for i in range(len(parts)))


def _candidates(container_id: str) -> tuple[str, ...]:
    return (container_id, f"cri-containerd-{container_id}.scope", f"cri-containerd-{container_id}",
            f"crio-{container_id}.scope", f"crio-{container_id}")


def find_container_dir(hierarchy: Path, cgroup_parent: str, container_id: str) -> Path:
    """The container's cgroup directory in ``hierarchy``; CgroupError if it is not there.

    Without a known pod cgroup parent (a pod adopted from the runtime's listing) the kubepods
    tree is searched, at most three levels deep, for a directory named after the container.
    """
    if not container_id:
        raise CgroupError("the container has no id yet")
    names = _candidates(container_id)
    if cgroup_parent:
        base = hierarchy / parent_dir(cgroup_parent)
        for name in names:
            if (base / name).is_dir():
                return base / name
        raise CgroupError(f"no cgroup of container {container_id} under {base}")
    for pattern in ("kubepods*/*/", "kubepods*/*/*/", "kubepods*/"):
        for pod_dir in hierarchy.glob(pattern):
            for name in names:
                if (pod_dir / name).is_dir():
                    return pod_dir / name
    raise CgroupError(f"no cgroup of container {container_id} found below {hierarchy}/kubepods*")


def container_pids(cgroup_dir: Path) -> list[int]:
    """The process ids in a cgroup (``cgroup.procs``), as upstream hands them to resctrl."""
    try:
        text = (cgroup_dir / "cgroup.procs").read_text()
    except OSError as exc:
        raise CgroupError(f"cannot read {cgroup_dir / 'cgroup.procs'}: {exc.strerror or exc}") from None
    return [int(line) for line in text.split() if line.strip().isdigit()]
