"""The webhook's admission logic: the annotation, the JSONPatch, and cri-resmgr reading the result back."""

from __future__ import annotations

import base64
import json

import jsonpatch  # RFC 6902 as the API server applies it (a kopf dependency)
import pytest
from unit.resmgr.cri_requests import create_request, pod_config

from resmgr.model.annotation_budget import RESOURCES_ANNOTATION
from resmgr.model.resources import QOS_BURSTABLE, annotated_requirements, container_from_create_request
from resmgr.webhook.mutate import BadReview, admission_response, parse_review, pod_patch, resource_annotation

POD = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "db", "namespace": "shop"},
    "spec": {
        "initContainers": [{"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}],
        "containers": [
            {"name": "main", "image": "busybox", "resources": {
                "requests": {"cpu": "1500m", "memory": "1Gi", "example.com/gpu": "2"},
                "limits": {"cpu": "2", "memory": "2Gi", "example.com/gpu": "2"}}},
            {"name": "side", "image": "busybox"},
        ],
    },
}


def review(obj, *, resource="pods", uid="u-1", operation="CREATE"):
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "operation": operation, "namespace": "shop", "object": obj,
                        "resource": {"group": "", "version": "v1", "resource": resource}}}


def patched(pod, response):
    assert response["patchType"] == "JSONPatch"
    return jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))


def test_annotation_holds_each_containers_requirements_in_upstreams_shape():
    value = json.loads(resource_annotation(POD))
    assert value == {
        "initContainers": {"init": {"requests": {"cpu": "100m"}}},
        "containers": {"main": POD["spec"]["containers"][0]["resources"], "side": {}},
    }


def test_patch_creates_the_annotations_map_when_missing_and_keeps_existing_ones():
    ops = pod_patch(POD)
    assert ops[0] == {"op": "add", "path": "/metadata/annotations", "value": {}}
    assert ops[1]["path"] == "/metadata/annotations/intel.com~1resources"
    annotated = {**POD, "metadata": {**POD["metadata"], "annotations": {"keep": "me"}}}
    out = jsonpatch.apply_patch(annotated, pod_patch(annotated))
    assert out["metadata"]["annotations"]["keep"] == "me"
    assert out["metadata"]["annotations"][RESOURCES_ANNOTATION] == resource_annotation(POD)


def test_update_replaces_a_stale_annotation():
    stale = {**POD, "metadata": {**POD["metadata"], "annotations": {RESOURCES_ANNOTATION: "{}"}}}
    out = jsonpatch.apply_patch(stale, pod_patch(stale))
    assert json.loads(out["metadata"]["annotations"][RESOURCES_ANNOTATION])["containers"]["main"]


def test_response_answers_the_uid_allows_and_patches():
    answer = admission_response(parse_review(json.dumps(review(POD)).encode()))
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == "u-1" and response["allowed"] is True
    assert patched(POD, response)["metadata"]["annotations"][RESOURCES_ANNOTATION] == resource_annotation(POD)


def test_what_it_cannot_annotate_is_allowed_unchanged():
    for request in (review(POD, resource="services")["request"],
                    review(None)["request"],
                    review({"spec": {"containers": [{"image": "no-name"}]}})["request"]):
        response = admission_response(request)["response"]
        assert response == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize("body", [b"not json", b"[]", json.dumps({"kind": "AdmissionReview"}).encode(),
                                  json.dumps({**review(POD), "apiVersion": "admission.k8s.io/v1beta1"}).encode(),
                                  json.dumps({**review(POD), "request": {"object": POD}}).encode()])
def test_bad_reviews_are_refused(body):
    with pytest.raises(BadReview):
        parse_review(body)


def test_cri_resmgr_reads_the_annotation_back():
    """Round trip: the annotation the API server stores is what the resource manager estimates from."""
    pod = patched(POD, admission_response(review(POD)["request"])["response"])
    annotations = pod["metadata"]["annotations"]
    assert set(annotated_requirements(annotations)) == {"init", "main", "side"}
    sandbox = pod_config("db", namespace="shop", qos="burstable", annotations=annotations)
    main = container_from_create_request(create_request("pod-1", sandbox, "main", cpu_milli=1500), None)
    assert (main.request_milli, main.limit_milli, main.memory_limit) == (1500, 2000, 2 << 30)
    assert main.memory_request == 1 << 30
    assert main.extended_resources == {"example.com/gpu": 2}
    assert main.qos == QOS_BURSTABLE
    side = container_from_create_request(create_request("pod-1", sandbox, "side"), None)
    assert (side.request_milli, side.memory_request, side.extended_resources) == (0, 0, {})
