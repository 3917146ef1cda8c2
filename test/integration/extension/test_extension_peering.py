"""Two replicas are safe: kopf peering makes one active; the standby takes over when it dies."""

from __future__ import annotations

import json
import signal

import pytest
from extension_operator_process import Operator, wait_for
from fixtures.seed_api import default_shoot

pytestmark = pytest.mark.integration

KOPF_PEERING_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "kopfpeerings.kopf.dev"},
    "spec": {"scope": "Namespaced", "group": "kopf.dev",
             "names": {"kind": "KopfPeering", "plural": "kopfpeerings", "singular": "kopfpeering"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "properties": {"status": {
                     "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]},
}


def succeeded(seed, ns):
    ex = seed.extension(ns) or {}
    return ((ex.get("status") or {}).get("lastOperation") or {}).get("state") == "Succeeded"


def extension_stream_paused(op) -> bool:
    """kopf (debug log) pauses/resumes the Extension watch stream as peering decides; take the latest."""
    state = None
    for ln in op.log_lines():
        msg = ln.get("msg", "")
        if "watch-stream for extensions." in msg:
            if msg.startswith("Pausing"):
                state = True
            elif msg.startswith("Resuming"):
                state = False
    return bool(state)


def reconciled_by(op, ns):
    return any(ln.get("namespace") == ns and "Successfully reconciled" in ln.get("msg", "")
               for ln in op.log_lines())


def reconciled_while_paused(op, ns) -> bool:
    """Whether ``op`` reconciled ``ns`` while its Extension watch was paused in favour of a peer (its log, in
    order). A standby that resumed first, because the active replica's peering record lapsed (kopf renews it
    1 s into a 5 s lifetime here; a loaded machine can delay that), acts as the active replica then: that is
    kopf's lease, not a second active replica."""
    paused = False
    for ln in op.log_lines():
        msg = ln.get("msg", "")
        if "watch-stream for extensions." in msg:
            paused = msg.startswith("Pausing") or (paused and not msg.startswith("Resuming"))
        elif paused and ln.get("namespace") == ns and "Successfully reconciled" in msg:
            return True
    return False


def test_two_replicas_one_active_and_takeover(seed, seed_api, tools, base_configs_namespace, tmp_path):
    # Namespaced operators peer through a KopfPeering in the watched namespace (the chart installs
    # the cluster-wide ClusterKopfPeering for the real deployment).
    seed_api.kubectl("apply", "-f", "-", input=json.dumps(KOPF_PEERING_CRD))
    seed_api.kubectl("wait", "--for=condition=Established", "crd/kopfpeerings.kopf.dev")
    first, second = seed.new_namespace("tpeer"), seed.new_namespace("tpeer")
    peering = {"apiVersion": "kopf.dev/v1", "kind": "KopfPeering", "metadata": {"name": "cri-resmgr-test"}}
    for ns in (first, second):
        seed_api.kubectl("-n", ns, "apply", "-f", "-", input=json.dumps(peering))
        seed_api.create_cluster(ns, shoot=default_shoot(ns))
    # Exact namespaces: kopf then needs no namespace observation before it starts peering.
    common = ["--namespace", second, "--peering", "cri-resmgr-test", "--peering-lifetime", "5"]
    active = Operator(seed_api, tools, tmp_path / "a", first, configmap_namespace=base_configs_namespace,
                      extra_args=[*common, "--priority", "200"], name="active").start()
    standby = Operator(seed_api, tools, tmp_path / "b", first, configmap_namespace=base_configs_namespace,
                       extra_args=[*common, "--priority", "100"], name="standby",
                       env={"EXTENSION_TEST_LOG_LEVEL": "debug"}).start()
    try:
        wait_for(lambda: extension_stream_paused(standby), "standby paused in favour of the active replica",
                 timeout=120, operator=standby)
        seed.create_extension(first, None)
        wait_for(lambda: succeeded(seed, first), "reconcile by the active replica", operator=active)
        # The reconciler logs its success after the status patch that `succeeded` sees: wait for the line.
        wait_for(lambda: reconciled_by(active, first), "the active replica's reconcile log line", operator=active)
        assert not reconciled_while_paused(standby, first)
        wait_for(lambda: extension_stream_paused(standby), "standby paused again", timeout=120, operator=standby)

        active.stop(sig=signal.SIGKILL)
        seed.create_extension(second, None)
        wait_for(lambda: succeeded(seed, second), "reconcile by the standby after takeover", timeout=90,
                 operator=standby)
        wait_for(lambda: reconciled_by(standby, second), "the standby's reconcile log line", operator=standby)
    finally:
        active.stop()
        standby.stop()
