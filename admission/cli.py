"""Command line of gardener-extension-admission-cri-resmgr."""

from __future__ import annotations

import argparse
import logging
import ssl
import sys

from admission.validate import SHOOT_LABEL, review
from resmgr.logsetup import setup_logging_from_args
from resmgr.options import add_logging_arguments
from resmgr.webhook_http import HEALTH_PATH, AdmissionServer, ServerSettings, serve_until_stopped, tls_context

log = logging.getLogger("admission")

PROG = "gardener-extension-admission-cri-resmgr"
# As registry-cache's admission serves /webhooks/registry-cache (pkg/admission/validator/cache/webhook.go).
VALIDATE_PATH = "/webhooks/cri-resmgr"

DESCRIPTION = f"""\
{PROG} is the garden's validating admission
webhook for Shoots (core.gardener.cloud) that enable the cri-resmgr-extension. On
CREATE and UPDATE it checks the extension's providerConfig with the extension's own
validation (providerConfig fields, node selector, worker pools, and every config with
cri-resmgr's schema), so `kubectl apply` refuses a bad Shoot at once, naming the
field, e.g.
  spec.extensions[0].providerConfig.configs.default: ...
instead of the extension reporting it at the next reconcile. Worker pools the Shoot does
not have and config fields cri-resmgr leaves out are answered as warnings, not refusals.
It cannot check the operator's base configs (the seed's ConfigMap); the reconcile still does.

Shoots without the extension are allowed without a check; the chart's webhook sends only
Shoots labelled {SHOOT_LABEL}=true
(gardener-apiserver sets the label).
An UPDATE that leaves the providerConfig unchanged is allowed without a check.

It serves HTTPS: POST {VALIDATE_PATH} (AdmissionReview admission.k8s.io/v1) and GET
{HEALTH_PATH}. It needs no access to any API server. The certificate is read once at start.
"""

EPILOG = f"""\
examples:
  {PROG} --cert-file /etc/webhook/tls.crt --key-file /etc/webhook/tls.key
  {PROG} --address 127.0.0.1 --port 9443 --cert-file tls.crt --key-file tls.key --log-format text
"""


def build_parser() -> argparse.ArgumentParser:
    d = ServerSettings(port=10250)
    p = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", default=d.address, help="address to listen on (default: all)")
    p.add_argument("--port", type=int, default=d.port, help=f"HTTPS port (default: {d.port})")
    p.add_argument("--cert-file", required=True, help="PEM serving certificate (with its chain)")
    p.add_argument("--key-file", required=True, help="PEM private key of the serving certificate")
    p.add_argument("--max-body-bytes", type=int, default=d.max_body,
                   help=f"larger requests are refused with 413 (default: {d.max_body})")
    p.add_argument("--timeout", type=float, default=d.timeout,
                   help=f"seconds a client may take for the TLS handshake and each read (default: {d.timeout})")
    p.add_argument("--max-concurrent", type=int, default=d.max_concurrent,
                   help=f"requests served at once; more get 503 (default: {d.max_concurrent})")
    add_logging_arguments(p, default_format="json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging_from_args(args, root_package="admission")
    settings = ServerSettings(address=args.address, port=args.port, cert_file=args.cert_file,
                              key_file=args.key_file, max_body=args.max_body_bytes, timeout=args.timeout,
                              max_concurrent=args.max_concurrent)
    try:
        server = AdmissionServer(settings, {VALIDATE_PATH: review}, tls_context(args.cert_file, args.key_file))
    except (OSError, ssl.SSLError) as err:
        log.error("cannot start: %s", err, extra={"port": args.port})
        return 1
    return serve_until_stopped(server, log, [VALIDATE_PATH])


if __name__ == "__main__":
    sys.exit(main())
