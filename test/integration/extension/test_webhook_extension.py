"""providerConfig.webhook.enabled end to end on the seed side: the rendered objects and their wiring (accepted by
a real kube-apiserver), the certificates kept in a seed Secret across reconciles, and removal on disable."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import subprocess
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from integration.extension.extension_operator_process import SeedClient

from extension import webhook, webhook_certs
from extension.actuator import Actuator, ActuatorSettings
from extension.gardener.cluster import ClusterInfo
from extension.gardener.kube import Apis

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
INSTALL_CHART = REPO / "charts" / "internal" / "cri-resmgr-installation"
WEBHOOK_KINDS = {"MutatingWebhookConfiguration", "Deployment", "Service", "PodDisruptionBudget", "ServiceAccount"}


def cluster(name: str) -> ClusterInfo:
    return ClusterInfo(name=name, kubernetes_version="1.31.1", hibernated=False, worker_pools=("worker",),
                       shoot_deleting=False, shoot_failed=False, force_deletion=False)


def render(tools, **values) -> list[dict]:
    base = {"images": {"installer": "reg/installer:v1", "agent": "reg/agent:v1"}}
    r = subprocess.run([tools.helm, "template", "cri-resmgr-installation", str(INSTALL_CHART), "--namespace",
                        "kube-system", "--values", "-"], input=json.dumps({**base, **values}),
                       capture_output=True, text=True, timeout=120, check=True)
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def webhook_objects(docs: list[dict]) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs
            if d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "cri-resmgr-webhook"}


def test_rendered_webhook_is_wired_and_accepted(tools, seed_api):
    certs, _ = webhook_certs.ensure_certs(None, webhook.service_dns_names())
    docs = render(tools, webhook=webhook.values_from_certs(certs))
    objs = webhook_objects(docs)
    assert {kind for kind, _ in objs} == WEBHOOK_KINDS | {"Secret"}
    mwc = objs[("MutatingWebhookConfiguration", "cri-resmgr-webhook")]["webhooks"][0]
    deploy = objs[("Deployment", "cri-resmgr-webhook")]
    service = objs[("Service", "cri-resmgr-webhook")]
    tls = objs[("Secret", "cri-resmgr-webhook-tls")]
    pod = deploy["spec"]["template"]
    container = pod["spec"]["containers"][0]

    assert mwc["failurePolicy"] == "Ignore" and mwc["sideEffects"] == "None" and mwc["timeoutSeconds"] <= 10
    assert mwc["rules"][0]["resources"] == ["pods"] and mwc["admissionReviewVersions"] == ["v1"]
    assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]} in \
        mwc["namespaceSelector"]["matchExpressions"]
    # The objectSelector leaves out the webhook's own pods.
    [own] = mwc["objectSelector"]["matchExpressions"]
    assert own["operator"] == "NotIn" and pod["metadata"]["labels"][own["key"]] in own["values"]
    # MWC -> Service -> pods -> container port -> the server's --port, and the path the server serves.
    ref = mwc["clientConfig"]["service"]
    assert (ref["name"], ref["namespace"], ref["path"]) == (service["metadata"]["name"], "kube-system", "/mutate")
    [port] = service["spec"]["ports"]
    assert port["port"] == ref["port"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    # kube-apiserver (in the seed, through the VPN) may reach the pods past gardenlet's shoot NetworkPolicies.
    assert pod["metadata"]["labels"]["networking.gardener.cloud/from-seed"] == "allowed"
    [cport] = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    assert f"--port={cport['containerPort']}" in container["command"]
    assert container["command"][0] == "cri-resmgr-webhook" and container["image"] == "reg/agent:v1"
    assert pod["spec"]["volumes"][0]["secret"]["secretName"] == tls["metadata"]["name"]
    # The non-root server can read its key (found on the landscape: without fsGroup, "Permission denied").
    # fsGroup makes the files the pod's group, which the process always has.
    mode = pod["spec"]["volumes"][0]["secret"]["defaultMode"]
    assert container["securityContext"]["runAsUser"] != 0
    assert mode & 0o004 or (mode & 0o040 and pod["spec"].get("securityContext", {}).get("fsGroup")), mode
    assert objs[("PodDisruptionBudget", "cri-resmgr-webhook")]["spec"]["selector"]["matchLabels"].items() \
        <= pod["metadata"]["labels"].items() and deploy["spec"]["replicas"] == 2
    # The certificate the pods serve is for the name the API server dials and chains to the caBundle.
    served = x509.load_pem_x509_certificate(base64.b64decode(tls["data"]["tls.crt"]))
    sans = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{ref['name']}.{ref['namespace']}.svc" in sans.get_values_for_type(x509.DNSName)
    [ca] = x509.load_pem_x509_certificates(base64.b64decode(mwc["clientConfig"]["caBundle"]))
    served.verify_directly_issued_by(ca)
    assert served.not_valid_before_utc < dt.datetime.now(dt.UTC) < served.not_valid_after_utc

    text = "\n---\n".join(yaml.safe_dump(d) for d in objs.values())
    r = seed_api.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-", input=text)
    assert r.stdout.count("(server dry run)") == len(objs)

    assert webhook_objects(render(tools)) == {}
    assert webhook_objects(render(tools, webhook=webhook.values_from_certs(certs),
                                  installer={"mode": "uninstall"})) == {}
    one = webhook_objects(render(tools, webhook={**webhook.values_from_certs(certs), "replicas": 1}))
    assert ("PodDisruptionBudget", "cri-resmgr-webhook") not in one


def test_enable_keeps_certificates_across_reconciles_and_disable_removes_everything(tools, seed_api):
    seed = SeedClient(seed_api)
    ns = seed.new_namespace("shoot--webhook")
    apis = Apis(seed_api.api_client())
    actuator = Actuator(apis, ActuatorSettings(chart_dir=INSTALL_CHART, images_file=REPO / "charts" / "images.yaml",
                                               helm=tools.helm))
    enabled = {"metadata": {"name": "cri-resmgr", "namespace": ns}, "spec": {"providerConfig": {
        "webhook": {"enabled": True}}}}

    def stored() -> dict[str, str] | None:
        found = apis.core.list_namespaced_secret(ns, field_selector=f"metadata.name={webhook_certs.SECRET_NAME}")
        return found.items[0].data if found.items else None

    def shoot_webhook_objects() -> dict:
        return webhook_objects(seed.rendered_objects(ns))

    actuator.reconcile(enabled, cluster(name=ns))
    first = stored()
    assert first is not None
    rendered = shoot_webhook_objects()
    assert {kind for kind, _ in rendered} == WEBHOOK_KINDS | {"Secret"}
    bundle = rendered[("MutatingWebhookConfiguration", "cri-resmgr-webhook")]["webhooks"][0]["clientConfig"]
    assert base64.b64decode(bundle["caBundle"]) == base64.b64decode(first["ca.crt"])

    actuator.reconcile(enabled, cluster(name=ns))
    assert stored() == first, "a reconcile must not rotate good certificates"

    # Renewal before expiry goes through the same Secret (as a reconcile 11 months later would).
    later = dt.datetime.now(dt.UTC) + webhook_certs.SERVING_VALIDITY - webhook_certs.SERVING_RENEW_BEFORE / 2
    webhook_certs.reconcile_secret(apis, ns, webhook.service_dns_names(), later)
    renewed = stored()
    assert renewed["ca.crt"] == first["ca.crt"] and renewed["tls.crt"] != first["tls.crt"]

    # The shoot's CA rotation: a new CA while Preparing (both trusted by the API server), the old one gone once
    # Completing, all in what gardener-resource-manager applies to the shoot.
    def rendered_bundle() -> list[x509.Certificate]:
        mwc = shoot_webhook_objects()[("MutatingWebhookConfiguration", "cri-resmgr-webhook")]
        return x509.load_pem_x509_certificates(base64.b64decode(mwc["webhooks"][0]["clientConfig"]["caBundle"]))

    started = "2026-03-01T10:00:00Z"
    actuator.reconcile(enabled, dataclasses.replace(cluster(name=ns), ca_rotation_phase="Preparing",
                                                    ca_rotation_started=started))
    preparing = stored()
    assert preparing["ca.crt"] != renewed["ca.crt"] and preparing["previous-ca.crt"] == renewed["ca.crt"]
    assert len(rendered_bundle()) == 2
    actuator.reconcile(enabled, dataclasses.replace(cluster(name=ns), ca_rotation_phase="Completing",
                                                    ca_rotation_started=started))
    [ca] = rendered_bundle()
    assert ca.public_bytes(serialization.Encoding.PEM) == base64.b64decode(preparing["ca.crt"])

    actuator.reconcile({**enabled, "spec": {}}, cluster(name=ns))
    assert stored() is None
    assert shoot_webhook_objects() == {}
