"""cri-resmgr-webhook behind the real kube-apiserver: pods created through the API get intel.com/resources,
and cri-resmgr's estimation from that annotation sees memory requests and extended resources."""

from __future__ import annotations

import base64
import json
import uuid

import pytest
from fixtures.tls_server import start_tls_server
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from unit.resmgr.cri_requests import create_request, pod_config

from devland.waiting import wait_until
from resmgr.model.annotation_budget import RESOURCES_ANNOTATION
from resmgr.model.resources import container_from_create_request

pytestmark = pytest.mark.integration

WEBHOOK_NAME = "cri-resmgr-webhook.test.local"


def pod(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "containers": [{"name": "main", "image": "busybox", "resources": {
            "requests": {"cpu": "250m", "memory": "300Mi", "example.com/fpga": "3"},
            "limits": {"cpu": "1", "memory": "1Gi", "example.com/fpga": "3"}}}]}}


@pytest.fixture
def webhook(tmp_path):
    server = start_tls_server("cri-resmgr-webhook", tmp_path)
    try:
        yield server.proc, server.port, server.certs
    finally:
        server.proc.stop()


def test_pod_created_through_the_api_is_annotated_and_estimated_from_it(seed_api, webhook):
    proc, port, certs = webhook
    api = seed_api.api_client()
    core, admission = client.CoreV1Api(api), client.AdmissionregistrationV1Api(api)
    ns = f"webhook-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": ns}})
    # No controller-manager here: the ServiceAccount admission plugin needs the default account to exist.
    core.create_namespaced_service_account(ns, {"metadata": {"name": "default"}})
    config_name = f"cri-resmgr-test-{ns}"
    # Only this test's namespace: the seed API is shared by the whole session. failurePolicy Fail here so a
    # broken webhook shows as an error instead of an unannotated pod (the extension renders Ignore).
    admission.create_mutating_webhook_configuration({
        "metadata": {"name": config_name},
        "webhooks": [{
            "name": WEBHOOK_NAME, "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "timeoutSeconds": 5,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                       "resources": ["pods"]}],
            "clientConfig": {"url": f"https://localhost:{port}/mutate",
                             "caBundle": base64.b64encode(certs.ca_bundle).decode()},
        }]})
    try:
        # The API server picks the configuration up asynchronously: dry-run creations until it mutates.
        def mutated() -> tuple[bool, str]:
            try:
                out = core.create_namespaced_pod(ns, pod("probe"), dry_run="All")
            except ApiException as err:
                return False, f"dry run failed: {err.status} {err.reason}"
            return RESOURCES_ANNOTATION in (out.metadata.annotations or {}), "no annotation yet"
        wait_until("webhook registered", mutated, timeout=60, interval=0.5)

        core.create_namespaced_pod(ns, pod("db"))
        stored = core.read_namespaced_pod("db", ns)
        annotations = stored.metadata.annotations
        value = json.loads(annotations[RESOURCES_ANNOTATION])
        assert value["containers"]["main"]["requests"] == {"cpu": "250m", "memory": "300Mi", "example.com/fpga": "3"}
        assert value["initContainers"] == {}

        # What cri-resmgr makes of the CreateContainer kubelet would send for this pod.
        sandbox = pod_config("db", namespace=ns, qos="burstable", annotations=annotations)
        info = container_from_create_request(create_request("sandbox-db", sandbox, "main", cpu_milli=250), None)
        assert (info.request_milli, info.limit_milli) == (250, 1000)
        assert info.memory_request == 300 << 20 and info.memory_limit == 1 << 30
        assert info.extended_resources == {"example.com/fpga": 3}

        lines = [json.loads(line) for line in proc.log_path.read_text().splitlines() if line.startswith("{")]
        assert any(e["msg"] == "annotated pod" and e.get("pod") == "db" and e.get("namespace") == ns
                   and e.get("operation") == "CREATE" for e in lines), proc.log_tail()
    finally:
        admission.delete_mutating_webhook_configuration(config_name)
        core.delete_namespace(ns)
