"""gardener-extension-admission-cri-resmgr as its own process over verified TLS: AdmissionReviews of Shoots
posted as gardener-apiserver posts them, answered allowed or denied with the field path; bad bodies are refused.

The garden's real gardener-apiserver calling it is test/e2e/local/test_controller_installation.py
(test_the_garden_refuses_a_bad_shoot_at_apply)."""

from __future__ import annotations

import http.client
import json
import signal
import ssl
import sys
from pathlib import Path

import pytest

from devland.procs import Process, free_port
from extension.webhook_certs import ensure_certs

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
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
def admission(tmp_path_factory):
    d = tmp_path_factory.mktemp("admission")
    certs, _ = ensure_certs(None, ["localhost"])
    (d / "tls.crt").write_bytes(certs.cert)
    (d / "tls.key").write_bytes(certs.key)
    port = free_port()
    proc = Process("admission", [
        str(BIN / "gardener-extension-admission-cri-resmgr"), "--address", "127.0.0.1", "--port", str(port),
        "--cert-file", str(d / "tls.crt"), "--key-file", str(d / "tls.key")], d)
    ctx = ssl.create_default_context(cadata=certs.ca_bundle.decode())

    def healthy() -> bool:
        try:
            return get(port, ctx, "/healthz")[0] == 200
        except OSError:
            return False
    proc.wait_until(healthy, "/healthz", 60)
    try:
        yield proc, port, ctx
    finally:
        proc.stop()


def get(port: int, ctx: ssl.SSLContext, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=10)
    conn.request("GET", path)
    r = conn.getresponse()
    return r.status, r.read()


def post(admission, body: bytes, path: str = PATH + "?timeout=10s") -> tuple[int, bytes]:
    _, port, ctx = admission
    conn = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=10)
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
    proc = admission[0]
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
    certs, _ = ensure_certs(None, ["localhost"])
    (tmp_path / "tls.crt").write_bytes(certs.cert)
    (tmp_path / "tls.key").write_bytes(certs.key)
    port = free_port()
    proc = Process("admission-term", [
        str(BIN / "gardener-extension-admission-cri-resmgr"), "--address", "127.0.0.1", "--port", str(port),
        "--cert-file", str(tmp_path / "tls.crt"), "--key-file", str(tmp_path / "tls.key")], tmp_path)
    try:
        proc.wait_until(lambda: '"msg": "serving"' in proc.log_path.read_text(), "serving", 60)
        proc.popen.send_signal(signal.SIGTERM)
        assert proc.popen.wait(timeout=30) == 0, proc.log_tail()
    finally:
        proc.stop()
