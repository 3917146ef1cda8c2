"""gardener-extension-admission-cri-resmgr's decisions as plain functions: AdmissionReview request in, answer out."""

from __future__ import annotations

import json

import pytest

from admission.validate import SHOOT_LABEL, check_shoot, find_extension, review
from extension.errors import ConfigurationError
from extension.shoot_config import check_shoot_config
from resmgr.webhook_http import BadReview, parse_review

GOOD_DEFAULT = "policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 750m\n"
BAD_DEFAULT = "policy:\n  Active: no-such-policy\n"


def shoot(*extensions: dict, pools: tuple[str, ...] = ("pool-a",), version: str = "1.33.4") -> dict:
    return {"apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
            "metadata": {"name": "s1", "namespace": "garden-dev", "labels": {SHOOT_LABEL: "true"}},
            "spec": {"extensions": list(extensions), "kubernetes": {"version": version},
                     "provider": {"type": "local", "workers": [{"name": p} for p in pools]}}}


def ours(provider_config: dict | None = None, **more) -> dict:
    ext = {"type": "cri-resmgr-extension", **more}
    if provider_config is not None:
        ext["providerConfig"] = provider_config
    return ext


def pc(**configs: str) -> dict:
    return {"apiVersion": "cri-resmgr.extensions.gardener.cloud/v1alpha1", "kind": "CriResMgrConfig",
            "configs": configs}


def request(obj: dict, operation: str = "CREATE", old: dict | None = None, **changes) -> dict:
    req = {"uid": "u-1", "kind": {"group": "core.gardener.cloud", "version": "v1beta1", "kind": "Shoot"},
           "resource": {"group": "core.gardener.cloud", "version": "v1beta1", "resource": "shoots"},
           "namespace": "garden-dev", "name": "s1", "operation": operation, "object": obj, "oldObject": old}
    return {**req, **changes}


def never_called(*args, **kwargs):
    raise AssertionError("the validator was called")


def test_a_bad_config_is_denied_naming_the_field_path():
    answer = review(request(shoot({"type": "other"}, ours(pc(default=BAD_DEFAULT)))))
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == "u-1" and response["allowed"] is False
    assert response["status"]["code"] == 422
    message = response["status"]["message"]
    assert message.startswith("spec.extensions[1].providerConfig.configs.default.policy.Active: "), message
    assert "no-such-policy" in message


@pytest.mark.parametrize("provider_config, path", [
    ({"configs": {"default": GOOD_DEFAULT}, "colour": "blue"}, "spec.extensions[0].providerConfig.colour"),
    ({"kind": "Other"}, "spec.extensions[0].providerConfig.kind"),
    ({"configs": {"policy": GOOD_DEFAULT}}, "spec.extensions[0].providerConfig.configs.policy"),
    ({"configs": {"EXTRA_OPTIONS": "--no-such-flag"}}, "spec.extensions[0].providerConfig.configs.EXTRA_OPTIONS"),
    ({"webhook": {"enabled": "yes"}}, "spec.extensions[0].providerConfig.webhook.enabled"),
    ({"workerPools": ["a", "a"]}, "spec.extensions[0].providerConfig.workerPools"),
    ({"nodeSelector": {"bad key!": "x"}}, "spec.extensions[0].providerConfig.nodeSelector"),
    ("text", "spec.extensions[0].providerConfig"),
])
def test_every_kind_of_error_names_its_path(provider_config, path):
    response = review(request(shoot(ours(provider_config))))["response"]
    assert response["allowed"] is False
    assert response["status"]["message"].startswith(path + ": "), response["status"]["message"]


def test_the_same_check_as_the_reconcile():
    """One implementation: the refusal is the ConfigurationError the extension's own check raises."""
    raw = pc(default=BAD_DEFAULT)
    with pytest.raises(ConfigurationError) as err:
        check_shoot_config(raw, where="spec.extensions[0].providerConfig")
    assert review(request(shoot(ours(raw))))["response"]["status"]["message"] == str(err.value)


def test_a_good_config_is_allowed_with_warnings_for_missing_pools():
    raw = {**pc(default=GOOD_DEFAULT, **{"pool.gone": GOOD_DEFAULT}), "workerPools": ["pool-a", "nope"]}
    response = review(request(shoot(ours(raw))))["response"]
    assert response["allowed"] is True and "status" not in response
    assert response["warnings"] == [
        "spec.extensions[0].providerConfig.workerPools[1]: worker pool 'nope' does not exist in the shoot "
        "(pools: pool-a); it selects no node",
        "spec.extensions[0].providerConfig.configs.pool.gone: worker pool 'gone' does not exist in the shoot "
        "(pools: pool-a); no node gets this config"]


def test_no_provider_config_is_allowed():
    assert review(request(shoot(ours())))["response"] == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize("obj", [
    shoot(),
    shoot({"type": "shoot-cert-service", "providerConfig": {"anything": 1}}),
    shoot(ours(pc(default=BAD_DEFAULT), disabled=True)),
    {"metadata": {"name": "s1"}, "spec": {}},
])
def test_a_shoot_without_our_extension_is_allowed_without_the_validator(obj):
    assert review(request(obj), check=never_called)["response"] == {"uid": "u-1", "allowed": True}


def test_an_update_that_keeps_the_provider_config_is_not_checked_again():
    raw = pc(default=BAD_DEFAULT)  # admitted by an older, laxer version, say
    old = shoot(ours(raw))
    new = shoot({"type": "other"}, ours(raw))  # moved, unchanged
    assert review(request(new, "UPDATE", old), check=never_called)["response"]["allowed"] is True
    changed = shoot(ours(pc(default=BAD_DEFAULT + "  ReservedResources:\n    CPU: 1\n")))
    assert review(request(changed, "UPDATE", old))["response"]["allowed"] is False
    # Enabling it on an update is checked like a create.
    assert review(request(old, "UPDATE", shoot()))["response"]["allowed"] is False


def test_other_requests_are_allowed():
    other = request(shoot(ours(pc(default=BAD_DEFAULT))), resource={"group": "", "version": "v1",
                                                                     "resource": "pods"})
    assert review(other, check=never_called)["response"]["allowed"] is True
    delete = request(shoot(ours(pc(default=BAD_DEFAULT))), "DELETE")
    assert review(delete, check=never_called)["response"]["allowed"] is True


def test_a_request_without_an_object_is_denied():
    response = review(request(None))["response"]  # type: ignore[arg-type]
    assert response["allowed"] is False and "no Shoot object" in response["status"]["message"]


def test_a_malformed_extensions_list_is_denied_naming_it():
    bad = {"metadata": {"name": "s1"}, "spec": {"extensions": {"type": "cri-resmgr-extension"}}}
    response = review(request(bad))["response"]
    assert response["status"]["message"] == "spec.extensions: must be a list"


def test_find_extension_takes_the_first_of_ours():
    s = shoot({"type": "a"}, ours(pc()), ours(pc(default=BAD_DEFAULT)))
    assert find_extension(s) == (1, ours(pc()))


def test_check_shoot_passes_the_shoot_pools_and_path():
    seen = {}

    def spy(raw, **kwargs):
        seen.update(kwargs, raw=raw)
        return check_shoot_config(raw, **kwargs)
    assert check_shoot(shoot(ours(pc()), pools=("p1", "p2")), check=spy) == []
    assert seen == {"raw": pc(), "where": "spec.extensions[0].providerConfig", "shoot_pools": ["p1", "p2"],
                    "kubernetes_version": "1.33.4"}


def test_a_mode_the_shoots_kubernetes_cannot_run_is_refused_naming_the_field():
    nri = {**pc(), "mode": "nri"}
    response = review(request(shoot(ours(nri), version="1.29.9")))["response"]
    assert response["allowed"] is False
    assert response["status"]["message"].startswith("spec.extensions[0].providerConfig.mode: mode nri needs Kubernetes")
    assert review(request(shoot(ours(nri), version="1.30.0")))["response"]["allowed"] is True


@pytest.mark.parametrize("body, needle", [
    (b"not json", "body is not JSON"),
    (b"[]", "not a JSON object"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}).encode(),
     "expected admission.k8s.io/v1 AdmissionReview"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}).encode(),
     "no request with a uid"),
])
def test_a_malformed_review_is_a_clear_error(body, needle):
    with pytest.raises(BadReview, match=needle):
        parse_review(body)
