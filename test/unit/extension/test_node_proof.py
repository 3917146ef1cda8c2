"""Judging the nodes' records against the node list (extension/node_proof.py), and the shoot kubeconfig."""

from __future__ import annotations

import yaml

import noderecord
from extension import constants as c
from extension import node_proof
from extension.node_proof import Selection, assess


def node(name: str, pool: str = "a", cri: str = "containerd", **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": {"worker.gardener.cloud/cri-name": cri,
                                                  c.WORKER_POOL_LABEL: pool, **labels}}}


def lease(name: str, state: str, digest: str = "d", reason: str = "") -> dict:
    return noderecord.NodeRecord(name, state, digest, reason).to_lease()


def test_every_selected_node_must_record_the_expected_state_of_this_rollout() -> None:
    nodes = [node("n1"), node("n2"), node("n3", pool="b"), node("docker", cri="docker")]
    leases = [lease("n1", noderecord.UNINSTALLED), lease("n2", noderecord.UNINSTALLED, digest="older"),
              lease("n3", noderecord.INSTALLED)]
    proof = assess(nodes, leases, noderecord.UNINSTALLED, "d", Selection())
    assert proof.nodes == 3  # the docker node is never selected
    assert proof.pending == ["n2: record is of another rollout (uninstalled)",
                             "n3: installed"]
    assert not proof.done
    # Worker pools narrow the selection; nodes that are gone or unselected never block.
    only_a = assess(nodes, leases, noderecord.UNINSTALLED, "d", Selection(worker_pools=("a",)))
    assert only_a.nodes == 2 and only_a.pending == ["n2: record is of another rollout (uninstalled)"]
    assert assess(nodes[:1], leases, noderecord.UNINSTALLED, "d", Selection(worker_pools=("a",))).done


def test_failures_and_progress_are_told_apart() -> None:
    nodes = [node("n1"), node("n2"), node("n3", role="db")]
    leases = [lease("n1", noderecord.UNINSTALL_FAILED, reason="uninstall failed: boom"),
              lease("n2", noderecord.INSTALLED)]
    proof = assess(nodes, leases, noderecord.UNINSTALLED, "d", Selection())
    assert proof.failed == ["n1: uninstall failed: boom"]
    assert proof.pending == ["n2: installed", "n3: no record yet"]
    install = assess(nodes, [lease("n1", noderecord.DEGRADED, reason="relay silent")], noderecord.INSTALLED,
                     "d", Selection(node_selector={"role": "db"}))
    assert install.nodes == 1 and install.pending == ["n3: no record yet"] and not install.failed


def test_a_lease_is_a_record_only_under_its_holders_name() -> None:
    forged = lease("n1", noderecord.UNINSTALLED)
    forged["spec"]["holderIdentity"] = "n2"
    assert noderecord.from_lease(forged) is None
    assert assess([node("n2")], [forged], noderecord.UNINSTALLED, "d", Selection()).pending == ["n2: no record yet"]


def test_selection_round_trips_through_the_annotation() -> None:
    sel = Selection({"role": "db"}, ("a", "b"))
    assert Selection.from_annotation(sel.to_annotation()) == sel
    assert Selection.from_annotation("") == Selection()


def test_many_nodes_are_counted_not_listed() -> None:
    nodes = [node(f"n{i:03d}") for i in range(100)]
    proof = assess(nodes, [], noderecord.UNINSTALLED, "d", Selection())
    text = node_proof.describe(proof.pending)
    assert text.startswith("n000: no record yet") and text.endswith("and 95 more")


def test_the_shoot_kubeconfig_uses_the_token_instead_of_the_token_file() -> None:
    generic = yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "shoot",
        "clusters": [{"name": "shoot", "cluster": {"server": "https://kube-apiserver"}}],
        "contexts": [{"name": "shoot", "context": {"cluster": "shoot", "user": "shoot"}}],
        "users": [{"name": "shoot", "user": {"tokenFile": "/var/run/secrets/gardener.cloud/shoot/token/token"}}]})
    doc = node_proof.shoot_kubeconfig(generic.encode(), "tok", "shoot--p--s")
    assert doc["users"] == [{"name": "shoot", "user": {"token": "tok"}}]
    # Rewritten to the address reachable from our namespace (test_shoot_access.py).
    assert doc["clusters"][0]["cluster"]["server"] == "https://kube-apiserver.shoot--p--s.svc"


def test_nri_off_in_mode_nri_is_reported_not_waited_for_and_auto_relays_are_noted() -> None:
    how = "containerd's NRI is off on this node (no /var/run/nri/nri.sock): turn it on with ..."
    nodes = [node("n1"), node("n2"), node("n3")]
    leases = [lease("n1", noderecord.NRI_UNAVAILABLE, reason=how), lease("n2", noderecord.INSTALLED),
              lease("n3", noderecord.INSTALLED, reason=noderecord.AUTO_RELAY_PREFIX + how)]
    proof = assess(nodes, leases, noderecord.INSTALLED, "d", Selection())
    assert proof.nri_off == [f"n1: {how}"] and not proof.pending and not proof.failed and not proof.done
    assert proof.auto_relay == [f"n3: {how}"]
    # An uninstall does not count nri-unavailable as done.
    assert assess(nodes[:1], leases, noderecord.UNINSTALLED, "d", Selection()).pending == ["n1: nri-unavailable "
                                                                                           f"({how})"]


class _Reader(node_proof.ShootReader):
    def __init__(self, nodes: list[dict], leases: list[dict]) -> None:
        self._data = (nodes, leases)

    def nodes_and_records(self, namespace: str) -> tuple[list[dict], list[dict]]:
        return self._data


def test_the_health_check_says_where_nri_is_off_and_how_to_turn_it_on() -> None:
    how = "containerd's NRI is off on this node: turn it on with disable = false"
    mr = {"metadata": {"annotations": {node_proof.EXPECTED_STATE_ANNOTATION: noderecord.INSTALLED,
                                       node_proof.EXPECTED_DIGEST_ANNOTATION: "d"}}}
    status, reason, message = node_proof.health(
        _Reader([node("n1"), node("n2")], [lease("n1", noderecord.NRI_UNAVAILABLE, reason=how),
                                           lease("n2", noderecord.INSTALLED)]), "ns", mr)
    assert (status, reason) == ("False", c.REASON_UNSUCCESSFUL)
    assert message == f"mode nri, but containerd's NRI is off on 1 of 2 node(s), which run without cri-resmgr: " \
                      f"n1: {how}; retrying"
    status, _, message = node_proof.health(
        _Reader([node("n1")], [lease("n1", noderecord.INSTALLED, reason=noderecord.AUTO_RELAY_PREFIX + how)]),
        "ns", mr)
    assert status == "True"
    assert message.endswith(f"mode auto runs the relay on 1 node(s) because containerd's NRI is off there: n1: {how}")
