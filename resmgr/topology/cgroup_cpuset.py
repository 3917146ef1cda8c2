"""The CPUs of a cgroup named as a CPU constraint (``AvailableResources: {cpu: cgroup:<path>}`` or ``/<path>``).

cri-resource-manager (``policy/flags.go``, parseCPUFromCgroup) reads ``cpuset.cpus`` of the first of
these directories that has one:

1. the path itself, if it is absolute;
2. the path below the cgroup mount (``/sys/fs/cgroup``), absolute or not;
3. the path below the cpuset controller: ``/sys/fs/cgroup/cpuset`` on cgroup v1, the mount on v2.

So ``/kubepods.slice`` on cgroup v2 and ``/kubepods`` or ``cpuset/kubepods`` on cgroup v1 all name the
kubepods cgroup. Ours also accepts a path to the ``cpuset.cpus`` file itself (it always did).
"""

from __future__ import annotations

import os
from pathlib import Path

from resmgr.topology.cpuset import CpusetError, parse_cpuset

CGROUP_MOUNT = Path("sys", "fs", "cgroup")  # below the root the node's /sys is found at
CPUSET_CPUS = "cpuset.cpus"


class CgroupCpusetError(ValueError):
    """The cgroup's cpuset.cpus cannot be found, read or parsed."""


def _present(path: Path) -> bool:
    """As upstream: anything but "does not exist" counts (a file we may not read fails when read)."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return True


def candidates(spec: str, root: Path | str = "/") -> list[Path]:
    """The cpuset.cpus files upstream tries for ``spec``, in order; ``root`` is where the node's / is."""
    mount = Path(root) / CGROUP_MOUNT
    rel = spec.lstrip("/")
    # cgroup v2 has one tree: the cpuset controller is the mount itself.
    controller = mount if (mount / "cgroup.controllers").exists() else mount / "cpuset"
    dirs = ([Path(spec)] if spec.startswith("/") else []) + [mount / rel, controller / rel]
    out: list[Path] = []
    for d in dirs:
        path = Path(os.path.normpath(d / CPUSET_CPUS))
        if path not in out:
            out.append(path)
    if Path(spec).name == CPUSET_CPUS and spec.startswith("/"):
        out.insert(0, Path(spec))
    return out


def read_cgroup_cpuset(spec: str, root: Path | str = "/") -> frozenset[int]:
    """The CPUs in ``cpuset.cpus`` of the cgroup ``spec`` names; raises CgroupCpusetError saying why not."""
    spec = spec.strip()
    if not spec:
        raise CgroupCpusetError("empty cgroup path")
    tried = candidates(spec, root)
    path = next((p for p in tried if _present(p)), None)
    if path is None:
        raise CgroupCpusetError(f"cgroup {spec!r} has no {CPUSET_CPUS} (tried {', '.join(map(str, tried))})")
    try:
        text = path.read_text()
    except OSError as exc:
        raise CgroupCpusetError(f"cannot read {path} for cgroup {spec!r}: {exc.strerror or exc}") from None
    try:
        return parse_cpuset(text)
    except CpusetError as exc:
        raise CgroupCpusetError(f"{path} of cgroup {spec!r}: {exc}") from None
