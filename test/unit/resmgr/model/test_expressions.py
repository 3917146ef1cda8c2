"""The shared expression language (adjustment scopes and container affinities), against upstream's semantics."""

from __future__ import annotations

import pytest

from resmgr.model.expressions import (
    ContainerView,
    Expression,
    ExpressionError,
    container_view,
    glob_match,
    key_value,
    parse_expression,
    split_keys,
)
from resmgr.model.resources import POD_UID_LABEL, ContainerInfo

C = ContainerView(id="cid", name="web", namespace="prod", pod_name="web-0", pod_uid="u-1", pod_id="sb-1",
                  qos_class="Burstable",
                  labels={"io.kubernetes.container.name": "web", "a/b": "slash"},
                  pod_labels={"app": "shop", "app.kubernetes.io/name": "shop-ui"},
                  annotations={"note": "x"}, tags={"AVX512": "1"})


@pytest.mark.parametrize("key,value", [
    ("name", "web"), ("namespace", "prod"), ("qosclass", "Burstable"), ("id", "cid"),
    ("pod/name", "web-0"), ("pod/namespace", "prod"), ("pod/uid", "u-1"), ("pod/id", "sb-1"),
    ("pod/qosclass", "Burstable"), ("labels/io.kubernetes.container.name", "web"),
    ("io.kubernetes.container.name", "web"),  # a bare dotted key is a label
    ("pod/labels/app", "shop"), ("pod/labels/app.kubernetes.io/name", "shop-ui"), ("labels/a/b", "slash"),
    ("tags/AVX512", "1"), ("annotations/note", "x"), ("name//", "web"), ("./name", "web"),
    ("labels/missing", None), ("pod/labels/missing", None), ("bogus", None), ("pod/bogus", None),
    ("name/extra", "web"),  # as upstream: path after a plain value is ignored
])
def test_key_resolution(key, value):
    assert key_value(C, key) == value


def test_joint_keys_simple_and_full_form():
    assert split_keys(":pod/name:name") == (("pod/name", "name"), ":")
    assert split_keys(":;-pod/name;name") == (("pod/name", "name"), "-")
    assert split_keys("name") == (("name",), "")
    assert key_value(C, ":pod/name:name") == "web-0:web"
    assert key_value(C, ":,|namespace,labels/missing,name") == "prod||web"  # missing part: empty
    assert key_value(C, ":labels/x:labels/y") is None  # exists if ANY part exists
    assert Expression(":namespace:pod/name", "Matches", ("prod:web-*",)).matches(C)


@pytest.mark.parametrize("op,values,expected", [
    ("Equals", ("web",), True), ("Equals", ("*",), True), ("Equals", ("db",), False),
    ("NotEqual", ("db",), True), ("NotEqual", ("web",), False),
    ("In", ("db", "web"), True), ("In", ("*",), True), ("In", ("db",), False),
    ("NotIn", ("db",), True), ("NotIn", ("*",), False),
    ("Exists", (), True), ("NotExist", (), False), ("AlwaysTrue", (), True),
    ("Matches", ("w?b",), True), ("Matches", ("[a-w]eb",), True), ("Matches", ("[^w]eb",), False),
    ("MatchesNot", ("w*",), False), ("MatchesAny", ("x*", "we*"), True), ("MatchesNone", ("x*", "we*"), False),
])
def test_operators_on_an_existing_key(op, values, expected):
    assert Expression("name", op, values).matches(C) is expected


@pytest.mark.parametrize("op,values,expected", [
    ("Equals", ("*",), False), ("NotEqual", ("x",), True), ("In", ("*",), False), ("NotIn", ("x",), True),
    ("Exists", (), False), ("NotExist", (), True), ("Matches", ("*",), False), ("MatchesNot", ("*",), True),
    ("MatchesAny", ("*",), False), ("MatchesNone", ("*",), True), ("AlwaysTrue", (), True),
])
def test_a_missing_key_satisfies_only_negations(op, values, expected):
    assert Expression("labels/missing", op, values).matches(C) is expected


@pytest.mark.parametrize("pattern,value,expected", [
    ("*", "a/b", False),  # Go's filepath.Match: '*' and '?' never cross '/'
    ("*/*", "a/b", True), ("a?c", "a/c", False), ("a?c", "abc", True), (r"\*", "*", True), (r"\*", "x", False),
    ("[!]", "!", True),  # '!' is no negation in Go
    ("[^a-c]x", "dx", True), ("[^a-c]x", "bx", False), ("[", "[", False),  # malformed: matches nothing
    ("a.c", "abc", False), ("(x)+", "(x)+", True),  # regex characters are literal
])
def test_globs_follow_go_filepath_match(pattern, value, expected):
    assert glob_match(pattern, value) is expected


@pytest.mark.parametrize("raw,field", [
    ([], "e"), ({"key": "name", "operator": "Sorta", "values": ["x"]}, "e.operator"),
    ({"operator": "Equals", "values": ["x"]}, "e.key"), ({"key": "name", "operator": "Equals"}, "e.values"),
    ({"key": "name", "operator": "Equals", "values": ["a", "b"]}, "e.values"),
    ({"key": "name", "operator": "Exists", "values": ["a"]}, "e.values"),
    ({"key": "name", "operator": "In", "values": []}, "e.values"),
    ({"key": "name", "operator": "In", "values": "web"}, "e.values"),
    ({"key": "name", "operator": "Matches", "values": ["[ab"]}, "e.values[0]"),
    ({"key": "name", "operator": "MatchesAny", "values": ["ok", "bad\\"]}, "e.values[1]"),
    ({"key": "name", "operator": "Equals", "values": ["x"], "valuez": []}, "e.valuez"),
])
def test_invalid_expressions_name_the_field(raw, field):
    with pytest.raises(ExpressionError) as err:
        parse_expression(raw, "e")
    assert err.value.field == field, str(err.value)


def test_container_view_of_container_info_reads_labels_and_pod_uid():
    info = ContainerInfo(id="c1", pod_id="p1", name="db", namespace="ns", pod_name="db-0", qos="Guaranteed",
                         labels={"io.kubernetes.container.name": "db"},
                         pod_labels={POD_UID_LABEL: "uid-9", "app": "x"})
    view = container_view(info)
    assert key_value(view, "pod/uid") == "uid-9"
    assert key_value(view, "pod/labels/app") == "x"
    assert key_value(view, "io.kubernetes.container.name") == "db"
    assert key_value(view, "qosclass") == "Guaranteed"
