"""A disable whose shoot API server cannot be reached (DNS, connection) does not wait forever.

Seen on the landscape: with gardenlet's ``https://kube-apiserver`` the reads failed with NameResolutionError,
and the delete retried with that error for as long as it ran, keeping the Extension's finalizer. Now an
unreachable shoot is waited for like unfinished nodes, and past the uninstall timeout
gardener-resource-manager's health of the uninstall rollout decides alone.
"""

from __future__ import annotations

import pytest
from kubernetes import client
from unit.extension.fake_api import FakeApis
from unit.extension.test_actuator import (
    FALLBACK,
    MRS,
    NS,
    cluster,
    extension,
    make_actuator,
    mark_healthy,
    provider_config,
)

import noderecord
from extension import chart_render, node_proof
from extension import constants as c
from extension.actuator import UninstallTimeout
from extension.errors import WaitingError
from extension.node_proof import Selection


class UnreachableShoot(node_proof.ShootReader):
    """The real reader against an address nothing answers on."""

    def __init__(self, apis: FakeApis, host: str) -> None:
        super().__init__(apis)
        self.host = host

    def api_client(self, namespace: str) -> client.ApiClient:
        cfg = client.Configuration()
        cfg.host = self.host
        return client.ApiClient(cfg)


@pytest.mark.parametrize("host,cause", [
    ("https://127.0.0.1:1", "Connection refused"),
    ("https://kube-apiserver.shoot--x.invalid", "Failed to resolve"),  # RFC 2606: never resolves
])
def test_an_unreachable_shoot_api_server_is_told_apart(host: str, cause: str) -> None:
    reader = UnreachableShoot(FakeApis(), host)
    with pytest.raises(node_proof.ShootUnreachable, match=f"cannot reach the shoot's API server.*{cause}") as err:
        reader.check(NS, noderecord.UNINSTALLED, "d", Selection(), 7.0)
    assert err.value.delay == 7.0
    # The health check says the check itself failed, not that the nodes are progressing.
    mr = {"metadata": {"annotations": {node_proof.EXPECTED_STATE_ANNOTATION: noderecord.INSTALLED,
                                       node_proof.EXPECTED_DIGEST_ANNOTATION: "d"}}}
    status, reason, message = node_proof.health(reader, NS, mr)
    assert (status, reason) == ("Unknown", "ConditionCheckError") and cause in message


def test_delete_ends_after_the_uninstall_timeout_when_the_shoot_stays_unreachable() -> None:
    apis = FakeApis()
    actuator = make_actuator(apis, chart_render.find_helm(), uninstall_timeout=600)
    actuator.shoot = UnreachableShoot(apis, "https://127.0.0.1:1")
    ex = extension(provider_config(fallback=FALLBACK))
    ex["metadata"].update(uid="u1", deletionTimestamp="2026-11-22T23:00:00Z")
    actuator.reconcile(ex, cluster())
    # Within the timeout: waiting (the reconciler reports Processing and retries), the uninstall stays deployed.
    with pytest.raises(WaitingError, match="cannot reach the shoot's API server"):
        actuator.delete(ex, cluster(), runtime_seconds=10)
    assert apis.object(MRS, NS, c.MANAGED_RESOURCE_NAME) is not None
    # Past it, gardener-resource-manager must still report the uninstall rollout healthy ...
    with pytest.raises(UninstallTimeout, match="not finished after 601s"):
        actuator.delete(ex, cluster(), runtime_seconds=601)
    assert apis.object(MRS, NS, c.MANAGED_RESOURCE_NAME) is not None
    # ... and once it does, the delete finishes without the records and says so.
    mark_healthy(apis)
    detail = actuator.delete(ex, cluster(), runtime_seconds=602)
    assert detail.startswith("Deleted managed resources after the uninstall timeout") and "127.0.0.1" in detail
    assert [key for key in apis.store.objects if key[0] in (MRS, "secrets")] == []
