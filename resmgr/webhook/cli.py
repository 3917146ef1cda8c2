"""Command line of cri-resmgr-webhook."""

from __future__ import annotations

import argparse
import logging
import ssl
import sys

from resmgr.logsetup import setup_logging_from_args
from resmgr.options import add_logging_arguments
from resmgr.webhook.server import HEALTH_PATH, MUTATE_PATH, ServerSettings, WebhookServer, tls_context
from resmgr.webhook_http import add_server_arguments, serve_until_stopped, server_settings

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
    add_server_arguments(p, d)
    add_logging_arguments(p, default_format="json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging_from_args(args, root_package="resmgr")
    settings = server_settings(args)
    try:
        server = WebhookServer(settings, tls_context(args.cert_file, args.key_file))
    except (OSError, ssl.SSLError) as err:
        log.error("cannot start: %s", err, extra={"port": args.port})
        return 1
    return serve_until_stopped(server, log, [MUTATE_PATH])


if __name__ == "__main__":
    sys.exit(main())
