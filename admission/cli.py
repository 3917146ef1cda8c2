"""Command line of gardener-extension-admission-cri-resmgr."""

from __future__ import annotations

import argparse
import logging
import ssl
import sys

from admission.validate import SHOOT_LABEL, review
from resmgr.logsetup import setup_logging_from_args
from resmgr.options import add_logging_arguments
from resmgr.webhook_http import (
    HEALTH_PATH,
    AdmissionServer,
    ServerSettings,
    add_server_arguments,
    serve_until_stopped,
    server_settings,
    tls_context,
)

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
    add_server_arguments(p, d)
    add_logging_arguments(p, default_format="json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging_from_args(args, root_package="admission")
    settings = server_settings(args)
    try:
        server = AdmissionServer(settings, {VALIDATE_PATH: review}, tls_context(args.cert_file, args.key_file))
    except (OSError, ssl.SSLError) as err:
        log.error("cannot start: %s", err, extra={"port": args.port})
        return 1
    return serve_until_stopped(server, log, [VALIDATE_PATH])


if __name__ == "__main__":
    sys.exit(main())
