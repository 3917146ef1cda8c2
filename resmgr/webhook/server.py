"""The HTTPS server of cri-resmgr-webhook: POST /mutate (AdmissionReview v1), GET /healthz.

Bounded: a request body larger than ``max_body`` is refused (413) without reading it, a client
that stalls is dropped after ``timeout`` seconds, and at most ``max_concurrent`` requests are
served at once (more get 503, which the API server treats as a webhook failure: with
failurePolicy Ignore the pod is admitted unannotated).
"""

from __future__ import annotations

import json
import logging
import ssl
import sys
import threading
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from resmgr.webhook.mutate import BadReview, admission_response, parse_review

log = logging.getLogger("resmgr.webhook")

MUTATE_PATH = "/mutate"
HEALTH_PATH = "/healthz"


@dataclass(frozen=True)
class ServerSettings:
    address: str = ""
    port: int = 8443
    cert_file: str = ""
    key_file: str = ""
    # An AdmissionReview of a pod UPDATE carries the object twice; the API server caps objects at 3 MiB.
    max_body: int = 8 * 1024 * 1024
    timeout: float = 10.0
    max_concurrent: int = 16


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context with the serving certificate (chain) and key, TLS 1.2 or newer."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


class _Handler(BaseHTTPRequestHandler):
    server: WebhookServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        log.debug(format, *args, extra={"peer": self.client_address[0]})

    def _reply(self, status: HTTPStatus, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _refuse(self, status: HTTPStatus, reason: str) -> None:
        log.warning("refused request: %s", reason, extra={"peer": self.client_address[0], "status": int(status)})
        self.close_connection = True
        self._reply(status, (reason + "\n").encode(), "text/plain")

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path == HEALTH_PATH:
            self._reply(HTTPStatus.OK, b"ok\n", "text/plain")
        else:
            self._refuse(HTTPStatus.NOT_FOUND, f"no such path {self.path!r}")

    def do_POST(self) -> None:  # noqa: N802
        if self.path.split("?", 1)[0] != MUTATE_PATH:
            return self._refuse(HTTPStatus.NOT_FOUND, f"no such path {self.path!r}")
        if self.headers.get_content_type() != "application/json":
            return self._refuse(HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                                f"Content-Type must be application/json, got {self.headers.get('Content-Type')!r}")
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            return self._refuse(HTTPStatus.LENGTH_REQUIRED, "a Content-Length is required")
        if length < 0 or length > self.server.settings.max_body:
            return self._refuse(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                                f"body of {length} bytes exceeds the limit of {self.server.settings.max_body}")
        if not self.server.slots.acquire(blocking=False):
            return self._refuse(HTTPStatus.SERVICE_UNAVAILABLE,
                                f"busy: {self.server.settings.max_concurrent} requests in flight")
        try:
            body = self.rfile.read(length)
            try:
                request = parse_review(body)
            except BadReview as err:
                return self._refuse(HTTPStatus.BAD_REQUEST, str(err))
            self._reply(HTTPStatus.OK, json.dumps(admission_response(request)).encode())
        finally:
            self.server.slots.release()


class WebhookServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, settings: ServerSettings, context: ssl.SSLContext | None = None) -> None:
        self.settings = settings
        self.slots = threading.BoundedSemaphore(settings.max_concurrent)
        self.context = context or tls_context(settings.cert_file, settings.key_file)
        super().__init__((settings.address, settings.port), _Handler)

    def get_request(self):  # type: ignore[no-untyped-def]
        sock, addr = super().get_request()
        # The timeout bounds the handshake and every later read of this client.
        sock.settimeout(self.settings.timeout)
        return self.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def finish_request(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        # In the request's own thread, so a slow or silent client cannot stall the accept loop.
        request.do_handshake()
        super().finish_request(request, client_address)

    def handle_error(self, request, client_address) -> None:  # type: ignore[no-untyped-def]
        # TLS failures and timeouts of single clients are routine: one line, no traceback.
        err = sys.exc_info()[1]
        log.warning("request failed: %s", err, extra={"peer": client_address[0]})
