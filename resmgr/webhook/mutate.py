"""The admission logic of cri-resmgr-webhook as plain functions: AdmissionReview v1 in, JSONPatch out.

Kubelet passes only cgroup parameters to the runtime, so cri-resmgr cannot see memory requests
or extended resources. Like upstream's cri-resmgr-webhook, each pod gets the annotation
``intel.com/resources`` holding its containers' ``resources`` as JSON
(``{"initContainers": {name: {...}}, "containers": {name: {...}}}``), which
``resmgr.model.resources.annotated_requirements`` reads back.

The webhook never blocks a pod: anything it cannot annotate is allowed unchanged (and logged).
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

from resmgr.model.annotation_budget import RESOURCES_ANNOTATION
from resmgr.webhook_http import ADMISSION_API_VERSION, ADMISSION_KIND, BadReview, parse_review, review_answer

__all__ = ["ADMISSION_API_VERSION", "ADMISSION_KIND", "BadReview", "admission_response", "parse_review",
           "pod_patch", "resource_annotation"]

log = logging.getLogger("resmgr.webhook")

# The ResourceRequirements fields upstream copies (Go's omitempty drops the empty ones).
_REQUIREMENT_FIELDS = ("limits", "requests", "claims")


def _json_pointer_escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def container_requirements(container: dict[str, Any]) -> dict[str, Any]:
    """One container's ``resources``, with only the fields that are set."""
    resources = container.get("resources") or {}
    return {k: resources[k] for k in _REQUIREMENT_FIELDS if resources.get(k)}


def resource_annotation(pod: dict[str, Any]) -> str:
    """The annotation value for a pod: its (init) containers' resource requirements by name, as JSON."""
    spec = pod.get("spec") or {}
    value = {
        "initContainers": {c["name"]: container_requirements(c) for c in spec.get("initContainers") or []},
        "containers": {c["name"]: container_requirements(c) for c in spec.get("containers") or []},
    }
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def pod_patch(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """JSONPatch operations that set the annotation (creating the annotations map if the pod has none)."""
    ops: list[dict[str, Any]] = []
    if not isinstance((pod.get("metadata") or {}).get("annotations"), dict):
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    # "add" on an existing member replaces it (RFC 6902 4.1), so an UPDATE refreshes a stale value.
    ops.append({"op": "add", "path": "/metadata/annotations/" + _json_pointer_escape(RESOURCES_ANNOTATION),
                "value": resource_annotation(pod)})
    return ops


def _is_pod(request: dict[str, Any]) -> bool:
    resource = request.get("resource") or {}
    return (resource.get("group", "") == "" and resource.get("version") == "v1"
            and resource.get("resource") == "pods" and not request.get("subResource"))


def admission_response(request: dict[str, Any]) -> dict[str, Any]:
    """The AdmissionReview answering ``request``: allowed, with the patch when it is a pod."""
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    pod = request.get("object")
    # CREATE of a pod with generateName has no name yet.
    meta = (pod.get("metadata") if isinstance(pod, dict) else None) or {}
    where = {"uid": request["uid"], "namespace": request.get("namespace", ""),
             "pod": request.get("name") or meta.get("name") or meta.get("generateName", ""),
             "operation": request.get("operation", "")}
    if not _is_pod(request):
        log.warning("not a pod, admitted unchanged", extra={**where, "resource": request.get("resource")})
    elif not isinstance(pod, dict) or not isinstance(pod.get("spec"), dict):
        log.warning("request carries no pod object, admitted unchanged", extra=where)
    else:
        try:
            patch = pod_patch(pod)
        except (KeyError, TypeError, AttributeError) as err:  # a container without a name, a non-list ...
            log.warning("pod not annotated: %s", err, extra=where)
        else:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
            log.info("annotated pod", extra={**where, "annotation": patch[-1]["value"]})
    return review_answer(response)
