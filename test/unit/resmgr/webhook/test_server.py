"""The webhook's HTTPS server on loopback: verified TLS, /mutate, /healthz and its bounds."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading

import pytest

from extension.webhook_certs import ensure_certs
from resmgr.model.annotation_budget import RESOURCES_ANNOTATION
from resmgr.webhook.server import ServerSettings, WebhookServer, tls_context

from .test_mutate import POD, patched, review


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    certs, _ = ensure_certs(None, ["localhost"])
    d = tmp_path_factory.mktemp("certs")
    (d / "tls.crt").write_bytes(certs.cert)
    (d / "tls.key").write_bytes(certs.key)
    return certs, d


@pytest.fixture
def server(certs):
    _, d = certs
    settings = ServerSettings(address="127.0.0.1", port=0, max_body=64 * 1024, timeout=60.0, max_concurrent=2)
    srv = WebhookServer(settings, tls_context(str(d / "tls.crt"), str(d / "tls.key")))
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    t.join()


def connect(server, certs):
    ctx = ssl.create_default_context(cadata=certs[0].ca_bundle.decode())
    return http.client.HTTPSConnection("localhost", server.server_address[1], context=ctx, timeout=10)


def post(server, certs, body: bytes, content_type="application/json", headers=None):
    conn = connect(server, certs)
    conn.request("POST", "/mutate", body=body, headers={"Content-Type": content_type, **(headers or {})})
    r = conn.getresponse()
    return r.status, r.read()


def test_mutate_over_verified_tls(server, certs):
    status, body = post(server, certs, json.dumps(review(POD)).encode())
    assert status == 200
    response = json.loads(body)["response"]
    assert RESOURCES_ANNOTATION in patched(POD, response)["metadata"]["annotations"]


def test_health(server, certs):
    conn = connect(server, certs)
    conn.request("GET", "/healthz")
    r = conn.getresponse()
    assert (r.status, r.read()) == (200, b"ok\n")


def test_refusals(server, certs):
    assert post(server, certs, b"{}", content_type="text/plain")[0] == 415
    assert post(server, certs, b"not json")[0] == 400
    # Refused on the announced length, before reading the body: send only the headers (a client still
    # writing its body may see the connection close under it).
    conn = connect(server, certs)
    conn.putrequest("POST", "/mutate")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(70_000))
    conn.endheaders()
    r = conn.getresponse()
    assert r.status == 413 and b"exceeds the limit" in r.read()


def test_a_silent_client_does_not_block_others(server, certs):
    # A client that connects and never sends a TLS hello is held by its own thread (for up to the 60 s timeout,
    # longer than the client waits here): the accept loop goes on.
    silent = socket.create_connection(("127.0.0.1", server.server_address[1]))
    try:
        assert post(server, certs, json.dumps(review(POD)).encode())[0] == 200
    finally:
        silent.close()
