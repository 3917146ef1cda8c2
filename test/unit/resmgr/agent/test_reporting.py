"""What the agent writes back: node annotations and Adjustment status patches."""

from __future__ import annotations

from resmgr.agent.reporting import (
    CONFIG_ERROR_ANNOTATION,
    CONFIG_INFO_ANNOTATION,
    CONFIG_SOURCE_ANNOTATION,
    adjustment_status_patch,
    config_annotations,
)
from resmgr.agent.selection import Selection

SEL = Selection(name="cri-resmgr-config.default", resource_version="42", data={})


def test_success_names_the_configmap_and_clears_the_error():
    assert config_annotations(SEL, "") == {CONFIG_SOURCE_ANNOTATION: "kube-system/cri-resmgr-config.default@42",
                                           CONFIG_ERROR_ANNOTATION: None, CONFIG_INFO_ANNOTATION: None}


def test_information_is_its_own_annotation():
    ann = config_annotations(SEL, "", "accepted, not implemented by this cri-resmgr, ignored: rdt")
    assert ann[CONFIG_SOURCE_ANNOTATION] == "kube-system/cri-resmgr-config.default@42"
    assert ann[CONFIG_INFO_ANNOTATION] == "kube-system/cri-resmgr-config.default@42: accepted, not implemented " \
                                          "by this cri-resmgr, ignored: rdt"
    assert ann[CONFIG_ERROR_ANNOTATION] is None
    forced = config_annotations(SEL, "", "force config in effect; dynamic configs not applied", applied=False)
    assert CONFIG_SOURCE_ANNOTATION not in forced and forced[CONFIG_ERROR_ANNOTATION] is None
    assert forced[CONFIG_INFO_ANNOTATION].endswith("force config in effect; dynamic configs not applied")


def test_error_keeps_the_source_of_what_is_really_active():
    ann = config_annotations(SEL, "invalid config field policy.X: unknown field")
    assert CONFIG_SOURCE_ANNOTATION not in ann
    assert ann[CONFIG_ERROR_ANNOTATION] == ("kube-system/cri-resmgr-config.default@42: "
                                            "invalid config field policy.X: unknown field")


def test_no_configmap():
    assert config_annotations(None, "") == {CONFIG_SOURCE_ANNOTATION: "none", CONFIG_ERROR_ANNOTATION: None,
                                            CONFIG_INFO_ANNOTATION: None}


def test_status_patch_sets_new_errors_and_removes_stale_ones():
    current = {"status": {"nodes": {"n1": {"errors": {"prod/a/b": "old", "spec": "old spec error"}},
                                    "n2": {"errors": {"x": "y"}}}}}
    patch = adjustment_status_patch("n1", {"error": "", "container_errors": {"prod/c/d": "conflicts"}}, current)
    assert patch == {"status": {"nodes": {"n1": {"errors": {"prod/c/d": "conflicts", "prod/a/b": None,
                                                            "spec": None}}}}}
    patch = adjustment_status_patch("n1", {"error": "bad spec", "container_errors": {}}, None)
    assert patch == {"status": {"nodes": {"n1": {"errors": {"spec": "bad spec"}}}}}
