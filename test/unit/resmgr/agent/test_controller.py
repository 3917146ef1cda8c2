"""The agent's pusher against a real Config API server on a unix socket (cri-resmgr's side is a ConfigPlane)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time

import grpc
import pytest
from unit.resmgr.configplane.applier_helpers import RecordingApplier

from resmgr.agent.controller import AgentState, Pusher
from resmgr.agent.target import ConfigSocketTarget
from resmgr.configplane.adjustments import ContainerView
from resmgr.configplane.plane import ConfigPlane
from resmgr.configplane.server import serve_config

NODE = "n1"
DEFAULT = "cri-resmgr-config.default"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class RecordingReporter:
    def __init__(self) -> None:
        self.configs: list[tuple[str | None, str]] = []
        self.infos: list[tuple[str, bool]] = []
        self.warnings: list[str] = []
        self.adjustments: list[dict] = []

    def config_outcome(self, selection, error, info="", *, applied=True, warning=""):
        self.configs.append((selection.name if selection else None, error))
        self.infos.append((info, applied))
        self.warnings.append(warning)

    def adjustment_outcomes(self, results, adjustments):
        self.adjustments.append(dict(results))


def cm(name, rv, **data):
    return {"metadata": {"name": name, "namespace": "kube-system", "resourceVersion": rv}, "data": data}


def reserved(cpus: str) -> str:
    return f"Active: topology-aware\nReservedResources:\n  cpu: cpuset:{cpus}\n"


class Env:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="agent-", dir="/tmp")
        self.sock = os.path.join(self.dir, "config.sock")
        self.applier = RecordingApplier([ContainerView(id="c1", name="web", namespace="prod", pod_name="web-0")])
        self.server = None
        self.state = AgentState(NODE)
        self.clock = Clock()
        self.reporter = RecordingReporter()
        self.target = ConfigSocketTarget(self.sock, timeout=10, on_connection_lost=self.state.changed.set)
        self.pusher = Pusher(self.state, self.target, self.reporter, min_interval=1.0, clock=self.clock)

    def start_server(self, force_config: str | None = None) -> None:
        self.server = serve_config(ConfigPlane(self.applier, node_name=NODE, force_config=force_config), self.sock)

    def stop_server(self) -> None:
        if self.server is not None:
            self.server.stop(grace=0)
        self.server = None

    def set_cm(self, name: str, rv: str, **data: str) -> None:
        self.state.config_map_event("MODIFIED", cm(name, rv, **data))

    def later(self, seconds: float = 5.0) -> float | None:
        self.clock.now += seconds
        return self.pusher.reconcile()


@pytest.fixture
def env():
    e = Env()
    e.start_server()
    yield e
    e.target.close()
    if e.server is not None:
        e.stop_server()
    shutil.rmtree(e.dir, ignore_errors=True)


def test_pushes_once_and_never_again_while_unchanged(env):
    env.set_cm(DEFAULT, "1", policy=reserved("0"))
    env.pusher.reconcile()
    assert len(env.applier.applied) == 1 and env.pusher.pushes == 1
    assert env.reporter.configs == [(DEFAULT, "")]
    env.later()
    env.set_cm(DEFAULT, "2", policy=reserved("0"))  # new resourceVersion, same content
    env.later()
    assert env.pusher.pushes == 1 and env.pusher.health("config-status") == ""
    env.set_cm(DEFAULT, "3", policy=reserved("1"))
    env.later()
    assert env.pusher.pushes == 2
    assert env.applier.applied[-1][0]["policy"]["ReservedResources"] == {"cpu": "cpuset:1"}


def test_rate_limit_coalesces_a_burst_into_one_push_of_the_latest(env):
    env.set_cm(DEFAULT, "1", policy=reserved("0"))
    env.pusher.reconcile()
    env.set_cm(DEFAULT, "2", policy=reserved("1"))
    wait = env.later(0.2)
    assert wait == pytest.approx(0.8) and env.pusher.pushes == 1
    env.set_cm(DEFAULT, "3", policy=reserved("0-1"))
    env.later(0.3)
    assert env.pusher.pushes == 1
    assert env.later(0.6) is None
    assert env.pusher.pushes == 2
    assert env.applier.applied[-1][0]["policy"]["ReservedResources"] == {"cpu": "cpuset:0-1"}


@pytest.mark.parametrize("bad,needle", [
    ("Active: [oops", "invalid YAML"),
    ("Active: topology-aware\nReservedResources: [1]\n", "policy.ReservedResources"),
    ("Active: topology-aware\n#" + "x" * (1024 * 1024), "over the limit"),
])
def test_invalid_configmap_is_not_pushed_and_reported(env, bad, needle):
    env.set_cm(DEFAULT, "1", policy=reserved("0"))
    env.pusher.reconcile()
    env.set_cm(DEFAULT, "2", policy=bad)
    env.later()
    assert len(env.applier.applied) == 1 and env.pusher.pushes == 1
    health = env.pusher.health("config-status")
    assert needle in health and "cri-resmgr-config.default" in health and "\n" not in health
    assert env.reporter.configs[-1][0] == DEFAULT and needle in env.reporter.configs[-1][1]
    env.later()
    assert len(env.reporter.configs) == 2  # not reported again while unchanged
    env.set_cm(DEFAULT, "3", policy=reserved("1"))
    env.later()
    assert env.pusher.health("config-status") == "" and len(env.applier.applied) == 2


def test_rejected_by_cri_resmgr_is_not_retried_until_changed(env):
    env.set_cm(DEFAULT, "1", policy=reserved("0"))
    env.pusher.reconcile()
    env.set_cm(DEFAULT, "2", policy="Active: static\n")
    env.later()
    assert env.pusher.pushes == 2 and "switching the active policy" in env.pusher.health("config-status")
    env.later()
    env.later()
    assert env.pusher.pushes == 2


def test_unreachable_cri_resmgr_is_retried_with_backoff(env):
    env.stop_server()
    env.set_cm(DEFAULT, "1", policy=reserved("0"))
    first = env.pusher.reconcile()
    second = env.later(first + 1)  # past the rate limit too
    third = env.later(second + 1)
    assert first > 0 and second == 2 * first and third == 2 * second
    assert "cannot deliver to cri-resmgr" in env.pusher.health("config-status")
    assert env.applier.applied == [] and env.reporter.configs == []
    env.start_server()
    for _ in range(100):  # the channel reconnects with its own short backoff
        if env.later(third + 1) is None:
            break
        time.sleep(0.1)
    assert len(env.applier.applied) == 1 and env.pusher.health("config-status") == ""


def test_reconnect_delivers_again(env):
    env.set_cm(DEFAULT, "1", policy=reserved("0"))
    env.pusher.reconcile()
    epoch = env.target.epoch()
    env.stop_server()
    env.start_server()
    deadline = time.monotonic() + 30
    while env.target.epoch() == epoch and time.monotonic() < deadline:
        time.sleep(0.05)
    assert env.target.epoch() > epoch, "the lost connection was not noticed"
    env.later()
    assert len(env.applier.applied) == 2  # the restarted cri-resmgr got it again


def test_a_lost_connection_counts_even_when_grpc_never_reported_it_ready(env):
    """grpc's connectivity subscription may skip READY when a connection drops right after a call; the answered
    call itself proves the connection, so the next state that is not READY is a loss."""
    env.target._channel.unsubscribe(env.target._on_state)  # no READY callback at all: the skipped case
    env.set_cm(DEFAULT, "1", policy=reserved("0"))
    env.pusher.reconcile()
    assert env.applier.applied, "the push did not reach the server"
    epoch = env.target.epoch()
    env.target._on_state(grpc.ChannelConnectivity.TRANSIENT_FAILURE)
    assert env.target.epoch() == epoch + 1


def test_switching_between_configmaps_by_label(env):
    env.set_cm(DEFAULT, "1", policy=reserved("0"))
    env.set_cm("cri-resmgr-config.group.g", "2", policy=reserved("1"))
    env.set_cm("cri-resmgr-config.node.other", "3", policy=reserved("0-1"))
    env.state.node_event("ADDED", {"metadata": {"name": NODE, "labels": {}}})
    env.later()
    assert env.reporter.configs[-1] == (DEFAULT, "")
    env.state.node_event("MODIFIED", {"metadata": {"name": NODE,
                                                   "labels": {"cri-resource-manager.intel.com/group": "g"}}})
    env.later()
    assert env.reporter.configs[-1] == ("cri-resmgr-config.group.g", "")
    env.state.config_map_event("DELETED", cm("cri-resmgr-config.group.g", "4"))
    env.later()
    assert env.reporter.configs[-1] == (DEFAULT, "")
    assert [c[0]["policy"]["ReservedResources"]["cpu"] for c in env.applier.applied] == [
        "cpuset:0", "cpuset:1", "cpuset:0"]


def test_worker_pool_label_and_pool_configmap(env):
    """node > pool > group > default as labels and ConfigMaps come and go (issue 29 item 5)."""
    pool_label, group_label = "worker.gardener.cloud/pool", "cri-resource-manager.intel.com/group"

    def labels(**lb: str) -> None:
        env.state.node_event("MODIFIED", {"metadata": {"name": NODE, "labels": lb}})

    env.set_cm(DEFAULT, "1", policy=reserved("0"))
    env.set_cm("cri-resmgr-config.group.g", "2", policy=reserved("0"))
    env.set_cm("cri-resmgr-config.pool.p1", "3", policy=reserved("0-1"))
    env.set_cm("cri-resmgr-config.pool.p2", "4", policy=reserved("1"))
    labels(**{pool_label: "p1", group_label: "g"})
    env.later()
    assert env.reporter.configs[-1] == ("cri-resmgr-config.pool.p1", "")  # pool beats group
    labels(**{pool_label: "p2", group_label: "g"})
    env.later()
    assert env.reporter.configs[-1] == ("cri-resmgr-config.pool.p2", "")  # the label moved the node
    env.set_cm(f"cri-resmgr-config.node.{NODE}", "5", policy=reserved("0"))
    env.later()
    assert env.reporter.configs[-1] == (f"cri-resmgr-config.node.{NODE}", "")  # node beats pool
    env.state.config_map_event("DELETED", cm(f"cri-resmgr-config.node.{NODE}", "6"))
    env.later()
    assert env.reporter.configs[-1] == ("cri-resmgr-config.pool.p2", "")
    env.state.config_map_event("DELETED", cm("cri-resmgr-config.pool.p2", "7"))
    env.later()
    assert env.reporter.configs[-1] == ("cri-resmgr-config.group.g", "")
    labels(**{pool_label: "p1"})
    env.later()
    assert env.reporter.configs[-1] == ("cri-resmgr-config.pool.p1", "")
    labels()
    env.later()
    assert env.reporter.configs[-1] == (DEFAULT, "")
    assert [c[0]["policy"]["ReservedResources"]["cpu"] for c in env.applier.applied] == [
        "cpuset:0-1", "cpuset:1", "cpuset:0", "cpuset:1", "cpuset:0", "cpuset:0-1", "cpuset:0"]


def adjustment(name, nodes, cpu="1"):
    return {"metadata": {"name": name, "namespace": "kube-system"},
            "spec": {"scope": [{"nodes": nodes, "containers": [{"key": "name", "operator": "Equals",
                                                                 "values": ["web"]}]}],
                     "resources": {"requests": {"cpu": cpu}}}}


def test_adjustments_for_this_node_are_pushed_once(env):
    env.state.replace_adjustments([adjustment("mine", ["n*"]), adjustment("theirs", ["m*"])])
    env.pusher.reconcile()
    assert env.reporter.adjustments == [{"kube-system/mine": {"error": "", "container_errors": {},
                                                              "applied": ["c1"]}}]
    env.later()
    assert len(env.reporter.adjustments) == 1
    env.state.adjustment_event("MODIFIED", adjustment("conflict", [NODE]))
    env.later()
    result = env.reporter.adjustments[-1]
    assert "conflicts with adjustment" in result["kube-system/mine"]["container_errors"]["prod/web-0/web"]
    assert "conflicts with adjustment" in result["kube-system/conflict"]["container_errors"]["prod/web-0/web"]


def test_unknown_health_query(env):
    assert "unknown health query" in env.pusher.health("bogus")
    assert env.pusher.health("") == ""


def test_ignored_fields_are_information_and_the_config_is_pushed(env):
    env.set_cm(DEFAULT, "1", policy="Active: topology-aware\nballoons:\n  BalloonTypes:\n    - Name: a\n"
                                    "      ShareIdleCPUsInSame: numa\n",
               dump="Debug: true\n")
    env.pusher.reconcile()
    assert env.pusher.pushes == 1 and env.reporter.configs == [(DEFAULT, "")]
    info, applied = env.reporter.infos[-1]
    assert applied and info == ("accepted, not implemented by this cri-resmgr, ignored: "
                                "dump.Debug, policy.balloons.BalloonTypes[0].ShareIdleCPUsInSame")
    assert env.pusher.health("config-status") == ""
    assert env.applier.applied[-1][0]["policy"]["balloons"]["BalloonTypes"] == [{"Name": "a"}]


def test_unknown_fields_are_a_warning_and_the_config_is_pushed_without_them(env, caplog):
    """Upstream ignores an unknown key; the agent pushes the ConfigMap, cri-resmgr applies it without the key,
    and the node says which key and the closest known one, as a warning: no error, the agent stays Ready."""
    import logging

    env.set_cm(DEFAULT, "1", policy=reserved("0") + "ReservedResource: 2\n", dump="Debug: true\n")
    with caplog.at_level(logging.WARNING, logger="resmgr.agent"):
        env.pusher.reconcile()
    assert env.pusher.pushes == 1 and env.reporter.configs == [(DEFAULT, "")]
    assert env.reporter.warnings == ["unknown field, left out of the config: policy.ReservedResource "
                                     "(did you mean 'ReservedResources'?)"]
    assert env.reporter.infos == [("accepted, not implemented by this cri-resmgr, ignored: dump.Debug", True)]
    assert env.applier.applied[-1][0]["policy"] == {"Active": "topology-aware",
                                                    "ReservedResources": {"cpu": "cpuset:0"}}
    assert env.pusher.health("config-status") == "" and env.pusher.outcome.error == ""
    assert any(r.levelno == logging.WARNING and "policy.ReservedResource (did you mean" in r.getMessage()
               and DEFAULT in r.getMessage() for r in caplog.records)
    # fixed: the warning goes away with the next outcome
    env.set_cm(DEFAULT, "2", policy=reserved("0"))
    env.later()
    assert env.reporter.configs[-1] == (DEFAULT, "") and env.reporter.warnings[-1] == ""
    assert env.pusher.pushes == 2 and env.applier.applied[-1][0]["policy"]["ReservedResources"] == {"cpu": "cpuset:0"}


def test_force_config_wins_and_the_agent_stays_ready(env):
    """Upstream: with --force-config, dynamic configs are not applied; that is information, not an error."""
    env.stop_server()
    env.start_server(force_config="/etc/cri-resmgr/force.cfg")
    env.set_cm(DEFAULT, "1", policy=reserved("0"))
    env.pusher.reconcile()
    assert env.pusher.pushes == 1 and env.applier.applied == []
    assert env.reporter.configs == [(DEFAULT, "")]
    info, applied = env.reporter.infos[-1]
    assert not applied and info.startswith("force config in effect; dynamic configs not applied (")
    assert "--force-config /etc/cri-resmgr/force.cfg" in info
    assert env.pusher.health("config-status") == ""
    env.later()
    assert env.pusher.pushes == 1  # not pushed again while the ConfigMap is unchanged


def test_a_configmap_is_checked_once_however_often_its_push_is_retried(env, monkeypatch):
    """The agent's schema check is per ConfigMap content: retries of an undelivered push reuse its verdict."""
    import resmgr.agent.controller as controller

    checks: list[str] = []
    real = controller.check_config_sections

    def counting(data, *, source=""):
        checks.append(source)
        return real(data, source=source)

    monkeypatch.setattr(controller, "check_config_sections", counting)
    env.stop_server()
    env.set_cm(DEFAULT, "1", policy=reserved("0"))
    delay = env.pusher.reconcile()
    for _ in range(3):
        delay = env.later(delay + 1)
    assert env.pusher.pushes == 4 and len(checks) == 1
    env.set_cm(DEFAULT, "2", policy=reserved("1"))  # new content: checked again
    env.later(delay + 1)
    assert len(checks) == 2
