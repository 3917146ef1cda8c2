"""ManagedResource conditions mapped onto the Extension condition SystemComponentsHealthy."""

from __future__ import annotations

import datetime as dt

import pytest
from unit.extension.gardener.bodies import ext, mr

from extension.gardener import health


@pytest.mark.parametrize("obj,hibernated,expected", [
    (mr(), False, ("True", "HealthCheckSuccessful")),
    (mr(), True, ("True", "HealthCheckSuccessful")),
    (None, True, ("True", "HealthCheckSuccessful")),
    (None, False, ("False", "HealthCheckUnsuccessful")),  # Gardener's library: not found is False
    (mr(healthy="False"), False, ("False", "HealthCheckUnsuccessful")),
    (mr(applied="False"), False, ("False", "HealthCheckUnsuccessful")),
    (mr(healthy=None), False, ("False", "HealthCheckUnsuccessful")),
    (mr(progressing="True"), False, ("Progressing", "HealthCheckProgressing")),
    (mr(generation=2), False, ("Progressing", "HealthCheckProgressing")),
])
def test_health_mapping(obj, hibernated, expected):
    st, reason, message = health.assess(obj, hibernated=hibernated)
    assert (st, reason) == expected
    if hibernated:
        assert message == "Shoot is hibernated"


def test_is_healthy_checks_the_secret():
    assert health.is_healthy(mr(), secret_name="s1")
    assert not health.is_healthy(mr(), secret_name="s2")
    assert not health.is_healthy(mr(progressing="True"))


def test_condition_transition_time_moves_only_on_status_change():
    first = health.updated_condition(None, "True", "HealthCheckSuccessful", "ok")
    old = dict(first, lastTransitionTime="2000-01-01T00:00:00Z")
    same = health.updated_condition(old, "True", "HealthCheckSuccessful", "ok")
    assert same["lastTransitionTime"] == "2000-01-01T00:00:00Z"
    changed = health.updated_condition(old, "False", "HealthCheckUnsuccessful", "bad")
    assert changed["lastTransitionTime"] != "2000-01-01T00:00:00Z"
    merged = health.merge_conditions([{"type": "Other"}, old], changed)
    assert [c["type"] for c in merged] == ["Other", "SystemComponentsHealthy"]


AT = dt.datetime(2026, 11, 26, 12, 0, 0, tzinfo=dt.UTC)


def cond(status: str, since: dt.timedelta) -> dict:
    return {"type": "SystemComponentsHealthy", "status": status,
            "lastTransitionTime": (AT - since).strftime("%Y-%m-%dT%H:%M:%SZ")}


@pytest.mark.parametrize("old,expected", [
    (None, "Progressing"),  # first report
    (cond("True", dt.timedelta(hours=5)), "Progressing"),  # was healthy: a new roll starts
    (cond("Progressing", dt.timedelta(minutes=14)), "Progressing"),
    (cond("Progressing", dt.timedelta(minutes=16)), "False"),  # stuck past the threshold
    (cond("Unknown", dt.timedelta(minutes=16)), "False"),
    (cond("False", dt.timedelta(seconds=1)), "False"),  # once False, progressing does not clear it
])
def test_progressing_turns_false_after_the_threshold(old, expected):
    status, reason = health.past_progressing_threshold(old, "Progressing", "HealthCheckProgressing",
                                                       threshold=15 * 60, at=AT)
    assert status == expected
    assert reason == ("HealthCheckProgressing" if expected == "Progressing" else "HealthCheckUnsuccessful")
    # Other results pass through.
    assert health.past_progressing_threshold(old, "True", "HealthCheckSuccessful", threshold=0, at=AT) == \
        ("True", "HealthCheckSuccessful")


class _Recorder:
    """Only what check_and_report touches: the ManagedResource read and the status patch."""

    def __init__(self, mr_obj):
        self.mr, self.patches = mr_obj, []
        self.custom = self

    def get_namespaced_custom_object(self, *args):
        return self.mr

    def patch_namespaced_custom_object_status(self, group, version, ns, plural, name, body):
        self.patches.append(body)
        return body


def test_check_and_report_applies_the_threshold_to_a_stuck_roll():
    stuck = ext(last=("Reconcile", "Succeeded"))
    stuck["status"]["conditions"] = [{"type": "SystemComponentsHealthy", "status": "Progressing",
                                      "reason": "HealthCheckProgressing", "message": "rolling",
                                      "lastTransitionTime": "2000-01-01T00:00:00Z"}]
    new = health.check_and_report(_Recorder(mr(progressing="True")), stuck, None)
    assert (new["status"], new["reason"]) == ("False", "HealthCheckUnsuccessful")
    assert "is progressing" in new["message"]
    fresh = ext(last=("Reconcile", "Succeeded"))
    new = health.check_and_report(_Recorder(mr(progressing="True")), fresh, None)
    assert new["status"] == "Progressing"


def test_an_unhealthy_rollout_names_the_nodes_whose_records_failed():
    """A failing install makes the agent DaemonSet unavailable too; the health message says why, from the
    node records, instead of the symptom alone. A healthy rollout still lets the records decide."""
    failed = ("False", "HealthCheckUnsuccessful", "install failed on 1 node(s): n1: install failed: no unit")
    new = health.check_and_report(_Recorder(mr(healthy="False")), ext(last=("Reconcile", "Succeeded")), None,
                                  node_check=lambda m: failed)
    assert new["status"] == "False" and new["message"].endswith("; " + failed[2])
    new = health.check_and_report(_Recorder(mr(healthy="False")), ext(last=("Reconcile", "Succeeded")), None,
                                  node_check=lambda m: ("Progressing", "HealthCheckProgressing", "n1: no record yet"))
    assert new["status"] == "False" and "no record yet" not in new["message"]
    new = health.check_and_report(_Recorder(mr()), ext(last=("Reconcile", "Succeeded")), None,
                                  node_check=lambda m: failed)
    assert (new["status"], new["message"]) == ("False", failed[2])
