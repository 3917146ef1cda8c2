"""Which ConfigMap applies to a node: node over group over default, never merged."""

from __future__ import annotations

from resmgr.agent.selection import GROUP_LABEL, candidate_names, select_config


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
