"""The HTTPS server of cri-resmgr-webhook: POST /mutate (AdmissionReview v1), GET /healthz.

The server itself (TLS, bounds, routing) is resmgr/webhook_http.py, shared with the garden's admission
(admission/); this module binds /mutate to the pod annotation (resmgr/webhook/mutate.py). With the webhook's
failurePolicy Ignore, a refused or failed request admits the pod unannotated.
"""

from __future__ import annotations

import ssl

from resmgr.webhook.mutate import admission_response
from resmgr.webhook_http import HEALTH_PATH, AdmissionServer, ServerSettings, tls_context

__all__ = ["HEALTH_PATH", "MUTATE_PATH", "ServerSettings", "WebhookServer", "tls_context"]

MUTATE_PATH = "/mutate"


class WebhookServer(AdmissionServer):
    """cri-resmgr-webhook's server: the shared AdmissionServer with POST /mutate."""

    def __init__(self, settings: ServerSettings, context: ssl.SSLContext | None = None) -> None:
        super().__init__(settings, {MUTATE_PATH: admission_response}, context)
