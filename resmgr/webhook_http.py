"""The HTTPS server and the AdmissionReview decoding both of our admission webhooks use:
cri-resmgr-webhook (resmgr/webhook, mutating, in the shoot) and gardener-extension-admission-cri-resmgr
(admission/, validating, for the garden's Shoots).

Bounded: a request body larger than ``max_body`` is refused (413) without reading it, a client that stalls is
dropped after ``timeout`` seconds, and at most ``max_concurrent`` requests are served at once (more get 503,
which the API server treats as a webhook failure and handles by the webhook's failurePolicy).
Each POST path maps to a plain function: the AdmissionReview's ``request`` in, the answering AdmissionReview out.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import ssl
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger("resmgr.webhook_http")

ADMISSION_API_VERSION = "admission.k8s.io/v1"
ADMISSION_KIND = "AdmissionReview"
HEALTH_PATH = "/healthz"

# The AdmissionReview's request -> the AdmissionReview that answers it.
Review = Callable[[dict[str, Any]], dict[str, Any]]


class BadReview(ValueError):
    """The body is not an AdmissionReview v1 request (answered with HTTP 400)."""


def parse_review(body: bytes) -> dict[str, Any]:
    """The ``request`` of an AdmissionReview v1; BadReview when the body is something else."""
    try:
        review = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BadReview(f"body is not JSON: {err}") from None
    if not isinstance(review, dict):
        raise BadReview("body is not a JSON object")
    if review.get("apiVersion") != ADMISSION_API_VERSION or review.get("kind") != ADMISSION_KIND:
        raise BadReview(f"expected {ADMISSION_API_VERSION} {ADMISSION_KIND}, got "
                        f"{review.get('apiVersion')!r} {review.get('kind')!r}")
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str) or not request["uid"]:
        raise BadReview("AdmissionReview has no request with a uid")
    return request


def review_answer(response: dict[str, Any]) -> dict[str, Any]:
    """The AdmissionReview v1 that carries ``response`` (which holds the request's uid)."""
    return {"apiVersion": ADMISSION_API_VERSION, "kind": ADMISSION_KIND, "response": response}


@dataclass(frozen=True)
class ServerSettings:
    address: str = ""
    port: int = 8443
    cert_file: str = ""
    key_file: str = ""
    # An AdmissionReview of an UPDATE carries the object twice; the API server caps objects at 3 MiB.
    max_body: int = 8 * 1024 * 1024
    timeout: float = 10.0
    max_concurrent: int = 16


def add_server_arguments(p: argparse.ArgumentParser, defaults: ServerSettings) -> None:
    """The serving flags both webhook programs take (address, port, certificate, limits)."""
    p.add_argument("--address", default=defaults.address, help="address to listen on (default: all)")
    p.add_argument("--port", type=int, default=defaults.port, help=f"HTTPS port (default: {defaults.port})")
    p.add_argument("--cert-file", required=True, help="PEM serving certificate (with its chain)")
    p.add_argument("--key-file", required=True, help="PEM private key of the serving certificate")
    p.add_argument("--max-body-bytes", type=int, default=defaults.max_body,
                   help=f"larger requests are refused with 413 (default: {defaults.max_body})")
    p.add_argument("--timeout", type=float, default=defaults.timeout,
                   help=f"seconds a client may take for the TLS handshake and each read (default: {defaults.timeout})")
    p.add_argument("--max-concurrent", type=int, default=defaults.max_concurrent,
                   help=f"requests served at once; more get 503 (default: {defaults.max_concurrent})")


def server_settings(args: argparse.Namespace) -> ServerSettings:
    """The settings ``add_server_arguments``' flags give."""
    return ServerSettings(address=args.address, port=args.port, cert_file=args.cert_file, key_file=args.key_file,
                          max_body=args.max_body_bytes, timeout=args.timeout, max_concurrent=args.max_concurrent)


def tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context with the serving certificate (chain) and key, TLS 1.2 or newer."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert_file, key_file)
    return ctx


class _Handler(BaseHTTPRequestHandler):
    server: AdmissionServer
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
        # The API server appends ?timeout=... to the configured path.
        review = self.server.routes.get(self.path.split("?", 1)[0])
        if review is None:
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
            self._reply(HTTPStatus.OK, json.dumps(review(request)).encode())
        finally:
            self.server.slots.release()


class AdmissionServer(ThreadingHTTPServer):
    """HTTPS: ``POST <path>`` for each of ``routes`` (AdmissionReview v1), ``GET /healthz``."""

    daemon_threads = True

    def __init__(self, settings: ServerSettings, routes: Mapping[str, Review],
                 context: ssl.SSLContext | None = None) -> None:
        self.settings = settings
        self.routes = dict(routes)
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


def serve_until_stopped(server: AdmissionServer, log_: logging.Logger, paths: list[str]) -> int:
    """Serve until SIGTERM (pod deletion) or Ctrl-C; returns the exit code 0."""
    # shutdown() must come from another thread than serve_forever().
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    log_.info("serving", extra={"address": server.settings.address or "*", "port": server.server_address[1],
                                "paths": [*paths, HEALTH_PATH]})
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    log_.info("stopped")
    return 0
