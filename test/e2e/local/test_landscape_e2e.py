"""The e2e scenarios (test/e2e/scenarios.py) on the local landscape: real kubelets, real
gardener-resource-manager, the extension as its Deployment on a seed node; gardenlet's part played
by its stand-in. One landscape serves the whole session; a scenario that deletes or hibernates the
shoot gets fresh nodes afterwards, as new machines.

Two scenarios of the real-Gardener run (test/e2e/gardener) are not run here, because on this landscape their checks
are a subset of scenarios that are (each would cost CI a shoot's fresh nodes and a roll for nothing new):
create_enable_delete (a shoot deleted with the extension enabled) is the end of enable_disable with reenable and of
hibernate_then_reconcile; enable_disable without reenable is the first half of enable_disable with it."""

from __future__ import annotations

import pytest
from e2e import scenarios
from e2e.targets import LandscapeTarget

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]


@pytest.fixture
def target(inside) -> LandscapeTarget:
    return LandscapeTarget(inside)


def test_enable_disable_reenable(target):
    scenarios.enable_disable(target, reenable=True)


def test_hibernate_then_reconcile(target):
    scenarios.hibernate_then_reconcile(target)


def test_worker_pool_selection(target):
    scenarios.worker_pool_selection(target)


def test_node_config_reaches_only_that_node(target):
    scenarios.node_config(target)


def test_base_config_change(target):
    scenarios.base_config_change(target)


def test_extension_pod_killed_during_rollout(target):
    scenarios.extension_pod_killed_during_rollout(target)


def test_staged_config_rollout(target):
    scenarios.staged_config_rollout(target)
