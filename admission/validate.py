"""The admission's decisions as plain functions: a Shoot's AdmissionReview request in, the answer out.

A Shoot that enables our extension (``spec.extensions[i]``, type cri-resmgr-extension, not disabled) has its
providerConfig checked by extension.shoot_config, the very check the extension's reconcile runs; a refusal
names the field path (``spec.extensions[0].providerConfig.configs.default: ...``). A Shoot without our
extension is allowed without looking further (the webhook's objectSelector keeps most of those from being sent
at all). On UPDATE an unchanged providerConfig is allowed without a check, as registry-cache's admission does
(pkg/admission/validator/cache/shoot.go): a Shoot admitted once is never blocked by a later, stricter version
of this check on an unrelated change, such as its deletion annotation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from extension import constants as c
from extension.errors import ConfigurationError
from extension.shoot_config import ShootConfig, check_shoot_config
from resmgr.webhook_http import review_answer

log = logging.getLogger("admission")

# Gardener's shoot label for enabled extension types (gardener v1.149.3 pkg/apis/core/v1beta1/constants/
# types_constants.go LabelExtensionExtensionTypePrefix), set by gardener-apiserver's ExtensionLabels admission
# plugin on every Shoot create and update (plugin/pkg/global/extensionlabels/admission.go addMetaDataLabelsShoot,
# for each type gardenerutils.ComputeEnabledTypesForKindExtensionShoot finds: listed and not disabled, or
# auto-enabled by a ControllerRegistration). That plugin mutates before any validating webhook runs.
SHOOT_LABEL = f"extensions.extensions.gardener.cloud/{c.EXTENSION_TYPE}"
SHOOT_GROUP = "core.gardener.cloud"

Checker = Callable[..., ShootConfig]


def find_extension(shoot: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """(index, entry) of our extension in ``spec.extensions`` when it is enabled there, else None."""
    extensions = (shoot.get("spec") or {}).get("extensions") or []
    if not isinstance(extensions, list):
        raise ConfigurationError("spec.extensions", "must be a list")
    for i, ext in enumerate(extensions):
        if isinstance(ext, dict) and ext.get("type") == c.EXTENSION_TYPE:
            # disabled: true turns off an extension a ControllerRegistration auto-enables: nothing is deployed.
            return None if ext.get("disabled") is True else (i, ext)
    return None


def worker_pools(shoot: dict[str, Any]) -> list[str]:
    provider = (shoot.get("spec") or {}).get("provider") or {}
    return [w["name"] for w in provider.get("workers") or [] if isinstance(w, dict) and isinstance(w.get("name"), str)]


def kubernetes_version(shoot: dict[str, Any]) -> str:
    """The Shoot's ``spec.kubernetes.version`` ("" when not set: the checks that need it are skipped)."""
    version = ((shoot.get("spec") or {}).get("kubernetes") or {}).get("version")
    return version if isinstance(version, str) else ""


def check_shoot(shoot: dict[str, Any], old: dict[str, Any] | None = None,
                check: Checker = check_shoot_config) -> list[str] | None:
    """None when the Shoot does not enable our extension or leaves its providerConfig as ``old`` had it;
    otherwise the warnings for the shoot owner. ConfigurationError (the field path under the Shoot) refuses."""
    found = find_extension(shoot)
    if found is None:
        return None
    i, ext = found
    raw = ext.get("providerConfig")
    if old is not None:
        before = find_extension(old)
        if before is not None and before[1].get("providerConfig") == raw:
            return None
    checked = check(raw, where=f"spec.extensions[{i}].providerConfig", shoot_pools=worker_pools(shoot),
                    kubernetes_version=kubernetes_version(shoot))
    return list(checked.warnings)


def _is_shoot(request: dict[str, Any]) -> bool:
    resource = request.get("resource") or {}
    return (resource.get("group") == SHOOT_GROUP and resource.get("resource") == "shoots"
            and not request.get("subResource"))


def review(request: dict[str, Any], check: Checker = check_shoot_config) -> dict[str, Any]:
    """The AdmissionReview answering ``request`` (parsed by resmgr.webhook_http.parse_review)."""
    response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
    obj, old = request.get("object"), request.get("oldObject")
    meta = (obj.get("metadata") if isinstance(obj, dict) else None) or {}
    where = {"uid": request["uid"], "namespace": request.get("namespace") or meta.get("namespace", ""),
             "shoot": request.get("name") or meta.get("name", ""), "operation": request.get("operation", "")}
    if not _is_shoot(request) or request.get("operation") not in ("CREATE", "UPDATE"):
        # Only Shoots' CREATE and UPDATE are registered; anything else is not ours to judge.
        log.warning("not a Shoot create or update, allowed", extra={**where, "resource": request.get("resource")})
        return review_answer(response)
    if not isinstance(obj, dict):
        return review_answer(_denied(response, "the request carries no Shoot object"))
    try:
        warnings = check_shoot(obj, old if isinstance(old, dict) else None, check)
    except ConfigurationError as err:
        log.info("refused shoot", extra={**where, "error": str(err)})
        return review_answer(_denied(response, str(err)))
    if warnings is None:
        log.debug("allowed without a check", extra=where)
        return review_answer(response)
    if warnings:
        response["warnings"] = warnings
    log.info("allowed shoot", extra={**where, "warnings": len(warnings)})
    return review_answer(response)


def _denied(response: dict[str, Any], message: str) -> dict[str, Any]:
    # 422 Invalid, as the API server answers a field's validation error; the API server shows the message as
    # `admission webhook "<name>" denied the request: <message>`.
    return {**response, "allowed": False, "status": {"code": 422, "reason": "Invalid", "message": message}}
