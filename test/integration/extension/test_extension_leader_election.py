"""Two replicas are safe: leader election on a Lease in the operator's namespace makes exactly one work.

The holder of the Lease (spec.holderIdentity, read from the API) is the only one that runs kopf; a standby
never starts it. A killed leader is replaced once its Lease expires; a leader stopped by SIGTERM exits 0 and
releases the Lease, so a standby takes over without waiting for expiry."""

from __future__ import annotations

import os
import signal
import urllib.request
import uuid

import pytest
from extension_operator_process import Operator, wait_for
from fixtures.seed_api import default_shoot

from devland.procs import free_port

pytestmark = pytest.mark.integration

LEASE = "gardener-extension-cri-resmgr-leader-election"


def succeeded(seed, ns):
    ex = seed.extension(ns) or {}
    return ((ex.get("status") or {}).get("lastOperation") or {}).get("state") == "Succeeded"


def reconciled_by(op, ns):
    return any(ln.get("namespace") == ns and "Successfully reconciled" in ln.get("msg", "")
               for ln in op.log_lines())


def identity_of(op) -> str | None:
    """The identity the operator competes with, from its "starting" line."""
    return next((ln.get("identity") for ln in op.log_lines() if ln.get("msg") == "starting"), None)


def holder(seed, namespace) -> str | None:
    from kubernetes.client.exceptions import ApiException

    try:
        return seed.coordination.read_namespaced_lease(LEASE, namespace).spec.holder_identity
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def waiting_for_lease(op) -> bool:
    return any(ln.get("msg", "").startswith("waiting for the lease ") for ln in op.log_lines())


def ran_kopf(op) -> list[dict]:
    """Lines that only a running kopf (or a reconcile) writes."""
    return [ln for ln in op.log_lines() if str(ln.get("logger", "")).startswith("kopf")
            or "reconcile" in ln.get("msg", "").lower()]


def candidate(seed_api, tools, tmp_path, name, lease_ns, watched, configs_ns, extra=()) -> Operator:
    return Operator(seed_api, tools, tmp_path / name, watched[0], configmap_namespace=configs_ns,
                    extra_args=[a for ns in watched[1:] for a in ("--namespace", ns)] + list(extra),
                    env={"POD_NAME": name}, name=name, leader_election=lease_ns).start()


def usurp(seed, namespace, identity) -> bool:
    """Write another holder into the Lease; False when the leader renewed in between (409: try again)."""
    from kubernetes.client.exceptions import ApiException

    lease = seed.coordination.read_namespaced_lease(LEASE, namespace)
    lease.spec.holder_identity = identity
    try:
        seed.coordination.replace_namespaced_lease(LEASE, namespace, lease)
    except ApiException as e:
        if e.status == 409:
            return False
        raise
    return True


def liveness(port: int) -> bool:
    """The pod's liveness probe: kubelet restarts a container whose endpoint does not answer 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def exit_code(op: Operator, sig: int) -> int:
    os.killpg(op.process.pid, sig)
    return op.process.popen.wait(timeout=60)


def test_one_replica_holds_the_lease_and_works_and_a_killed_leader_is_replaced(
        seed, seed_api, tools, base_configs_namespace, tmp_path):
    lease_ns = seed_api.create_shoot_namespace(f"garden-le-{uuid.uuid4().hex[:6]}")
    first, second = seed.new_namespace("tle"), seed.new_namespace("tle")
    for ns in (first, second):
        seed_api.create_cluster(ns, shoot=default_shoot(ns))
    watched = [first, second]
    ports = {"active": free_port(), "standby": free_port()}

    def probe(name):
        return ["--liveness-endpoint", f"http://127.0.0.1:{ports[name]}/healthz"]

    active = candidate(seed_api, tools, tmp_path, "active", lease_ns, watched, base_configs_namespace,
                       probe("active"))
    standby = None
    try:
        wait_for(lambda: identity_of(active) and holder(seed, lease_ns) == identity_of(active),
                 "the first operator to hold the Lease", timeout=90, operator=active)
        standby = candidate(seed_api, tools, tmp_path, "standby", lease_ns, watched, base_configs_namespace,
                            probe("standby"))
        wait_for(lambda: waiting_for_lease(standby), "the second operator waiting for the Lease", timeout=90,
                 operator=standby)
        assert identity_of(standby) not in (None, identity_of(active))
        assert holder(seed, lease_ns) == identity_of(active)
        # Both pass the liveness probe: kopf answers for the leader, the waiting standby answers itself.
        wait_for(lambda: liveness(ports["active"]), "the leader's liveness endpoint", operator=active)
        wait_for(lambda: liveness(ports["standby"]), "the standby's liveness endpoint", operator=standby)

        seed.create_extension(first, None)
        wait_for(lambda: succeeded(seed, first), "reconcile by the leader", operator=active)
        # The reconciler logs its success after the status patch that `succeeded` sees: wait for the line.
        wait_for(lambda: reconciled_by(active, first), "the leader's reconcile log line", operator=active)
        assert holder(seed, lease_ns) == identity_of(active)
        assert not ran_kopf(standby), ran_kopf(standby)[:3]

        active.stop(sig=signal.SIGKILL)
        wait_for(lambda: holder(seed, lease_ns) == identity_of(standby), "the standby to take the expired Lease",
                 timeout=90, operator=standby)
        seed.create_extension(second, None)
        wait_for(lambda: succeeded(seed, second), "reconcile by the new leader", timeout=90, operator=standby)
        wait_for(lambda: reconciled_by(standby, second), "the new leader's reconcile log line", operator=standby)
        wait_for(lambda: liveness(ports["standby"]), "the new leader's (kopf's) liveness endpoint", operator=standby)
        assert any(ln.get("msg") == f"acquired the lease {lease_ns}/{LEASE}" for ln in standby.log_lines())
    finally:
        active.stop()
        if standby is not None:
            standby.stop()


def test_sigterm_exits_0_a_leader_releases_the_lease_and_a_standby_takes_over(
        seed, seed_api, tools, base_configs_namespace, tmp_path):
    lease_ns = seed_api.create_shoot_namespace(f"garden-le-{uuid.uuid4().hex[:6]}")
    ns = seed.new_namespace("tle")
    seed_api.create_cluster(ns, shoot=default_shoot(ns))
    # A lease duration far longer than the test: a standby can only get the Lease early if it was released.
    slow_expiry = ["--leader-election-lease-duration", "600"]
    leader = candidate(seed_api, tools, tmp_path, "leader", lease_ns, [ns], base_configs_namespace, slow_expiry)
    quitter = successor = None
    try:
        wait_for(lambda: identity_of(leader) and holder(seed, lease_ns) == identity_of(leader),
                 "the leader to hold the Lease", timeout=90, operator=leader)
        # A standby stopped while it waits exits 0 and leaves the Lease alone.
        quitter = candidate(seed_api, tools, tmp_path, "quitter", lease_ns, [ns], base_configs_namespace, slow_expiry)
        wait_for(lambda: waiting_for_lease(quitter), "a standby waiting for the Lease", timeout=90, operator=quitter)
        assert exit_code(quitter, signal.SIGTERM) == 0, quitter.log_tail()
        assert any(ln.get("msg", "").startswith("stopped while waiting for the lease") for ln in quitter.log_lines())
        assert not ran_kopf(quitter), ran_kopf(quitter)[:3]
        assert holder(seed, lease_ns) == identity_of(leader)

        successor = candidate(seed_api, tools, tmp_path, "successor", lease_ns, [ns], base_configs_namespace,
                              slow_expiry)
        wait_for(lambda: waiting_for_lease(successor), "the successor waiting for the Lease", timeout=90,
                 operator=successor)
        assert exit_code(leader, signal.SIGTERM) == 0, leader.log_tail()
        # Released before the leader exited: the Lease no longer names it (expiry is 600 s away).
        assert holder(seed, lease_ns) != identity_of(leader)
        assert any(ln.get("msg") == f"released the lease {lease_ns}/{LEASE}" for ln in leader.log_lines())
        wait_for(lambda: holder(seed, lease_ns) == identity_of(successor), "the successor to take the released Lease",
                 timeout=90, operator=successor)
        seed.create_extension(ns, None)
        wait_for(lambda: succeeded(seed, ns), "reconcile by the successor", timeout=90, operator=successor)
    finally:
        for op in (leader, quitter, successor):
            if op is not None:
                op.stop()


def test_a_leader_that_loses_the_lease_stops_and_exits_1(seed, seed_api, tools, base_configs_namespace, tmp_path):
    lease_ns = seed_api.create_shoot_namespace(f"garden-le-{uuid.uuid4().hex[:6]}")
    ns = seed.new_namespace("tle")
    leader = candidate(seed_api, tools, tmp_path, "leader", lease_ns, [ns], base_configs_namespace)
    try:
        wait_for(lambda: identity_of(leader) and holder(seed, lease_ns) == identity_of(leader),
                 "the leader to hold the Lease", timeout=90, operator=leader)
        # Another candidate takes the Lease over (as after this process stalled past the lease duration).
        wait_for(lambda: usurp(seed, lease_ns, "usurper"), "the Lease taken over", operator=leader)
        assert leader.process.popen.wait(timeout=90) == 1, leader.log_tail()
        lost = [ln for ln in leader.log_lines() if ln.get("msg", "").startswith(f"lost the lease {lease_ns}/{LEASE}")]
        assert lost and lost[0]["level"] == "warning" and "usurper" in lost[0]["msg"], leader.log_tail()
        assert holder(seed, lease_ns) == "usurper"  # not released: it is not ours
    finally:
        leader.stop()
