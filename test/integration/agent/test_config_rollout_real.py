"""A staged config rollout on real nodes' config planes: two nodes of one worker pool, each with its real cri-resmgr
and agent against the real API server. The ConfigMaps are written as the extension renders them
(extension/config_rollout.py) and in gardener-resource-manager's order (removed objects first, then changed ones).

The refused config is valid by the schema, but this node's topology cannot satisfy it: AvailableResources names
CPUs 0-200, which no test machine has online, so cri-resmgr refuses it when the agent pushes it."""

from __future__ import annotations

import pytest
from integration.agent.conftest import delete_config_map, policy_section, put_config_map, wait_for

from resmgr.agent import rollout
from resmgr.agent.reporting import CONFIG_SOURCE_ANNOTATION
from resmgr.agent.selection import POOL_LABEL

pytestmark = pytest.mark.integration

GOOD = {"default": policy_section("1")}
FINE = {"default": policy_section("0")}
UNFIT = {"default": {"policy": "Active: topology-aware\nAvailableResources:\n  cpu: cpuset:0-200\n"
                               "ReservedResources:\n  cpu: cpuset:0\n"}}


def put_good(core, good: dict) -> None:
    """The ordinary ConfigMaps and a cri-resmgr-rollout without a candidate (a settled state)."""
    for key, data in good.items():
        put_config_map(core, f"cri-resmgr-config.{key}", data)
    spec = rollout.Rollout(good=rollout.configs_digest(good), good_keys=tuple(sorted(good)))
    put_config_map(core, rollout.ROLLOUT_CONFIG_MAP, spec.to_data())


def put_candidate(core, good: dict, candidate: dict, attempt: str, canaries: tuple[str, ...]) -> None:
    for key, data in candidate.items():
        put_config_map(core, f"cri-resmgr-candidate.{key}", data)
    spec = rollout.Rollout(rollout.configs_digest(good), tuple(sorted(good)), attempt,
                           rollout.configs_digest(candidate), canaries)
    put_config_map(core, rollout.ROLLOUT_CONFIG_MAP, spec.to_data())


def pool_of_two_on_good(plane_node) -> tuple:
    """Two nodes of one worker pool, both running the good config (cpuset:1 reserved): (canary, other)."""
    canary = plane_node(labels={POOL_LABEL: "p"})
    other = plane_node(labels={POOL_LABEL: "p"})
    put_good(canary.core, GOOD)
    canary.wait_reserved("1")
    other.wait_reserved("1")
    return canary, other


def report_of(node) -> rollout.Report | None:
    return rollout.parse_report(node.annotations().get(rollout.ROLLOUT_ANNOTATION))


def test_a_refused_config_stops_at_the_canary_and_is_reverted_there(plane_node):
    canary, other = pool_of_two_on_good(plane_node)

    put_candidate(canary.core, GOOD, UNFIT, "t1", (canary.name,))
    report = wait_for(lambda: report_of(canary), f"the canary's report\n{canary.logs()}")
    assert (report.attempt, report.state) == ("t1", rollout.FAILED)
    assert "policy.AvailableResources.cpu" in report.reason and "not online" in report.reason
    # The good config was pushed back right after the refusal, and cri-resmgr never left it.
    def pushed_back() -> bool:
        before, marker, after = canary.agent.log_path.read_text().partition("going back to the last good config")
        return bool(marker) and "pushing ConfigMap kube-system/cri-resmgr-config.default" in after

    wait_for(pushed_back, f"the good config pushed back\n{canary.logs()}")
    assert canary.annotations()[CONFIG_SOURCE_ANNOTATION].startswith("kube-system/cri-resmgr-config.default@")
    assert canary.reserved() == "cpuset:1"
    wait_for(lambda: any(e.reason == "ConfigRolloutFailed" and e.type == "Warning" for e in canary.events()),
             "ConfigRolloutFailed Event")
    assert canary.probe().returncode == 0
    # The other node of the pool never saw the candidate.
    assert "pushing ConfigMap kube-system/cri-resmgr-candidate" not in other.agent.log_path.read_text()
    assert other.reserved() == "cpuset:1" and report_of(other) is None
    # The failed attempt is not tried again by a restarted agent (the Node keeps the report).
    pushes = canary.agent.log_path.read_text().count("pushing ConfigMap kube-system/cri-resmgr-candidate")
    canary.agent.stop()
    canary.start_agent()
    wait_for(lambda: canary.probe().returncode == 0, "restarted agent ready")
    assert canary.agent.log_path.read_text().count("pushing ConfigMap kube-system/cri-resmgr-candidate") == pushes


def test_an_applied_candidate_is_promoted_without_flapping_back(plane_node):
    canary, other = pool_of_two_on_good(plane_node)

    put_candidate(canary.core, GOOD, FINE, "t2", (canary.name,))
    canary.wait_reserved("0")
    assert wait_for(lambda: report_of(canary), "the canary's report") == rollout.Report("t2", rollout.APPLIED)
    assert other.reserved() == "cpuset:1"

    # The promotion as gardener-resource-manager applies it: the candidate goes first, then the rollout and the
    # good ConfigMaps change. The canary holds in between instead of going back to cpuset:1.
    log_before = canary.agent.log_path.read_text()
    delete_config_map(canary.core, "cri-resmgr-candidate.default")
    spec = rollout.Rollout(good=rollout.configs_digest(FINE), good_keys=("default",))
    put_config_map(canary.core, rollout.ROLLOUT_CONFIG_MAP, spec.to_data())
    put_config_map(canary.core, "cri-resmgr-config.default", FINE["default"])
    other.wait_reserved("0")
    wait_for(lambda: canary.annotations()[CONFIG_SOURCE_ANNOTATION].startswith(
        "kube-system/cri-resmgr-config.default@"), "the canary names the promoted ConfigMap")
    assert canary.reserved() == "cpuset:0"
    pushed = canary.agent.log_path.read_text()[len(log_before):]
    assert pushed.count("pushing ConfigMap kube-system/cri-resmgr-config.default") == 1, pushed


def test_a_canary_reports_its_dry_run_of_the_candidate(plane_node):
    """Through the real DryRunConfig: the canary's cri-resmgr tries the candidate on its running container, and the
    agent reports which container would move (Node annotation, Event, log) before it pushes it."""
    canary = plane_node(labels={POOL_LABEL: "p"})
    put_good(canary.core, GOOD)
    canary.wait_reserved("1")
    cid = canary.run_container("web")
    wait_for(lambda: canary.reserved() == "cpuset:1", "the good config active")
    # The none policy places nothing: the container would leave the shared CPUs topology-aware gave it.
    none = {"default": {"policy": "Active: none\n"}}
    put_candidate(canary.core, GOOD, none, "t3", (canary.name,))
    assert wait_for(lambda: report_of(canary), f"the canary's report\n{canary.logs()}") == \
        rollout.Report("t3", rollout.APPLIED)
    diff = rollout.parse_diff(canary.annotations().get(rollout.DIFF_ANNOTATION))
    assert diff is not None and diff.attempt == "t3", canary.logs()
    assert diff.summary.startswith("1 containers, 1 would change (1 moved): default/web/web: "), diff.summary
    assert diff.summary.endswith(" -> -")
    wait_for(lambda: any(e.reason == "ConfigRolloutDryRun" and diff.summary in e.message for e in canary.events()),
             "ConfigRolloutDryRun Event")
    log = canary.agent.log_path.read_text()
    assert "config rollout t3 would change default/web/web" in log
    # Reported before the push.
    assert log.index("config rollout t3 would change") < log.index("pushing ConfigMap kube-system/cri-resmgr-candidate")
    canary.remove_pod_of(cid)
