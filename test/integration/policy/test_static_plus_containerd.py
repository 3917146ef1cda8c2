"""static-plus on real containerd (2 CPUs, CPU 0 reserved): exclusive CPUs, kube-system on the reserved CPU, and
the shared containers moving onto the reserved CPU while the last shared CPU is held exclusively."""

from __future__ import annotations

import pytest
from fixtures.placement import FRONTENDS

from devland.waiting import eventually

pytestmark = pytest.mark.integration

STATIC_PLUS = "policy:\n  Active: static-plus\n  ReservedResources:\n    cpu: 1\n"


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_static_plus_exclusive_reserved_and_overflow(node_factory) -> None:
    node = node_factory(STATIC_PLUS)
    assert node.rm.policy.reserved == {0}
    sys_ctr = node.run("sys", "burstable", namespace="kube-system")
    bu = node.run("bu", "burstable")
    assert node.cgroups([sys_ctr, bu]) == {sys_ctr: ("0", "0"), bu: ("1", "0")}
    g = node.run("g", "guaranteed")
    assert node.containerd.cgroup_cpuset(g) == "1"
    # No shared CPU left: the shared container runs on the reserved CPU, moved by UpdateContainerResources.
    assert eventually(lambda: node.cgroups([bu]) == {bu: ("0", "0")})
    assert node.in_sync([sys_ctr, bu, g])
    node.remove(g)
    assert eventually(lambda: node.cgroups([bu, sys_ctr]) == {bu: ("1", "0"), sys_ctr: ("0", "0")})
