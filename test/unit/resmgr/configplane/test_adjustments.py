"""Adjustment specs: validation, scope matching, conflicts and the resulting overrides."""

from __future__ import annotations

import json

import pytest

from resmgr.configplane.adjustments import (
    AdjustmentError,
    ContainerView,
    node_name_matches,
    parse_adjustment,
    plan_adjustments,
)

WEB = ContainerView(id="c1", name="web", namespace="prod", pod_name="web-0", qos_class="Burstable",
                    labels={"tier": "frontend"}, pod_labels={"app": "shop"}, annotations={"a": "1"})


DB = ContainerView(id="c2", name="db", namespace="prod", pod_name="db-0", qos_class="Guaranteed",
                   pod_labels={"app": "shop"})


SYS = ContainerView(id="c3", name="coredns", namespace="kube-system", pod_name="coredns-1")


def spec(containers=None, nodes=None, **extra):
    body = {"scope": [{"nodes": nodes or [], "containers": containers or []}],
            "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1", "memory": "64Mi"}}}
    body.update(extra)
    return body


@pytest.mark.parametrize("node,pattern,expected", [
    ("worker-1", "worker-1", True), ("worker-12", "worker-1", False), ("worker-12", "worker-1*", True),
    ("worker-1", "worker-*", True), ("master-1", "worker-*", False), ("anything", "*", True)])
def test_node_names_exact_or_trailing_star(node, pattern, expected):
    assert node_name_matches(node, pattern) is expected


@pytest.mark.parametrize("expr,selected", [
    ({"key": "name", "operator": "Equals", "values": ["web"]}, {"c1"}),
    ({"key": "namespace", "operator": "NotEqual", "values": ["prod"]}, {"c3"}),
    ({"key": "pod/name", "operator": "In", "values": ["web-0", "db-0"]}, {"c1", "c2"}),
    ({"key": "namespace", "operator": "NotIn", "values": ["kube-system"]}, {"c1", "c2"}),
    ({"key": "labels/tier", "operator": "Exists"}, {"c1"}),
    ({"key": "labels/tier", "operator": "NotExist"}, {"c2", "c3"}),
    ({"key": "pod/labels/app", "operator": "Equals", "values": ["shop"]}, {"c1", "c2"}),
    ({"key": "qosclass", "operator": "Equals", "values": ["Guaranteed"]}, {"c2"}),
    ({"key": "pod/name", "operator": "Matches", "values": ["*-0"]}, {"c1", "c2"}),
    ({"key": "pod/name", "operator": "MatchesNot", "values": ["*-0"]}, {"c3"}),
    ({"key": "name", "operator": "MatchesAny", "values": ["w*", "core*"]}, {"c1", "c3"}),
    ({"key": "name", "operator": "MatchesNone", "values": ["w*", "core*"]}, {"c2"}),
    ({"operator": "AlwaysTrue"}, {"c1", "c2", "c3"}),
])
def test_container_expressions(expr, selected):
    plan = plan_adjustments("n1", {"a/x": spec([expr])}, [WEB, DB, SYS])
    assert set(plan.overrides) == selected
    assert plan.outcomes["a/x"].error == ""


def test_all_expressions_of_a_scope_must_match_and_any_scope_may():
    both = spec([{"key": "namespace", "operator": "Equals", "values": ["prod"]},
                 {"key": "name", "operator": "Equals", "values": ["db"]}])
    assert set(plan_adjustments("n1", {"a/x": both}, [WEB, DB, SYS]).overrides) == {"c2"}
    two_scopes = spec()
    two_scopes["scope"] = [{"containers": [{"key": "name", "operator": "Equals", "values": ["db"]}]},
                           {"containers": [{"key": "name", "operator": "Equals", "values": ["web"]}]}]
    assert set(plan_adjustments("n1", {"a/x": two_scopes}, [WEB, DB, SYS]).overrides) == {"c1", "c2"}


def test_node_scope_limits_where_it_applies():
    body = spec(nodes=["worker-*"])
    assert plan_adjustments("worker-3", {"a/x": body}, [WEB]).overrides
    assert not plan_adjustments("master-0", {"a/x": body}, [WEB]).overrides
    assert parse_adjustment("a/x", body).applies_to_node("worker-3")


def test_override_values():
    body = spec(classes={"rdt": "gold"}, toptierLimit="1Gi")
    body["resources"] = {"requests": {"cpu": "1500m", "memory": "1Gi"}, "limits": {"cpu": 2, "memory": "2Gi"}}
    ov = plan_adjustments("n", {"a/x": body}, [WEB]).overrides["c1"]
    assert (ov.request_milli, ov.limit_milli, ov.memory_request, ov.memory_limit) == (1500, 2000, 2**30, 2**31)
    assert ov.classes == {"rdt": "gold"} and ov.toptier_limit == 2**30 and ov.adjustment == "a/x"


def test_conflicting_adjustments_apply_to_neither_container_and_both_report_it():
    a = spec([{"key": "namespace", "operator": "Equals", "values": ["prod"]}])
    b = spec([{"key": "name", "operator": "Equals", "values": ["db"]}])
    plan = plan_adjustments("n", {"ns/a": a, "ns/b": b}, [WEB, DB, SYS])
    assert set(plan.overrides) == {"c1"}  # web: only a; db: both -> conflict
    assert plan.outcomes["ns/a"].applied == ["c1"]
    assert "conflicts with adjustment ns/b" in plan.outcomes["ns/a"].container_errors["prod/db-0/db"]
    assert "conflicts with adjustment ns/a" in plan.outcomes["ns/b"].container_errors["prod/db-0/db"]
    assert plan.outcomes["ns/b"].applied == []


def test_invalid_spec_is_reported_and_does_not_conflict():
    bad = spec([{"key": "name", "operator": "Sorta", "values": ["db"]}])
    good = spec([{"key": "name", "operator": "Equals", "values": ["db"]}])
    plan = plan_adjustments("n", {"ns/bad": json.dumps(bad), "ns/good": json.dumps(good)}, [DB])
    assert "spec.scope[0].containers[0].operator" in plan.outcomes["ns/bad"].error
    assert set(plan.overrides) == {"c2"} and plan.overrides["c2"].adjustment == "ns/good"


@pytest.mark.parametrize("body,field", [
    ({"scope": []}, "spec.scope"),
    ({"scope": [{"nodes": ["a*b"]}], "resources": {"requests": {"cpu": "1"}}}, "spec.scope[0].nodes[0]"),
    ({"scope": [{}], "resources": {"requests": {"gpu": "1"}}}, "spec.resources.requests.gpu"),
    ({"scope": [{}], "resources": {"requests": {"cpu": "lots"}}}, "spec.resources.requests.cpu"),
    ({"scope": [{}], "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}},
     "spec.resources.requests.cpu"),
    ({"scope": [{}], "resources": {"limits": {"memory": "1Qi"}}}, "spec.resources.limits.memory"),
    ({"scope": [{}], "classes": {"gpu": "x"}}, "spec.classes.gpu"),
    ({"scope": [{}]}, "spec"),
    ({"scope": [{}], "resourcez": {}}, "spec.resourcez"),
    ({"scope": [{"containers": [{"key": "name", "operator": "Equals", "values": ["a", "b"]}]}],
      "classes": {"rdt": "x"}}, "spec.scope[0].containers[0].values"),
    ({"scope": [{"containers": [{"key": "name", "operator": "Exists", "values": ["a"]}]}],
      "classes": {"rdt": "x"}}, "spec.scope[0].containers[0].values"),
])
def test_invalid_specs_name_the_field(body, field):
    with pytest.raises(AdjustmentError) as err:
        parse_adjustment("x", body)
    assert err.value.field == field, str(err.value)


def test_not_json():
    plan = plan_adjustments("n", {"ns/x": "{nope"}, [WEB])
    assert "not valid JSON" in plan.outcomes["ns/x"].error
