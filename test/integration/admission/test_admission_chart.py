"""charts/gardener-extension-admission-cri-resmgr: both parts pass helm lint, render what Gardener's garden needs,
and a real kube-apiserver accepts everything they render (server-side dry run, strict field validation)."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import pytest
import yaml
from integration.extension.test_extension_charts import StrictLoader, check_no_go_chart_defects, helm

from admission.cli import VALIDATE_PATH, build_parser
from extension.webhook_certs import ensure_certs

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "gardener-extension-admission-cri-resmgr"
NAME = "gardener-extension-admission-cri-resmgr"
LABEL = "extensions.extensions.gardener.cloud/cri-resmgr-extension"


def admission_values(service_namespace: str = "garden") -> dict:
    """The one values document both parts take: the serving certificate for the Service's DNS names and its CA."""
    certs, _ = ensure_certs(None, [NAME, f"{NAME}.{service_namespace}", f"{NAME}.{service_namespace}.svc"])
    return {"webhook": {"caBundle": certs.ca_bundle.decode(), "tlsCert": certs.cert.decode(),
                        "tlsKey": certs.key.decode()}}


def render(tools, part: str, values: dict, namespace: str = "garden") -> list[dict]:
    text = helm(tools, "template", NAME, str(CHART / "charts" / part), "--namespace", namespace, values=values)
    return [d for d in yaml.load_all(text, Loader=StrictLoader) if d]


@pytest.mark.parametrize("part", ["application", "runtime"])
def test_helm_lint(tools, part):
    out = helm(tools, "lint", "--strict", str(CHART / "charts" / part), values=admission_values())
    assert "0 chart(s) failed" in out


def test_application_part_sends_only_shoots_with_the_extension(tools, seed_api):
    values = admission_values()
    docs = render(tools, "application", values, namespace="extension-admission-cri-resmgr")
    [vwc] = docs
    assert vwc["kind"] == "ValidatingWebhookConfiguration" and vwc["metadata"]["name"] == NAME
    [hook] = vwc["webhooks"]
    assert hook["objectSelector"] == {"matchLabels": {LABEL: "true"}}
    assert hook["rules"] == [{"apiGroups": ["core.gardener.cloud"], "apiVersions": ["*"],
                              "operations": ["CREATE", "UPDATE"], "resources": ["shoots"], "scope": "Namespaced"}]
    assert (hook["failurePolicy"], hook["sideEffects"], hook["matchPolicy"]) == ("Fail", "None", "Exact")
    assert hook["admissionReviewVersions"] == ["v1"]
    # The runtime part's Service, by the name the garden's gardener-apiserver resolves in the runtime cluster.
    assert hook["clientConfig"]["url"] == f"https://{NAME}.garden:443{VALIDATE_PATH}"
    assert base64.b64decode(hook["clientConfig"]["caBundle"]).decode() == values["webhook"]["caBundle"]
    r = seed_api.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-",
                         input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    assert r.stdout.count("(server dry run)") == len(docs)
    # A URL of the operator's choosing (the landscape's stand-in names a process).
    url = "https://127.0.0.1:10250/webhooks/cri-resmgr"
    [vwc] = render(tools, "application", {**values, "webhook": {**values["webhook"], "url": url}})
    assert vwc["webhooks"][0]["clientConfig"]["url"] == url


def test_application_part_requires_the_ca(tools):
    r = subprocess.run([tools.helm, "template", NAME, str(CHART / "charts" / "application")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "webhook.caBundle is required" in r.stderr


def test_runtime_part_serves_the_certificate_it_is_given(tools, seed_api):
    ns = "garden-admission-chart-test"
    seed_api.kubectl("apply", "-f", "-", input=json.dumps(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {
            "pod-security.kubernetes.io/enforce": "restricted"}}}))
    values = {**admission_values(ns),
              "gardener": {"runtimeCluster": {"priorityClassName": "gardener-garden-system-400"}}}
    docs = render(tools, "runtime", values, namespace=ns)
    check_no_go_chart_defects(docs)
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    assert set(by) == {("Deployment", NAME), ("Service", NAME), ("Secret", f"{NAME}-tls"), ("ServiceAccount", NAME),
                       ("PodDisruptionBudget", NAME)}
    deploy = by[("Deployment", NAME)]
    pod = deploy["spec"]["template"]
    [container] = pod["spec"]["containers"]
    assert container["command"] == [NAME]
    args = build_parser().parse_args(container["args"])  # the chart's flags are the program's
    assert (args.port, args.cert_file, args.key_file) == (10250, "/etc/admission-tls/tls.crt",
                                                          "/etc/admission-tls/tls.key")
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "https", "scheme": "HTTPS"}
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["spec"]["priorityClassName"] == "gardener-garden-system-400"
    assert deploy["metadata"]["labels"]["high-availability-config.resources.gardener.cloud/type"] == "server"
    secret = by[("Secret", f"{NAME}-tls")]
    assert base64.b64decode(secret["data"]["tls.crt"]).decode() == values["webhook"]["tlsCert"]
    assert pod["spec"]["volumes"][0]["secret"]["secretName"] == f"{NAME}-tls"
    assert "checksum/secret-tls" in pod["metadata"]["annotations"]
    service = by[("Service", NAME)]
    assert service["spec"]["ports"][0]["port"] == 443 and service["spec"]["ports"][0]["targetPort"] == 10250
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    # gardener-resource-manager admits the webhook callers to this port (the pods get no egress at all).
    assert json.loads(service["metadata"]["annotations"][
        "networking.resources.gardener.cloud/from-all-webhook-targets-allowed-ports"]) == [
        {"protocol": "TCP", "port": 10250}]
    pdb = by[("PodDisruptionBudget", NAME)]
    assert pdb["spec"]["selector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    assert by[("ServiceAccount", NAME)]["automountServiceAccountToken"] is False
    # Everything but the priority class (the runtime cluster's, not on this API server) is accepted; the pod
    # passes the restricted Pod Security level.
    pod["spec"].pop("priorityClassName")
    r = seed_api.kubectl("apply", "--dry-run=server", "--validate=strict", "-f", "-",
                         input=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))
    assert r.stdout.count("(server dry run)") == len(docs), r.stderr
    assert "would violate PodSecurity" not in r.stderr, r.stderr
