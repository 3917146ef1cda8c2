"""ManagedResource conditions mapped onto the Extension condition SystemComponentsHealthy."""

from __future__ import annotations

import pytest
from unit.extension.gardener.bodies import mr

from extension.gardener import health


@pytest.mark.parametrize("obj,hibernated,expected", [
    (mr(), False, ("True", "HealthCheckSuccessful")),
    (mr(), True, ("True", "HealthCheckSuccessful")),
    (None, True, ("True", "HealthCheckSuccessful")),
    (None, False, ("Unknown", "ConditionCheckError")),
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
