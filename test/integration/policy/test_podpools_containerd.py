"""podpools on real containerd: pods of a pool type share their pool instance's CPU, read back from the
host cgroups; a full pool sends the next pod to the default pool, and a freed slot takes a pod again.

This machine has 2 CPUs: CPU 0 is reserved (and, with nothing left over, the default pool's too),
CPU 1 is the one instance of the ``solo`` pool type, which takes two pods.
"""

from __future__ import annotations

import pytest
from fixtures.cri_objects import make_container_config, write_json
from fixtures.placement import FRONTENDS

from resmgr.policy.podpools import POOL_KEY

pytestmark = pytest.mark.integration

PODPOOLS = """\
policy:
  Active: podpools
  ReservedResources:
    cpu: cpuset:0
  podpools:
    Pools:
      - {Name: solo, CPU: 1, MaxPods: 2}
"""
SOLO = {POOL_KEY: "solo"}


def add_container(node, first: str, pod_name: str, name: str) -> str:
    """A second container in the pod of container ``first`` (node.run makes one per pod)."""
    pod_id = node.pods[first]
    pod_cfg = str(node.workdir / f"pod-{pod_name}.json")
    cfg = write_json(node.workdir / f"ctr-{name}.json", make_container_config(name, cpu_shares=256))
    cid = node.crictl("create", pod_id, cfg, pod_cfg)
    node.crictl("start", cid)
    return cid


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_podpools_pods_share_their_pool_instance(node_factory) -> None:
    node = node_factory(PODPOOLS)
    assert node.rm.policy.name == "podpools"
    a1 = node.run("a", "burstable", annotations=SOLO)
    a2 = add_container(node, a1, "a", "a-side")
    plain = node.run("plain", "besteffort")
    system = node.run("system", "burstable", namespace="kube-system")
    # The pod's containers share the instance's CPU; everything else runs on the reserved CPU.
    assert node.cgroups([a1, a2, plain, system]) == {a1: ("1", "0"), a2: ("1", "0"), plain: ("0", "0"),
                                                     system: ("0", "0")}
    b = node.run("b", "guaranteed", annotations=SOLO)
    assert node.cgroups([b]) == {b: ("1", "0")}
    # MaxPods 2: the third solo pod finds no room and runs in the default pool.
    c = node.run("c", "burstable", annotations=SOLO)
    assert node.cgroups([c]) == {c: ("0", "0")}
    assert node.rm.policy.grants[c].pool == "default[0]"
    # Pod b leaves: its slot takes the next solo pod; nobody else moved.
    node.remove(b)
    d = node.run("d", "besteffort", annotations=SOLO)
    assert node.cgroups([d]) == {d: ("1", "0")}
    cids = [a1, a2, plain, system, c, d]
    assert node.in_sync(cids)
    assert dict(node.rm.pool_containers()) == {("podpools", "solo[0]"): 3.0, ("podpools", "default[0]"): 2.0,
                                               ("podpools", "reserved[0]"): 1.0}
