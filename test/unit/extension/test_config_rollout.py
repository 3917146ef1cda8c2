"""The staged config rollout's decisions (extension/config_rollout.py): which nodes are canaries, when a candidate is
promoted, when the rollout stops, and what is rendered meanwhile."""

from __future__ import annotations

import pytest
import yaml
from unit.extension.test_actuator import REPO

import noderecord
from extension import chart_render
from extension import config_rollout as cr
from extension.errors import WaitingError
from extension.installation import InstallationValues
from extension.node_proof import Selection
from resmgr.agent import rollout

GOOD = {"default": {"policy": "Active: topology-aware\n"}}
NEW = {"default": {"policy": "Active: balloons\n"}}
ALL = Selection()


def node(name: str, pool: str = "a", ready: bool = True, report: str = "", **labels: str) -> dict:
    ann = {rollout.ROLLOUT_ANNOTATION: report} if report else {}
    return {"metadata": {"name": name, "annotations": ann, "labels": {
                "worker.gardener.cloud/cri-name": "containerd", "worker.gardener.cloud/pool": pool, **labels}},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def installed(name: str) -> dict:
    return noderecord.NodeRecord(name, noderecord.INSTALLED, "d").to_lease()


class Shoot:
    def __init__(self, nodes: list[dict], leases: list[dict] | None = None) -> None:
        self.nodes, self.leases, self.reads = nodes, leases or [], 0

    def __call__(self) -> tuple[list[dict], list[dict]]:
        self.reads += 1
        return self.nodes, self.leases


def step(state, desired=NEW, shoot=None, now=1000.0, timeout=300.0, selection=ALL) -> cr.Plan:
    return cr.plan(state, desired, now=now, observe=shoot or Shoot([]), selection=selection, timeout=timeout)


def test_without_a_state_the_configs_apply_as_they_are_and_become_good():
    shoot = Shoot([node("n1")])
    p = step(None, shoot=shoot)
    assert (p.good, p.candidate, p.waiting, p.stopped) == (NEW, {}, "", "")
    assert p.state.good == NEW and shoot.reads == 0
    assert p.rollout == rollout.Rollout(good=rollout.configs_digest(NEW), good_keys=("default",))


def test_unchanged_configs_need_no_shoot_read():
    shoot = Shoot([node("n1")])
    p = step(cr.RolloutState(good=NEW), shoot=shoot)
    assert p.candidate == {} and not p.waiting and shoot.reads == 0


def test_one_canary_per_worker_pool_prefers_installed_ready_nodes():
    nodes = [node("a1", ready=False), node("a2"), node("a3"), node("b1", pool="b"), node("b2", pool="b")]
    leases = [installed("a1"), installed("a3"), installed("b2")]
    assert cr.choose_canaries(nodes, leases, GOOD, NEW, ALL) == ("a3", "b2")
    assert cr.choose_canaries(nodes, leases, GOOD, NEW, ALL, keep=("a2",)) == ("a2", "b2")
    # Out of the installation's selection, or being deleted: never a canary.
    only_b = Selection(worker_pools=("b",))
    assert cr.choose_canaries(nodes, leases, GOOD, NEW, only_b) == ("b2",)
    nodes[4]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert cr.choose_canaries(nodes, leases, GOOD, NEW, only_b) == ("b1",)


def test_only_nodes_whose_config_changes_are_canaries():
    good = {**GOOD, "pool.b": {"policy": "Active: static\n"}}
    new = {**NEW, "pool.b": {"policy": "Active: static\n"}}  # pool b keeps its own config
    nodes = [node("a1"), node("b1", pool="b"), node("c1", pool="c")]
    assert cr.choose_canaries(nodes, [], good, new, ALL) == ("a1", "c1")
    only_node = {**good, "node.c1": NEW["default"]}
    assert cr.choose_canaries(nodes, [], good, only_node, ALL) == ("c1",)


def test_a_change_starts_a_rollout_on_the_canaries_and_keeps_the_good_set_for_the_rest():
    p = step(cr.RolloutState(good=GOOD), shoot=Shoot([node("a1"), node("a2"), node("b1", pool="b")]))
    assert p.good == GOOD and p.candidate == NEW and "started" in p.waiting and not p.stopped
    assert p.state.canaries == ("a1", "b1") and p.state.candidate == rollout.configs_digest(NEW)
    assert p.rollout.canaries == ("a1", "b1") and p.rollout.attempt == p.state.attempt
    assert p.rollout.good == rollout.configs_digest(GOOD) and p.rollout.candidate == rollout.configs_digest(NEW)


def started(shoot: Shoot) -> cr.RolloutState:
    return step(cr.RolloutState(good=GOOD), shoot=shoot).state


def test_promoted_once_every_canary_applied_it():
    shoot = Shoot([node("a1"), node("a2"), node("b1", pool="b")])
    state = started(shoot)
    shoot.nodes[0]["metadata"]["annotations"][rollout.ROLLOUT_ANNOTATION] = f"{state.attempt} applied"
    p = step(state, shoot=shoot, now=1010)
    assert "b1: no record yet" in p.waiting and p.candidate == NEW and p.good == GOOD
    shoot.nodes[2]["metadata"]["annotations"][rollout.ROLLOUT_ANNOTATION] = f"{state.attempt} forced"
    p = step(state, shoot=shoot, now=1020)
    assert (p.good, p.candidate, p.waiting, p.stopped) == (NEW, {}, "", "")
    assert p.state == cr.RolloutState(good=NEW) and "promoted" in p.note


def test_a_refusal_stops_the_rollout_names_the_node_and_keeps_it_stopped():
    shoot = Shoot([node("a1"), node("b1", pool="b")])
    state = started(shoot)
    shoot.nodes[0]["metadata"]["annotations"][rollout.ROLLOUT_ANNOTATION] = f"{state.attempt} applied"
    shoot.nodes[1]["metadata"]["annotations"][rollout.ROLLOUT_ANNOTATION] = \
        f"{state.attempt} failed: ReservedResources cpuset:7 is not on this node"
    p = step(state, shoot=shoot, now=1010)
    assert "canary node b1: ReservedResources cpuset:7 is not on this node" in p.stopped
    assert (p.good, p.candidate, p.waiting) == (GOOD, {}, "")
    assert p.rollout == rollout.Rollout(good=rollout.configs_digest(GOOD), good_keys=("default",))
    reads = shoot.reads
    again = step(p.state, shoot=shoot, now=5000)
    assert again.stopped == p.stopped and again.candidate == {} and shoot.reads == reads
    # A new change is a new attempt; changing back to the good configs clears the error.
    newer = {"default": {"policy": "Active: static\n"}}
    assert step(p.state, newer, shoot=shoot, now=6000).state.attempt != state.attempt
    back = step(p.state, GOOD, shoot=shoot)
    assert (back.stopped, back.state) == ("", cr.RolloutState(good=GOOD))


def test_reports_of_another_attempt_do_not_count():
    shoot = Shoot([node("a1", report="old-attempt failed: no")])
    p = step(started(shoot), shoot=shoot, now=1010)
    assert not p.stopped and "record is of another rollout" in p.waiting


def test_a_canary_that_never_reports_stops_the_rollout_after_the_timeout():
    shoot = Shoot([node("a1")])
    state = started(shoot)
    assert step(state, shoot=shoot, now=1200).waiting
    p = step(state, shoot=shoot, now=1301)
    assert "did not report within 300s: a1: no record yet" in p.stopped and p.candidate == {}


def test_a_canary_that_leaves_is_replaced():
    shoot = Shoot([node("a1"), node("a2")])
    state = started(shoot)
    assert state.canaries == ("a1",)
    shoot.nodes.pop(0)
    p = step(state, shoot=shoot, now=1200)
    assert p.state.canaries == ("a2",) and p.rollout.canaries == ("a2",) and p.state.started == 1200


def test_an_unreadable_shoot_keeps_the_good_set_until_canaries_can_be_chosen():
    def unreachable():
        raise WaitingError("cannot reach the shoot's API server", 5)

    p = step(cr.RolloutState(good=GOOD), shoot=unreachable)
    assert (p.good, p.candidate) == (GOOD, {}) and "cannot reach" in p.waiting
    assert p.state == cr.RolloutState(good=GOOD)


def test_a_change_no_node_sees_is_promoted_at_once():
    p = step(cr.RolloutState(good=GOOD), {**GOOD, "node.gone": NEW["default"]}, shoot=Shoot([node("a1")]))
    assert p.candidate == {} and not p.waiting and "node.gone" in p.good


@pytest.mark.parametrize("state", [cr.RolloutState(good=GOOD),
                                   cr.RolloutState(good={**GOOD, **NEW, "pool.x": {"a": "b"}}, candidate="c",
                                                   attempt="c-1", canaries=("n1", "n2"), started=3.5, stopped="s")])
def test_the_state_round_trips_through_the_extension_status(state):
    ext = {"status": {"state": {cr.STATE_KEY: state.to_status()}}}
    assert cr.RolloutState.from_extension(ext) == state
    assert cr.RolloutState.from_extension({"status": {}}) is None


TRICKY = {"default": {"policy": 'Active: topology-aware\n# "quotes", \\backslash, tab\there, été, 日本\n',
                      "logger": "Debug: [resource-manager]   \r\n  \n"},
          "pool.a": {"policy": "Active: none\n"}}


def test_the_rendered_configmaps_carry_exactly_the_digests_the_agents_check(tools):
    """What the chart renders (and the API server stores) must be byte for byte what the digests were computed on,
    or every agent would hold."""
    p = step(cr.RolloutState(good=TRICKY), {**TRICKY, "pool.a": {"policy": "Active: balloons\n"}},
             shoot=Shoot([node("a1")]))
    assert p.candidate and p.rollout.canaries == ("a1",)
    values = InstallationValues(images={"installer": "i", "agent": "a"}, dynamic_configs=p.good,
                                config_rollout=p.chart_values())
    text = chart_render.helm_template(str(tools.helm), REPO / "charts" / "internal" / "cri-resmgr-installation",
                                      "cri-resmgr", "kube-system", values.chart_values(), kube_version="1.31.1")
    cms = {d["metadata"]["name"]: d for d in yaml.safe_load_all(text) if d and d["kind"] == "ConfigMap"}
    assert rollout.configs_of(cms, "cri-resmgr-config.") == TRICKY
    assert rollout.choose("a1", cms)[0] == rollout.CANDIDATE
    assert rollout.choose("b1", cms)[0] == rollout.GOOD



def test_the_canaries_dry_runs_are_in_the_status_and_stay_after_the_promotion():
    shoot = Shoot([node("a1"), node("a2"), node("b1", pool="b")])
    state = started(shoot)
    assert state.diffs == () and state.to_status()["diffs"] == []
    ann = [n["metadata"]["annotations"] for n in shoot.nodes]
    ann[0][rollout.DIFF_ANNOTATION] = rollout.DiffReport(state.attempt, "4 containers, 1 would change (1 moved): "
                                                                        "prod/web-0/app: 2-3 -> 4-5").to_annotation()
    ann[1][rollout.DIFF_ANNOTATION] = f"{state.attempt} 4 containers, none would move"  # no canary: not shown
    ann[2][rollout.DIFF_ANNOTATION] = "old-attempt 9 containers, none would move"  # another attempt: not shown
    p = step(state, shoot=shoot, now=1010)
    moved = "4 containers, 1 would change (1 moved): prod/web-0/app: 2-3 -> 4-5"
    assert p.waiting and p.state.diffs == (cr.CanaryDiff("a1", state.attempt, moved),)
    status = p.state.to_status()
    assert status["diffs"] == [{"node": "a1", "attempt": state.attempt,
                                "diff": "4 containers, 1 would change (1 moved): prod/web-0/app: 2-3 -> 4-5"}]
    assert cr.RolloutState.from_extension({"status": {"state": {cr.STATE_KEY: status}}}) == p.state
    ann[2][rollout.DIFF_ANNOTATION] = f"{state.attempt} 2 containers, none would move"
    for a in (ann[0], ann[2]):
        a[rollout.ROLLOUT_ANNOTATION] = f"{state.attempt} applied"
    promoted = step(p.state, shoot=shoot, now=1020)
    assert promoted.note.endswith("promoted to every node") and promoted.state.good == NEW
    assert [(d.node, d.diff) for d in promoted.state.diffs] == [("a1", p.state.diffs[0].diff),
                                                                ("b1", "2 containers, none would move")]
    # Kept while nothing changes; a new attempt starts without them.
    assert step(promoted.state, shoot=shoot, now=1030).state.diffs == promoted.state.diffs
    newer = step(promoted.state, {"default": {"policy": "Active: static\n"}}, shoot=shoot, now=1040)
    assert newer.state.attempt != state.attempt and newer.state.diffs == ()


def test_a_refusal_the_dry_run_found_keeps_its_diff_in_the_stopped_state():
    shoot = Shoot([node("a1")])
    state = started(shoot)
    ann = shoot.nodes[0]["metadata"]["annotations"]
    ann[rollout.DIFF_ANNOTATION] = f"{state.attempt} refused: policy.ReservedResources.cpu: cpuset:99 is not here"
    ann[rollout.ROLLOUT_ANNOTATION] = f"{state.attempt} failed: policy.ReservedResources.cpu: cpuset:99 is not here"
    p = step(state, shoot=shoot, now=1010)
    assert "canary node a1" in p.stopped and p.state.diffs[0].diff.startswith("refused: ")
    assert step(p.state, shoot=shoot, now=1020).state.diffs == p.state.diffs
