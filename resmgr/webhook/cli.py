"""Command line of cri-resmgr-webhook."""

from __future__ import annotations

import argparse
import logging
import ssl
import sys

from resmgr.logsetup import setup_logging_from_args
from resmgr.options import add_logging_arguments
from resmgr.webhook.server import HEALTH_PATH, MUTATE_PATH, ServerSettings, WebhookServer, tls_context
from resmgr.webhook_http import serve_until_stopped

log = logging.getLogger("resmgr.webhook")

DESCRIPTION = f"""\
cri-resmgr-webhook is a Kubernetes mutating admission webhook. For every pod it is
sent it adds the annotation intel.com/resources holding the pod's containers' resource
requirements (requests, limits) as JSON, as cri-resource-manager's upstream webhook
does. cri-resmgr reads that annotation: without it, it sees only the cgroup parameters
kubelet passes and cannot know memory requests or extended resources.

It serves HTTPS: POST {MUTATE_PATH} (AdmissionReview admission.k8s.io/v1, answered
with a JSONPatch) and GET {HEALTH_PATH}. It never denies a pod: what it cannot
annotate is admitted unchanged and logged. The certificate is read once at start.
"""

EPILOG = """\
examples:
  cri-resmgr-webhook --cert-file /etc/webhook/tls.crt --key-file /etc/webhook/tls.key
  cri-resmgr-webhook --port 9443 --cert-file tls.crt --key-file tls.key --log-format json
"""


def build_parser() -> argparse.ArgumentParser:
    d = ServerSettings()
    p = argparse.ArgumentParser(prog="cri-resmgr-webhook", description=DESCRIPTION, epilog=EPILOG,
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
    setup_logging_from_args(args, root_package="resmgr")
    settings = ServerSettings(address=args.address, port=args.port, cert_file=args.cert_file,
                              key_file=args.key_file, max_body=args.max_body_bytes, timeout=args.timeout,
                              max_concurrent=args.max_concurrent)
    try:
        server = WebhookServer(settings, tls_context(args.cert_file, args.key_file))
    except (OSError, ssl.SSLError) as err:
        log.error("cannot start: %s", err, extra={"port": args.port})
        return 1
    return serve_until_stopped(server, log, [MUTATE_PATH])


if __name__ == "__main__":
    sys.exit(main())
