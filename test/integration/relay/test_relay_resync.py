"""Resync after a bypass, against real containerd.

While the installer falls back to containerd, kubelet creates and removes containers without
the relay. When calls come through the relay again, the first one about a container the
resource manager never saw makes it resync with the runtime: containers created during the
bypass are placed (their cgroups follow the policy), containers removed during it release
their CPUs. Without such a call, the relay's periodic comparison with the runtime's containers
(``--resync-period``) finds the difference and resyncs.
"""

from __future__ import annotations

from integration.relay.test_relay_concurrency import start_pod

from devland.waiting import eventually
from resmgr.config import validate_config_text
from resmgr.manager.resource_manager import ResourceManager
from resmgr.topology import discover_topology, parse_cpuset

# CPU 0 reserved; the others can be handed out exclusively.
POLICY = "policy:\n  Active: static\n  ReservedResources:\n    cpu: 1\n"


def test_calls_after_a_bypass_resync_the_resource_manager(containerd, inproc_relay, tmp_path):
    rm = ResourceManager(discover_topology("/"), relay_dir=tmp_path / "state", cache_fsync=False,
                         fallback_config=validate_config_text(POLICY))
    ep = inproc_relay(rm, drift_check_period=0).endpoint  # only the call may trigger it here
    # Through the relay: a Guaranteed container gets exclusive CPUs.
    pod_a, guaranteed = start_pod(containerd, ep, tmp_path, "before", "guaranteed")
    exclusive = rm.policy.grants[guaranteed].exclusive
    assert exclusive
    # The bypass: kubelet on containerd directly removes that pod and starts others.
    containerd.crictl("stopp", pod_a)
    containerd.crictl("rmp", pod_a)
    _, stopped_later = start_pod(containerd, containerd.endpoint, tmp_path, "during1", "besteffort")
    _, bypassed = start_pod(containerd, containerd.endpoint, tmp_path, "during2", "besteffort")
    assert bypassed not in rm.containers and guaranteed in rm.policy.containers  # the relay saw none of it
    # Back through the relay: a call about a container it never saw.
    containerd.crictl("stop", "--timeout", "0", stopped_later, endpoint=ep)
    assert eventually(lambda: bypassed in rm.policy.containers, timeout=60), "the bypass container was not placed"
    assert guaranteed not in rm.containers and guaranteed not in rm.policy.grants, "the removed container kept CPUs"
    # The removed container's exclusive CPUs are free again: a new Guaranteed container can have them,
    # and the container created during the bypass is moved off them.
    _, after = start_pod(containerd, ep, tmp_path, "after", "guaranteed")
    assert rm.policy.grants[after].exclusive == exclusive
    assert eventually(lambda: not parse_cpuset(containerd.cgroup_cpuset(bypassed)) & exclusive, timeout=60), \
        containerd.cgroup_cpuset(bypassed)


def test_a_bypass_without_later_calls_is_found_by_the_periodic_check(containerd, inproc_relay, tmp_path):
    """Kubelet removed a pod and started another on containerd directly, then came back through the relay
    without a single call about either: the periodic comparison resyncs all the same."""
    rm = ResourceManager(discover_topology("/"), relay_dir=tmp_path / "state", cache_fsync=False,
                         fallback_config=validate_config_text(POLICY))
    ep = inproc_relay(rm, drift_check_period=0.5).endpoint
    pod_a, guaranteed = start_pod(containerd, ep, tmp_path, "before", "guaranteed")
    exclusive = rm.policy.grants[guaranteed].exclusive
    assert exclusive
    containerd.crictl("stopp", pod_a)
    containerd.crictl("rmp", pod_a)
    _, bypassed = start_pod(containerd, containerd.endpoint, tmp_path, "during", "guaranteed")
    assert eventually(lambda: bypassed in rm.policy.containers and guaranteed not in rm.policy.grants, timeout=60), \
        (sorted(rm.policy.containers), sorted(rm.policy.grants))
    assert guaranteed not in rm.containers
    # The container started during the bypass got the freed exclusive CPUs, in its cgroup too.
    assert rm.policy.grants[bypassed].exclusive == exclusive
    assert eventually(lambda: parse_cpuset(containerd.cgroup_cpuset(bypassed)) == exclusive, timeout=60), \
        containerd.cgroup_cpuset(bypassed)
