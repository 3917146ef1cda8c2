"""Block I/O classes on real containerd: the relay's resource manager writes the class's throttles
(and BFQ weight) into the container's real blkio cgroup after StartContainer.

containerd on these nodes runs cgroup v1 (``/sys/fs/cgroup/blkio/<parent>/<id>``). RDT and CPU
classes cannot be shown here: the machine has no resctrl and no cpufreq, so those controllers are
tested on fake trees only (test/unit/resmgr/control); their modes switch them off here (Relaxed).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from devland.waiting import eventually
from resmgr.control.cgroups import CGROUP_ROOT

pytestmark = pytest.mark.integration


def whole_disk() -> tuple[str, str]:
    """A whole-disk block device of this machine (name, "MAJ:MIN"): the kernel accepts throttles only for those."""
    for d in sorted(Path("/sys/block").iterdir()):
        if (d / "dev").exists() and Path(f"/dev/{d.name}").exists():
            return d.name, (d / "dev").read_text().strip()
    pytest.fail("no block device in /sys/block to throttle")


def blkio_table(node, cid: str, name: str) -> dict[str, str]:
    path = CGROUP_ROOT / "blkio" / node.containerd.container_cgroup(cid).lstrip("/") / name
    return dict(line.split(None, 1) for line in path.read_text().splitlines() if line.strip())


def test_blockio_class_throttles_the_real_cgroup(node_factory) -> None:
    disk, dev = whole_disk()
    # BFQ's weight file exists when the bfq scheduler is available; only then can a weight be shown.
    weight = (CGROUP_ROOT / "blkio" / "kubepods" / "blkio.bfq.weight").exists()
    config = ("policy:\n  Active: none\nblockio:\n  Classes:\n"
              f"    slowread:\n      - Devices: [/dev/{disk}]\n        ThrottleReadBps: 1Mi\n"
              f"        ThrottleWriteIOPS: 50\n" + ("      - Weight: 200\n" if weight else "") +
              f"    other:\n      - Devices: [/dev/{disk}]\n        ThrottleWriteBps: 2M\n")
    node = node_factory(config)
    cid = node.run("io", "burstable",
                   annotations={"blockioclass.cri-resource-manager.intel.com/pod": "slowread"})
    assert eventually(lambda: blkio_table(node, cid, "blkio.throttle.read_bps_device") == {dev: "1048576"})
    assert blkio_table(node, cid, "blkio.throttle.write_iops_device") == {dev: "50"}
    if weight:
        assert (CGROUP_ROOT / "blkio" / node.containerd.container_cgroup(cid).lstrip("/") /
                "blkio.bfq.weight").read_text().split()[-1] == "200"
    # An Adjustment's class replaces it: the old throttles are removed from the cgroup, the new one set.
    assert node.rm.set_class_overrides({cid: {"blockio": "other"}}) == {cid: {"blockio": "other"}}
    assert blkio_table(node, cid, "blkio.throttle.read_bps_device") == {}
    assert blkio_table(node, cid, "blkio.throttle.write_bps_device") == {dev: "2000000"}
    # A pod without a class annotation (its QoS class has no block I/O class) is left alone.
    plain = node.run("plain", "besteffort")
    assert blkio_table(node, plain, "blkio.throttle.read_bps_device") == {}
    assert node.rm.controllers.errors == {}
