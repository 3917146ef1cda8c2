"""The installer's node record against a real API server: the chart's RBAC and admission policy let an
installer pod write only its own node's Lease, and NodeRecorder writes and rewrites it there.

The installation chart is applied for real (the test API server stands in for the shoot's); the
installer's token is bound to a pod on one node, as the projected token in its DaemonSet pod is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

from integration.extension.pod_bound_token import first_denial, pod_bound_token
from kubernetes import client

import noderecord
from installer import node_recorder

POLICY = "cri-resmgr-installer-own-node-record"


@contextmanager
def leases_deleted(seed_api, *nodes: str) -> Iterator[None]:
    try:
        yield
    finally:
        seed_api.kubectl("delete", "lease", "-n", "kube-system", *map(noderecord.lease_name, nodes),
                         "--ignore-not-found", check=False)


def _coordination(url: str, token: str) -> client.CoordinationV1Api:
    cfg = client.Configuration(host=url, api_key={"authorization": f"Bearer {token}"})
    cfg.verify_ssl = False
    return client.CoordinationV1Api(client.ApiClient(cfg))


def test_installer_writes_only_its_own_node_record(tools, seed_api):
    with pod_bound_token(tools, seed_api, policy=POLICY, service_account="cri-resmgr-installer",
                         container="installer") as (own, other, token, _), leases_deleted(seed_api, own, other):
        api = _coordination(seed_api.url, token)
        # Another node's record: refused once the API server has loaded the policy. Each attempt is a new
        # recorder: a recorder that has written a state once answers True again without asking the API.
        written = first_denial(
            lambda: node_recorder.NodeRecorder(api, other, "d1").record(noderecord.INSTALLED),
            denied=lambda ok: not ok,
            undo=lambda: seed_api.kubectl("delete", "lease", "-n", "kube-system", noderecord.lease_name(other),
                                          check=False))
        assert not written, "an installer wrote another node's record"
        assert not node_recorder.NodeRecorder(api, other, "d1").record(noderecord.INSTALLED)
        # A record under its own name but held by another node is refused too.
        forged = noderecord.NodeRecord(other, noderecord.INSTALLED, "d1", time=node_recorder.now_rfc3339()).to_lease()
        forged["metadata"]["name"] = noderecord.lease_name(own)
        try:
            api.create_namespaced_lease("kube-system", forged)
            raise AssertionError("a record held by another node was accepted")
        except client.exceptions.ApiException as err:
            assert err.status in (403, 422) and "may write only the record of the node" in err.body, err.body

        # Its own record: created, then rewritten on a change of state.
        recorder = node_recorder.NodeRecorder(api, own, "digest-1")
        assert recorder.record(noderecord.INSTALLED)
        assert recorder.record(noderecord.UNINSTALL_FAILED, "uninstall failed: boom")
        lease = seed_api.kubectl("get", "lease", "-n", "kube-system", noderecord.lease_name(own),
                                 "-o", "json").stdout
        rec = noderecord.from_lease(json.loads(lease))
        assert rec is not None and (rec.node, rec.state, rec.digest, rec.reason) == \
            (own, noderecord.UNINSTALL_FAILED, "digest-1", "uninstall failed: boom")
        # Deleting records is not the installer's business: its Role has no delete.
        try:
            api.delete_namespaced_lease(noderecord.lease_name(own), "kube-system")
            raise AssertionError("the installer could delete its record")
        except client.exceptions.ApiException as err:
            assert err.status == 403, err.body
