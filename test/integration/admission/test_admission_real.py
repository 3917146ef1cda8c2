"""gardener-extension-admission-cri-resmgr as its own process over verified TLS: AdmissionReviews of Shoots
posted as gardener-apiserver posts them, answered allowed or denied with the field path; bad bodies are refused.

The garden's real gardener-apiserver calling it is test/e2e/local/test_controller_installation.py
(test_the_garden_refuses_a_bad_shoot_at_apply)."""

from __future__ import annotations

import http.client
import json
import signal
from collections.abc import Iterator

import pytest
from fixtures.tls_server import TlsServer, start_tls_server

pytestmark = pytest.mark.integration

PROGRAM = "gardener-extension-admission-cri-resmgr"
PATH = "/webhooks/cri-resmgr"
LABEL = "extensions.extensions.gardener.cloud/cri-resmgr-extension"


def shoot(*extensions: dict) -> dict:
    return {"apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
            "metadata": {"name": "s1", "namespace": "garden-dev", "labels": {LABEL: "true"}},
            "spec": {"extensions": list(extensions), "provider": {"type": "local", "workers": [{"name": "w1"}]}}}


def review(obj: dict, operation: str = "CREATE", uid: str = "uid-1") -> bytes:
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "core.gardener.cloud", "version": "v1beta1", "kind": "Shoot"},
        "resource": {"group": "core.gardener.cloud", "version": "v1beta1", "resource": "shoots"},
        "namespace": "garden-dev", "name": "s1", "operation": operation, "object": obj}}).encode()


def ours(configs: dict) -> dict:
    return {"type": "cri-resmgr-extension", "providerConfig": {
        "apiVersion": "cri-resmgr.extensions.gardener.cloud/v1alpha1", "kind": "CriResMgrConfig",
        "configs": configs}}


@pytest.fixture(scope="module")
def admission(tmp_path_factory) -> Iterator[TlsServer]:
    server = start_tls_server(PROGRAM, tmp_path_factory.mktemp("admission"))
    try:
        yield server
    finally:
        server.proc.stop()


def post(admission: TlsServer, body: bytes, path: str = PATH + "?timeout=10s") -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection("localhost", admission.port, context=admission.ctx, timeout=10)
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, r.read()


def answer(admission, body: bytes) -> dict:
    status, out = post(admission, body)
    assert status == 200, out
    reply = json.loads(out)
    assert (reply["apiVersion"], reply["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    return reply["response"]


def test_a_bad_config_is_denied_naming_the_field(admission):
    response = answer(admission, review(shoot({"type": "other"}, ours({"default": "policy:\n  Active: nope\n"}))))
    assert response["uid"] == "uid-1" and response["allowed"] is False
    assert response["status"]["message"].startswith("spec.extensions[1].providerConfig.configs.default.policy"), \
        response
    proc = admission.proc
    lines = [json.loads(line) for line in proc.log_path.read_text().splitlines() if line.startswith("{")]
    assert any(e["msg"] == "refused shoot" and e.get("shoot") == "s1" for e in lines), proc.log_tail()


def test_a_good_config_and_a_shoot_without_it_are_allowed(admission):
    good = ours({"default": "policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 750m\n"})
    assert answer(admission, review(shoot(good), uid="uid-2")) == {"uid": "uid-2", "allowed": True}
    assert answer(admission, review(shoot({"type": "other"}), "UPDATE", "uid-3")) == {"uid": "uid-3",
                                                                                    "allowed": True}


def test_bad_requests_are_refused(admission):
    assert post(admission, b"{not json")[0] == 400
    status, out = post(admission, json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode())
    assert status == 400 and b"no request with a uid" in out
    assert post(admission, review(shoot()), path="/mutate")[0] == 404


def test_sigterm_stops_it_cleanly(tmp_path):
    proc = start_tls_server(PROGRAM, tmp_path, wait_healthy=False).proc
    try:
        proc.wait_until(lambda: '"msg": "serving"' in proc.log_path.read_text(), "serving", 60)
        proc.popen.send_signal(signal.SIGTERM)
        assert proc.popen.wait(timeout=30) == 0, proc.log_tail()
    finally:
        proc.stop()
