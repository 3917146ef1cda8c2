"""What the agent writes back: node annotations and Adjustment status patches."""

from __future__ import annotations

from resmgr.agent.reporting import (
    CONFIG_ERROR_ANNOTATION,
    CONFIG_INFO_ANNOTATION,
    CONFIG_SOURCE_ANNOTATION,
    CONFIG_WARNING_ANNOTATION,
    adjustment_status_patch,
    config_annotations,
    event_subject,
)
from resmgr.agent.selection import Selection

SEL = Selection(name="cri-resmgr-config.default", resource_version="42", data={})


def test_success_names_the_configmap_and_clears_the_error():
    assert config_annotations(SEL, "") == {CONFIG_SOURCE_ANNOTATION: "kube-system/cri-resmgr-config.default@42",
                                           CONFIG_ERROR_ANNOTATION: None, CONFIG_INFO_ANNOTATION: None,
                                           CONFIG_WARNING_ANNOTATION: None}


def test_information_is_its_own_annotation():
    ann = config_annotations(SEL, "", "accepted, not implemented by this cri-resmgr, ignored: rdt")
    assert ann[CONFIG_SOURCE_ANNOTATION] == "kube-system/cri-resmgr-config.default@42"
    assert ann[CONFIG_INFO_ANNOTATION] == "kube-system/cri-resmgr-config.default@42: accepted, not implemented " \
                                          "by this cri-resmgr, ignored: rdt"
    assert ann[CONFIG_ERROR_ANNOTATION] is None
    forced = config_annotations(SEL, "", "force config in effect; dynamic configs not applied", applied=False)
    assert CONFIG_SOURCE_ANNOTATION not in forced and forced[CONFIG_ERROR_ANNOTATION] is None
    assert forced[CONFIG_INFO_ANNOTATION].endswith("force config in effect; dynamic configs not applied")


def test_unknown_fields_are_a_warning_beside_an_applied_config():
    """A warning is no error: the source says the ConfigMap is active, the error is cleared."""
    warning = "unknown field, left out of the config: policy.Activ (did you mean 'Active'?)"
    ann = config_annotations(SEL, "", "", warning=warning)
    assert ann == {CONFIG_SOURCE_ANNOTATION: "kube-system/cri-resmgr-config.default@42",
                   CONFIG_ERROR_ANNOTATION: None, CONFIG_INFO_ANNOTATION: None,
                   CONFIG_WARNING_ANNOTATION: f"kube-system/cri-resmgr-config.default@42: {warning}"}
    # the ConfigMap is not in force while --force-config is: its warning goes, as its other notes do
    forced = config_annotations(SEL, "", "force config in effect", applied=False, warning=warning)
    assert forced[CONFIG_WARNING_ANNOTATION] is None
    # a refused ConfigMap leaves the annotations of the config really in force alone
    assert CONFIG_WARNING_ANNOTATION not in config_annotations(SEL, "invalid config field x: bad", warning=warning)


def test_error_keeps_the_source_of_what_is_really_active():
    ann = config_annotations(SEL, "invalid config field policy.Active: unknown policy 'x'")
    assert CONFIG_SOURCE_ANNOTATION not in ann
    assert ann[CONFIG_ERROR_ANNOTATION] == ("kube-system/cri-resmgr-config.default@42: "
                                            "invalid config field policy.Active: unknown policy 'x'")


def test_no_configmap():
    assert config_annotations(None, "") == {CONFIG_SOURCE_ANNOTATION: "none", CONFIG_ERROR_ANNOTATION: None,
                                            CONFIG_INFO_ANNOTATION: None, CONFIG_WARNING_ANNOTATION: None}


def test_status_patch_sets_new_errors_and_removes_stale_ones():
    current = {"status": {"nodes": {"n1": {"errors": {"prod/a/b": "old", "spec": "old spec error"}},
                                    "n2": {"errors": {"x": "y"}}}}}
    patch = adjustment_status_patch("n1", {"error": "", "container_errors": {"prod/c/d": "conflicts"}}, current)
    assert patch == {"status": {"nodes": {"n1": {"errors": {"prod/c/d": "conflicts", "prod/a/b": None,
                                                            "spec": None}}}}}
    patch = adjustment_status_patch("n1", {"error": "bad spec", "container_errors": {}}, None)
    assert patch == {"status": {"nodes": {"n1": {"errors": {"spec": "bad spec"}}}}}


def test_events_say_why_the_configmap_applies():
    pool = Selection(name="cri-resmgr-config.pool.p1", resource_version="7",
                     reason="the node's worker pool p1 (label worker.gardener.cloud/pool)")
    assert event_subject(pool) == ("ConfigMap kube-system/cri-resmgr-config.pool.p1 (resourceVersion 7; the node's "
                                   "worker pool p1 (label worker.gardener.cloud/pool))")
    assert event_subject(SEL) == "ConfigMap kube-system/cri-resmgr-config.default (resourceVersion 42)"
