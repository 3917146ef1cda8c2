"""The agent's side of a staged config rollout: what a canary selects, reports and reverts (resmgr.agent.rollout),
with the pusher against a real Config API server (cri-resmgr's side is a ConfigPlane that refuses policy switches)."""

from __future__ import annotations

import pytest
from kubernetes import client
from unit.resmgr.agent.test_controller import Env, RecordingReporter, cm, reserved

from resmgr.agent import rollout
from resmgr.agent.controller import Held, diff_summary
from resmgr.agent.reporting import KubeReporter
from resmgr.agent.selection import Selection
from resmgr.configplane.plane import ConfigPlane
from resmgr.configplane.server import CONFIG_SERVICE, set_config
from resmgr.model.placement_change import DryRun, PlacementChange
from resmgr.rpc.unixrpc import UnaryServer, service_methods

NODE = "n1"
GOOD = {"default": {"policy": reserved("0")}}
SWITCH = {"default": {"policy": "Active: static\n"}}  # a policy switch: the test applier refuses it
FINE = {"default": {"policy": reserved("1")}}


class RolloutReporter(RecordingReporter):
    def __init__(self) -> None:
        super().__init__()
        self.reports: list[rollout.Report] = []
        self.diffs: list[tuple[rollout.DiffReport, bool]] = []

    def rollout_outcome(self, selection, report):
        self.reports.append(report)

    def rollout_diff(self, selection, report, *, refused):
        self.diffs.append((report, refused))


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


def test_a_canary_reports_its_dry_run_before_it_pushes(env):
    show(env, config_maps(GOOD))
    env.pusher.reconcile()
    env.applier.dry_changes = [PlacementChange("prod/web-0/web", "c1", "0-3", "4-7")]
    seen = []
    dry_run = env.applier.dry_run
    env.applier.dry_run = lambda config, source: (seen.append(len(env.applier.applied)), dry_run(config, source))[1]
    show(env, config_maps(GOOD, FINE))
    env.later()
    assert seen == [1], "the dry run came after the candidate's push"
    assert env.applier.dry_runs[0][1] == "ConfigMap kube-system/cri-resmgr-candidate.default"
    assert env.reporter.diffs == [(rollout.DiffReport("a1", "1 containers, 1 would change (1 moved): "
                                                            "prod/web-0/web: 0-3 -> 4-7"), False)]
    assert env.reporter.reports == [rollout.Report("a1", rollout.APPLIED)] and len(env.applier.applied) == 2


def test_a_canary_of_an_older_cri_resmgr_pushes_without_a_diff(env):
    """A cri-resmgr without DryRunConfig (older than the agent) answers UNIMPLEMENTED: the rollout goes on."""
    env.stop_server()
    plane = ConfigPlane(env.applier, node_name=NODE)
    env.server = UnaryServer(env.sock, service_methods(CONFIG_SERVICE, {
        "SetConfig": lambda request: set_config(plane, request)}), "config").start()
    show(env, config_maps(GOOD, FINE))
    env.pusher.reconcile()
    assert env.reporter.diffs == [] and env.reporter.reports == [rollout.Report("a1", rollout.APPLIED)]


def test_the_diff_summary_is_bounded_and_names_the_first_containers():
    changes = [PlacementChange(f"ns/pod-{i:03}/{'c' * 60}", f"id{i}", "0-3", "4-7") for i in range(40)]
    changes.append(PlacementChange("ns/z/unpinned", "u", "4", "0-15", new_unpinned="not-enough-free-cpus"))
    changes.append(PlacementChange("ns/z/failed", "f", "5", "", error="no room"))
    summary = diff_summary(DryRun(policy="static", containers=100, changes=changes))
    assert summary.startswith("100 containers, 42 would change (40 moved, 1 unpinned, 1 failed): "
                              f"ns/pod-000/{'c' * 60}: 0-3 -> 4-7; ns/pod-001/")
    assert summary.endswith(" more in the agent's log") and len(summary) <= rollout.MAX_DIFF
    value = rollout.DiffReport("a1", summary).to_annotation()
    assert len(value) <= len("a1 ") + rollout.MAX_DIFF
    assert rollout.parse_diff(value) == rollout.DiffReport("a1", summary)
    huge = rollout.DiffReport("a1", "refused: " + "x" * 5000).to_annotation()
    assert len(huge) == len("a1 ") + rollout.MAX_DIFF and huge.endswith("...")
    assert diff_summary(DryRun(containers=7)) == "7 containers, none would move"
    assert diff_summary(DryRun(error="no")) == "refused: no" and rollout.parse_diff("a1") is None


def test_the_reporter_writes_the_diff_annotation_and_an_event():
    class Core:
        def __init__(self) -> None:
            self.patches, self.events = [], []

        def read_node(self, name):
            return client.V1Node(metadata=client.V1ObjectMeta(name=name, uid="u1"))

        def patch_node(self, name, body, **kw):
            self.patches.append(body)

        def create_namespaced_event(self, namespace, body):
            self.events.append(body)

    reporter = KubeReporter(client.ApiClient(), NODE)
    reporter.core = core = Core()
    selection = Selection(name="cri-resmgr-candidate.default", resource_version="3", data={}, attempt="a1")
    reporter.rollout_diff(selection, rollout.DiffReport("a1", "2 containers, none would move"), refused=False)
    assert core.patches == [{"metadata": {"annotations": {
        rollout.DIFF_ANNOTATION: "a1 2 containers, none would move"}}}]
    event = core.events[0]
    assert event.reason == "ConfigRolloutDryRun" and event.type == "Normal"
    assert event.message.endswith("dry run on this canary node: 2 containers, none would move")


def test_a_node_that_is_no_canary_stays_on_the_good_config(env):
    show(env, config_maps(GOOD))
    env.pusher.reconcile()
    show(env, config_maps(GOOD, FINE, canaries=("n2",)))
    env.later()
    assert env.pusher.pushes == 1 and env.reporter.reports == [] and env.applier.dry_runs == []
    assert env.applier.applied[-1][0]["policy"]["ReservedResources"] == {"cpu": "cpuset:0"}


def test_a_refused_candidate_is_reported_and_the_good_config_pushed_back(env):
    show(env, config_maps(GOOD))
    env.pusher.reconcile()
    show(env, config_maps(GOOD, SWITCH))
    env.later()
    assert len(env.reporter.reports) == 1
    report = env.reporter.reports[0]
    assert report.state == rollout.FAILED and "switching the active policy" in report.reason
    # The dry run said cri-resmgr would refuse it: reported, and never pushed (the push would meet the same checks).
    assert [(d.attempt, d.summary.startswith("refused: switching"), refused) for d, refused in env.reporter.diffs] \
        == [("a1", True, True)]
    assert len(env.applier.dry_runs) == 1
    # Pushed back within the same step, and the agent is healthy on it.
    assert env.reporter.configs[-2:] == [("cri-resmgr-candidate.default", env.reporter.configs[-2][1]),
                                         ("cri-resmgr-config.default", "")]
    assert env.pusher.pushes == 2 and env.pusher.health("config-status") == ""
    env.later()
    env.later()
    assert env.pusher.pushes == 2, "the failed attempt was selected again"


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
