"""Which ConfigMap applies to a node: node over pool over group over default, never merged."""

from __future__ import annotations

import itertools

import pytest

from resmgr.agent.selection import GROUP_LABEL, POOL_LABEL, candidate_names, pool_name_problem, select_config


def cm(name, rv="1", deleting=False, **data):
    meta = {"name": name, "namespace": "kube-system", "resourceVersion": rv}
    if deleting:
        meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return {"metadata": meta, "data": data}


ALL = {c["metadata"]["name"]: c for c in (
    cm("cri-resmgr-config.default", policy="Active: none"),
    cm("cri-resmgr-config.group.gpu", policy="Active: static"),
    cm("cri-resmgr-config.node.n1", policy="Active: balloons"),
    cm("cri-resmgr-config.node.n2x", policy="Active: topology-aware"),
)}


def test_order_of_precedence():
    assert candidate_names("n1", "gpu") == ["cri-resmgr-config.node.n1", "cri-resmgr-config.group.gpu",
                                            "cri-resmgr-config.default"]
    assert candidate_names("n1", "") == ["cri-resmgr-config.node.n1", "cri-resmgr-config.default"]


def test_node_wins_over_group_wins_over_default():
    assert select_config("n1", {GROUP_LABEL: "gpu"}, ALL).name == "cri-resmgr-config.node.n1"
    assert select_config("n2", {GROUP_LABEL: "gpu"}, ALL).name == "cri-resmgr-config.group.gpu"
    assert select_config("n2", {}, ALL).name == "cri-resmgr-config.default"
    assert select_config("n2", {GROUP_LABEL: "other"}, ALL).name == "cri-resmgr-config.default"


def test_whole_configmap_no_merging_and_its_version():
    sel = select_config("n2", {GROUP_LABEL: "gpu"}, ALL)
    assert sel.data == {"policy": "Active: static"} and sel.resource_version == "1"
    assert sel.source == "ConfigMap kube-system/cri-resmgr-config.group.gpu"


def test_nothing_or_deleting():
    assert select_config("n1", {}, {}) is None
    only = {"cri-resmgr-config.default": cm("cri-resmgr-config.default", deleting=True)}
    assert select_config("n1", {}, only) is None


def test_binary_data_is_flagged():
    c = cm("cri-resmgr-config.default")
    c["binaryData"] = {"policy": "AAAA"}
    assert select_config("n1", {}, {"cri-resmgr-config.default": c}).binary_keys == ("policy",)


# -- worker pools (issue 29 item 5): node > pool > group > default -----------------------------------------------

KINDS = ("node", "pool", "group", "default")
NAMES = {"node": "cri-resmgr-config.node.n1", "pool": "cri-resmgr-config.pool.p1",
         "group": "cri-resmgr-config.group.gpu", "default": "cri-resmgr-config.default"}
LABELS = {GROUP_LABEL: "gpu", POOL_LABEL: "p1"}


@pytest.mark.parametrize("present", list(itertools.product((True, False), repeat=4)),
                         ids=lambda p: "+".join(k for k, there in zip(KINDS, p, strict=True) if there) or "none")
def test_every_combination_picks_the_most_specific(present):
    maps = {NAMES[k]: cm(NAMES[k], policy=k) for k, there in zip(KINDS, present, strict=True) if there}
    want = next((k for k, there in zip(KINDS, present, strict=True) if there), None)
    sel = select_config("n1", LABELS, maps)
    assert (sel.name if sel else None) == (NAMES[want] if want else None)
    assert (sel.kind if sel else None) == want


def test_pool_order_of_precedence():
    assert candidate_names("n1", group="gpu", pool="p1") == [
        "cri-resmgr-config.node.n1", "cri-resmgr-config.pool.p1", "cri-resmgr-config.group.gpu",
        "cri-resmgr-config.default"]
    assert candidate_names("n1", pool="p1") == ["cri-resmgr-config.node.n1", "cri-resmgr-config.pool.p1",
                                                "cri-resmgr-config.default"]


def test_pool_comes_from_gardeners_label():
    assert POOL_LABEL == "worker.gardener.cloud/pool"
    maps = {NAMES["pool"]: cm(NAMES["pool"]), NAMES["default"]: cm(NAMES["default"])}
    assert select_config("n1", {POOL_LABEL: "p1"}, maps).name == NAMES["pool"]
    assert select_config("n1", {POOL_LABEL: "p2"}, maps).name == NAMES["default"]
    assert select_config("n1", {}, maps).name == NAMES["default"]


def test_the_selection_says_why_it_applies():
    maps = {NAMES["pool"]: cm(NAMES["pool"])}
    sel = select_config("n1", LABELS, maps)
    assert sel.kind == "pool" and sel.reason == "the node's worker pool p1 (label worker.gardener.cloud/pool)"
    assert select_config("n1", LABELS, {NAMES["group"]: cm(NAMES["group"])}).reason == (
        "the node's group gpu (label cri-resource-manager.intel.com/group)")
    assert select_config("n1", LABELS, {NAMES["node"]: cm(NAMES["node"])}).reason == "the node's own config"
    assert select_config("n1", LABELS, {NAMES["default"]: cm(NAMES["default"])}).reason == "the default config"


@pytest.mark.parametrize("pool", ["Pool_A", "a" * 64, "-a", "a b", "a..b"])
def test_a_pool_label_no_configmap_can_be_named_after_is_skipped(pool):
    """Kubernetes allows upper case and '_' in label values, not in ConfigMap names: such a pool has no config."""
    maps = {NAMES["default"]: cm(NAMES["default"]), f"cri-resmgr-config.pool.{pool}": cm("x")}
    assert pool_name_problem(pool)
    assert select_config("n1", {POOL_LABEL: pool}, maps).name == NAMES["default"]


@pytest.mark.parametrize("pool,needle", [
    ("", "empty"),
    ("a" * 64, "64 characters; a label value has at most 63"),
    ("a b", "not a valid label value"),
    ("-a", "not a valid label value"),
    ("Pool_A", "cannot be part of the ConfigMap name cri-resmgr-config.pool.Pool_A"),
    ("a..b", "cannot be part of the ConfigMap name"),
])
def test_pool_name_problems_are_clear(pool, needle):
    assert needle in pool_name_problem(pool)


@pytest.mark.parametrize("pool", ["p1", "worker-a", "a" * 63, "a.b", "0"])
def test_good_pool_names(pool):
    assert pool_name_problem(pool) == ""
