"""The agent's side of a staged config rollout: what a canary selects, reports and reverts (resmgr.agent.rollout),
with the pusher against a real Config API server (cri-resmgr's side is a ConfigPlane that refuses policy switches)."""

from __future__ import annotations

import pytest
from unit.resmgr.agent.test_controller import Env, RecordingReporter, cm, reserved

from resmgr.agent import rollout
from resmgr.agent.controller import Held

NODE = "n1"
GOOD = {"default": {"policy": reserved("0")}}
SWITCH = {"default": {"policy": "Active: static\n"}}  # a policy switch: the test applier refuses it
FINE = {"default": {"policy": reserved("1")}}


class RolloutReporter(RecordingReporter):
    def __init__(self) -> None:
        super().__init__()
        self.reports: list[rollout.Report] = []

    def rollout_outcome(self, selection, report):
        self.reports.append(report)


def config_maps(good: dict, candidate: dict | None = None, canaries: tuple[str, ...] = (NODE,),
                attempt: str = "a1") -> dict[str, dict]:
    """The ConfigMaps the extension renders: the good set, and a candidate with its rollout."""
    out = {f"cri-resmgr-config.{k}": cm(f"cri-resmgr-config.{k}", "1", **v) for k, v in good.items()}
    spec = rollout.Rollout(good=rollout.configs_digest(good), good_keys=tuple(sorted(good)))
    if candidate is not None:
        out |= {f"cri-resmgr-candidate.{k}": cm(f"cri-resmgr-candidate.{k}", "1", **v) for k, v in candidate.items()}
        spec = rollout.Rollout(spec.good, spec.good_keys, attempt, rollout.configs_digest(candidate), canaries)
    out[rollout.ROLLOUT_CONFIG_MAP] = {"metadata": {"name": rollout.ROLLOUT_CONFIG_MAP, "resourceVersion": "1"},
                                       "data": spec.to_data()}
    return out


@pytest.fixture
def env():
    e = Env()
    e.reporter = RolloutReporter()
    e.pusher.reporter = e.reporter
    e.start_server()
    yield e
    e.target.close()
    e.stop_server()


def show(env, cms: dict[str, dict]) -> None:
    env.state.replace_config_maps(list(cms.values()))


# pure ------------------------------------------------------------------------------------------------------


def test_only_a_canary_of_a_complete_candidate_chooses_it():
    cms = config_maps(GOOD, FINE, canaries=("n1",))
    assert rollout.choose("n1", cms)[::2] == (rollout.CANDIDATE, "a1")
    assert rollout.choose("n2", cms)[0] == rollout.GOOD
    assert rollout.choose("n1", cms, failed_attempt="a1")[0] == rollout.GOOD
    incomplete = {k: v for k, v in cms.items() if k != "cri-resmgr-candidate.default"}
    assert rollout.choose("n1", incomplete)[0] == rollout.HOLD


def test_the_good_configmaps_must_match_the_digest_they_claim():
    cms = config_maps(GOOD)
    assert rollout.choose("n1", cms)[0] == rollout.GOOD
    stale = config_maps(GOOD) | {"cri-resmgr-config.default": cm("cri-resmgr-config.default", "2", **FINE["default"])}
    assert rollout.choose("n1", stale)[0] == rollout.HOLD
    cms.pop(rollout.ROLLOUT_CONFIG_MAP)  # an extension without staged rollouts: as before
    assert rollout.choose("n1", cms)[0] == rollout.GOOD


def test_reports_round_trip_and_stay_small():
    report = rollout.Report("a1", rollout.FAILED, "line one\n line two" + "x" * 2000)
    parsed = rollout.parse_report(report.to_annotation())
    assert parsed is not None and parsed.attempt == "a1" and parsed.state == rollout.FAILED
    assert parsed.reason.startswith("line one line two") and len(parsed.reason) == rollout.MAX_REASON
    assert rollout.parse_report("a1 applied") == rollout.Report("a1", rollout.APPLIED)
    assert rollout.parse_report("garbage") is None and rollout.parse_report(None) is None


# the pusher ------------------------------------------------------------------------------------------------


def test_a_canary_applies_the_candidate_and_says_so(env):
    show(env, config_maps(GOOD))
    env.pusher.reconcile()
    show(env, config_maps(GOOD, FINE))
    env.later()
    assert env.applier.applied[-1][0]["policy"]["ReservedResources"] == {"cpu": "cpuset:1"}
    assert env.reporter.configs[-1] == ("cri-resmgr-candidate.default", "")
    assert env.reporter.reports == [rollout.Report("a1", rollout.APPLIED)]


def test_a_node_that_is_no_canary_stays_on_the_good_config(env):
    show(env, config_maps(GOOD))
    env.pusher.reconcile()
    show(env, config_maps(GOOD, FINE, canaries=("n2",)))
    env.later()
    assert env.pusher.pushes == 1 and env.reporter.reports == []
    assert env.applier.applied[-1][0]["policy"]["ReservedResources"] == {"cpu": "cpuset:0"}


def test_a_refused_candidate_is_reported_and_the_good_config_pushed_back(env):
    show(env, config_maps(GOOD))
    env.pusher.reconcile()
    show(env, config_maps(GOOD, SWITCH))
    env.later()
    assert len(env.reporter.reports) == 1
    report = env.reporter.reports[0]
    assert report.state == rollout.FAILED and "switching the active policy" in report.reason
    # Pushed back within the same step, and the agent is healthy on it.
    assert env.reporter.configs[-2:] == [("cri-resmgr-candidate.default", env.reporter.configs[-2][1]),
                                         ("cri-resmgr-config.default", "")]
    assert env.pusher.pushes == 3 and env.pusher.health("config-status") == ""
    env.later()
    env.later()
    assert env.pusher.pushes == 3, "the failed attempt was selected again"


def test_a_failed_attempt_recorded_on_the_node_survives_a_restart(env):
    env.state.node_event("ADDED", {"metadata": {"name": NODE, "annotations": {
        rollout.ROLLOUT_ANNOTATION: rollout.Report("a1", rollout.FAILED, "no").to_annotation()}}})
    show(env, config_maps(GOOD, SWITCH))
    env.pusher.reconcile()
    assert env.reporter.configs == [("cri-resmgr-config.default", "")] and env.reporter.reports == []
    show(env, config_maps(GOOD, SWITCH, attempt="a2"))  # a new attempt is tried again
    env.later()
    assert env.reporter.reports[-1].attempt == "a2"


def test_a_promotion_seen_half_way_does_not_flap_back(env):
    """gardener-resource-manager deletes the candidate before it updates the good ConfigMaps: hold meanwhile."""
    show(env, config_maps(GOOD))
    env.pusher.reconcile()
    cms = config_maps(GOOD, FINE)
    show(env, cms)
    env.later()
    half = {k: v for k, v in cms.items() if not k.startswith(rollout.CANDIDATE_PREFIX)}
    half[rollout.ROLLOUT_CONFIG_MAP] = config_maps(FINE)[rollout.ROLLOUT_CONFIG_MAP]  # says FINE is good now
    show(env, half)
    env.later()
    assert isinstance(env.state.selection(), Held)
    pushed = [raw["policy"]["ReservedResources"]["cpu"] for raw, _, _ in env.applier.applied]
    assert pushed == ["cpuset:0", "cpuset:1"]
    show(env, config_maps(FINE))
    env.later()
    assert env.reporter.configs[-1] == ("cri-resmgr-config.default", "")
    assert [raw["policy"]["ReservedResources"]["cpu"] for raw, _, _ in env.applier.applied] == pushed


def test_a_hold_that_does_not_settle_ends_with_the_ordinary_configmaps(env):
    """A mismatch that lasts (not a promotion seen half way) must not keep the node without its config."""
    stale = config_maps(GOOD) | {"cri-resmgr-config.default": cm("cri-resmgr-config.default", "2", **FINE["default"])}
    show(env, stale)
    wait = env.pusher.reconcile()
    assert env.pusher.pushes == 0 and wait == pytest.approx(env.pusher.hold_max)
    assert env.later(env.pusher.hold_max - 1) == pytest.approx(1)
    assert env.pusher.pushes == 0
    assert env.later(1) is None
    assert env.applier.applied[-1][0]["policy"]["ReservedResources"] == {"cpu": "cpuset:1"}


def test_a_canary_whose_force_config_wins_says_forced_and_keeps_it(env):
    env.stop_server()
    env.start_server(force_config="/etc/cri-resmgr/force.cfg")
    show(env, config_maps(GOOD, SWITCH))
    env.pusher.reconcile()
    assert env.reporter.reports == [rollout.Report("a1", rollout.FORCED)]
    assert env.applier.applied == [] and env.pusher.health("config-status") == ""
