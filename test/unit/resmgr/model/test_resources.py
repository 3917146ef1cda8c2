"""Container resource estimation from CRI requests."""

from __future__ import annotations

import pytest
from unit.resmgr.cri_requests import create_request, pod_config

from resmgr.model.resources import (
    QOS_BESTEFFORT,
    QOS_BURSTABLE,
    QOS_GUARANTEED,
    ContainerInfo,
    container_from_create_request,
    preference_annotation,
    preference_flag,
    qos_from_cgroup_parent,
    quota_to_milli,
    shares_to_milli,
)


@pytest.mark.parametrize("milli", [10, 100, 250, 500, 750, 1000, 1500, 2000, 3333, 64000])
def test_shares_and_quota_invert_kubelet(milli: int) -> None:
    assert abs(shares_to_milli(milli * 1024 // 1000) - milli) <= 1
    assert quota_to_milli(milli * 100_000 // 1000, 100_000) == milli


def test_minimum_shares_mean_no_request() -> None:
    assert shares_to_milli(2) == 0 and shares_to_milli(0) == 0
    assert quota_to_milli(-1, 100_000) == 0


@pytest.mark.parametrize(("parent", "qos"), [
    ("/kubepods/besteffort/pod1234", QOS_BESTEFFORT),
    ("/kubepods/burstable/pod1234", QOS_BURSTABLE),
    ("/kubepods/pod1234", QOS_GUARANTEED),
    ("kubepods-besteffort-pod1234.slice", QOS_BESTEFFORT),
    ("kubepods-burstable-pod1234.slice", QOS_BURSTABLE),
    ("kubepods-pod1234.slice", QOS_GUARANTEED),
    ("/system.slice/other", None),
])
def test_qos_from_cgroup_parent(parent: str, qos: str | None) -> None:
    assert qos_from_cgroup_parent(parent) == qos


@pytest.mark.parametrize(("qos", "milli", "expect"), [
    ("guaranteed", 2000, (QOS_GUARANTEED, 2000, 2000)),
    ("burstable", 500, (QOS_BURSTABLE, 500, 0)),
    ("besteffort", 0, (QOS_BESTEFFORT, 0, 0)),
])
def test_estimate_from_create_request(qos: str, milli: int, expect: tuple) -> None:
    pod = pod_config("p", namespace="kube-system", qos=qos)
    c = container_from_create_request(create_request("pod-1", pod, "c", cpu_milli=milli), None)
    assert (c.qos, c.request_milli, c.limit_milli) == expect
    assert (c.name, c.pod_name, c.namespace, c.pod_id) == ("c", "p", "kube-system", "pod-1")
    assert c.is_kube_system


def test_qos_estimated_without_cgroup_parent() -> None:
    pod = pod_config("p", qos="guaranteed")
    req = create_request("pod-1", pod, "c", cpu_milli=3000)
    req.sandbox_config.linux.cgroup_parent = ""
    assert container_from_create_request(req, None).qos == QOS_GUARANTEED


def test_annotation_precedence() -> None:
    key = "prefer-shared-cpus.cri-resource-manager.intel.com"
    c = ContainerInfo(id="x", pod_id="p", name="web", pod_annotations={
        key: "false", f"{key}/pod": "true", f"{key}/container.web": "false", f"{key}/container.db": "true"})
    assert preference_annotation(c, key) == "false"
    c.pod_annotations.pop(f"{key}/container.web")
    assert preference_annotation(c, key) == "true"
    c.pod_annotations.pop(f"{key}/pod")
    assert preference_annotation(c, key) == "false"


@pytest.mark.parametrize("value,expected", [
    ("true", True), ("True", True), ("TRUE", True), ("t", True), ("1", True),
    ("false", False), ("F", False), ("0", False),
    ("yes", None), ("no", None), (" true", None), ("", None)])  # Go's strconv.ParseBool, as upstream
def test_preference_flag_parses_like_go(value: str, expected: bool | None) -> None:
    key = "prefer-isolated-cpus.cri-resource-manager.intel.com"
    c = ContainerInfo(id="x", pod_id="p", name="web", pod_annotations={f"{key}/pod": value})
    assert preference_flag(c, key) is expected


def test_preference_flag_reads_upstreams_deprecated_annotation() -> None:
    key = "prefer-shared-cpus.cri-resource-manager.intel.com"
    old = "cri-resource-manager.intel.com/prefer-shared-cpus"
    web = ContainerInfo(id="x", pod_id="p", name="web", pod_annotations={old: "true"})
    assert preference_flag(web, key) is True
    web.pod_annotations[old] = "web: false\ndb: true\n"
    assert preference_flag(web, key) is False
    other = ContainerInfo(id="y", pod_id="p", name="cache", pod_annotations=dict(web.pod_annotations))
    assert preference_flag(other, key) is None  # not named: not explicit
    web.pod_annotations[f"{key}/pod"] = "true"  # the current syntax wins over the deprecated one
    assert preference_flag(web, key) is True
    broken = ContainerInfo(id="z", pod_id="p", name="web", pod_annotations={old: "[not, a, map"})
    assert preference_flag(broken, key) is None


def test_webhook_annotation_gives_exact_resources_and_qos() -> None:
    import json

    pod = pod_config("p", qos="burstable", annotations={"intel.com/resources": json.dumps({
        "containers": {"c": {"requests": {"cpu": "1500m", "memory": "1Gi"},
                             "limits": {"cpu": "2", "memory": "2Gi"}}}})})
    req = create_request("pod-1", pod, "c", cpu_milli=1000)
    c = container_from_create_request(req, None)
    assert (c.request_milli, c.limit_milli, c.memory_limit, c.qos) == (1500, 2000, 2 << 30, QOS_BURSTABLE)
    # Without a cgroup parent the QoS class comes from the annotated requirements.
    req.sandbox_config.linux.cgroup_parent = ""
    req.sandbox_config.annotations["intel.com/resources"] = json.dumps(
        {"containers": {"c": {"limits": {"cpu": "2", "memory": "128Mi"}}}})
    c = container_from_create_request(req, None)
    assert (c.qos, c.request_milli, c.memory_limit) == (QOS_GUARANTEED, 2000, 128 << 20)
    req.sandbox_config.annotations["intel.com/resources"] = "{not json"
    assert container_from_create_request(req, None).request_milli == 1000  # falls back to the estimate
