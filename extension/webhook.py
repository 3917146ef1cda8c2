"""cri-resmgr-webhook in the shoot: the installation chart's ``webhook`` values for providerConfig.webhook.enabled.

Enabled: the certificates come from (or are created in) the seed Secret and go into the chart
(templates/webhook.yaml renders the Deployment, Service, PodDisruptionBudget, its TLS Secret and the
MutatingWebhookConfiguration). Disabled: the chart renders none of it, so the ManagedResource drops
those objects from the shoot, and the seed Secret is deleted.
"""

from __future__ import annotations

from typing import Any

from extension import constants as c
from extension import webhook_certs
from extension.gardener.kube import Apis

SERVICE_NAME = "cri-resmgr-webhook"
DISABLED: dict[str, Any] = {"enabled": False}


def chart_values(apis: Apis, namespace: str, enabled: bool,
                 rotation: webhook_certs.CARotation = webhook_certs.NO_ROTATION) -> dict[str, Any]:
    """The chart's ``webhook`` values; creates, renews (also with the shoot's CA ``rotation``) or deletes the
    certificates as a side effect."""
    if not enabled:
        webhook_certs.delete_secret(apis, namespace)
        return dict(DISABLED)
    return values_from_certs(webhook_certs.reconcile_secret(apis, namespace, service_dns_names(), rotation=rotation))


def service_dns_names() -> list[str]:
    return webhook_certs.service_dns_names(SERVICE_NAME, c.SHOOT_SYSTEM_NAMESPACE)


def values_from_certs(certs: webhook_certs.WebhookCerts) -> dict[str, Any]:
    return {"enabled": True, "tlsCert": certs.cert.decode(), "tlsKey": certs.key.decode(),
            "caBundle": certs.ca_bundle.decode()}
