"""ConfigPlane: validation, rejection keeps the old config, force-config, and the gRPC Config API."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import grpc
import pytest
from fixtures.config_bombs import BOMBS
from unit.resmgr.configplane.applier_helpers import RecordingApplier

from resmgr.agent.unix_grpc import unix_channel
from resmgr.configplane.adjustments import ContainerView
from resmgr.configplane.plane import ConfigPlane
from resmgr.configplane.server import serve_config
from resmgr.proto import config_pb2, config_pb2_grpc

GOOD = {"policy": "Active: topology-aware\nReservedResources:\n  cpu: cpuset:0\n"}
OTHER = {"policy": "Active: topology-aware\nReservedResources:\n  cpu: cpuset:1\n"}


def test_valid_config_is_applied_once_and_unchanged_is_not_reapplied():
    applier = RecordingApplier()
    plane = ConfigPlane(applier, node_name="n1")
    assert plane.set_config("n1", GOOD, "ConfigMap kube-system/cri-resmgr-config.default") == ""
    assert applier.applied[-1][0]["policy"]["ReservedResources"] == {"cpu": "cpuset:0"}
    assert plane.set_config("n1", dict(GOOD), "again") == ""
    assert len(applier.applied) == 1
    assert plane.set_config("n1", OTHER, "other") == ""
    assert len(applier.applied) == 2 and plane.status.source == "other"


@pytest.mark.parametrize("sections,needle", [
    ({"policy": "Active: [unclosed"}, "invalid YAML"),
    # an unknown field is a warning, but the known field beside it is still checked
    ({"policy": "Active: topology-aware\nBogus: 1\nReservedResources: [1]\n"}, "policy.ReservedResources"),
    ({"policy": "Active: topology-aware\n# " + "x" * (1024 * 1024) + "\n"}, "over the limit"),
    ({"policy": "Active: static\n"}, "switching the active policy"),
    *[({"rdt": text.split(":", 1)[1]}, message) for text, message in BOMBS.values()],
])
def test_bad_config_is_rejected_and_the_old_one_stays(sections, needle):
    applier = RecordingApplier()
    plane = ConfigPlane(applier)
    assert plane.set_config("", GOOD, "good") == ""
    error = plane.set_config("", sections, "bad")
    assert needle in error
    assert len(applier.applied) == 1 and plane.status.source == "good"
    assert plane.status.last_error == error


def test_unknown_fields_are_applied_without_them_and_logged(tmp_path: Path, caplog):
    """Dynamic configs (the agent) and the re-read force file: upstream ignores an unknown key, so do we,
    with a warning in cri-resmgr's log that names the key, the closest known one and where it came from."""
    import logging

    applier = RecordingApplier()
    plane = ConfigPlane(applier)
    sections = {"policy": "Active: topology-aware\nReservedResources:\n  cpu: cpuset:0\nReservedResource: 2\n",
                "polic": "Active: none\n"}
    with caplog.at_level(logging.WARNING, logger="resmgr.config"):
        assert plane.set_config("", sections, "ConfigMap kube-system/cri-resmgr-config.default") == ""
    assert applier.applied[-1][0] == {"policy": {"Active": "topology-aware", "ReservedResources": {"cpu": "cpuset:0"}}}
    assert plane.status.last_error == ""
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [(
        "WARNING", "config from ConfigMap kube-system/cri-resmgr-config.default: unknown fields, left out of the "
                   "config: polic (did you mean 'policy'?), "
                   "policy.ReservedResource (did you mean 'ReservedResources'?)")]

    force = tmp_path / "force.cfg"
    force.write_text("policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: cpuset:1\n  Activ: none\n")
    plane = ConfigPlane(applier, force_config=str(force))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="resmgr.config"):
        assert plane.reload_force_config() == ""
    assert applier.applied[-1] == ({"policy": {"Active": "topology-aware", "ReservedResources": {"cpu": "cpuset:1"}}},
                                   str(force), True)
    assert [r.getMessage() for r in caplog.records] == [
        f"config from {force}: unknown field, left out of the config: policy.Activ (did you mean 'Active'?)"]


def test_wrong_node_is_refused():
    plane = ConfigPlane(RecordingApplier(), node_name="n1")
    assert "this cri-resmgr runs on 'n1'" in plane.set_config("n2", GOOD)


def test_refused_agent_configs_are_counted_but_not_the_refusals_of_a_disabled_agent(tmp_path: Path):
    """on_agent_refused feeds cri_resmgr_config_errors_total{source="agent"}: a config the node could not use
    (wrong node, invalid, not applicable) counts; the agent being disabled by --force-config is the operator's
    choice, and a SIGHUP reload of the force file is counted by its caller."""
    refused: list[str] = []
    plane = ConfigPlane(RecordingApplier(), node_name="n1", on_agent_refused=refused.append)
    assert plane.set_config("n1", GOOD, "good") == ""
    assert refused == []
    plane.set_config("n2", GOOD, "wrong node")
    plane.set_config("n1", {"policy": "Active: [unclosed"}, "bad")
    plane.set_config("n1", {"policy": "Active: static\n"}, "not applicable")  # the applier refuses it
    assert len(refused) == 3 and "invalid YAML" in refused[1] and "switching the active policy" in refused[2]

    force = tmp_path / "force.cfg"
    force.write_text("policy: [broken\n")
    forced = ConfigPlane(RecordingApplier(), force_config=str(force), on_agent_refused=refused.append)
    assert "--force-config" in forced.set_config("", GOOD, "agent")
    assert "invalid YAML" in forced.reload_force_config()
    assert len(refused) == 3


def test_force_config_disables_the_agent_and_reloads_on_request(tmp_path: Path):
    force = tmp_path / "force.cfg"
    force.write_text("policy:\n  Active: topology-aware\n  ReservedResources:\n    cpu: cpuset:1\n")
    applier = RecordingApplier()
    plane = ConfigPlane(applier, force_config=str(force))
    assert "--force-config" in plane.set_config("", GOOD, "agent")
    assert applier.applied == []
    assert plane.reload_force_config() == ""
    assert applier.applied[-1][1:] == (str(force), True)
    force.write_text("policy: [broken\n")
    assert "invalid YAML" in plane.reload_force_config()
    assert len(applier.applied) == 1
    force.unlink()
    assert "cannot read" in plane.reload_force_config()


def test_adjustments_failures_of_the_applier_become_container_errors():
    web = ContainerView(id="c1", name="web", namespace="prod", pod_name="web-0")
    applier = RecordingApplier([web])
    applier.fail_containers = {"c1"}
    plane = ConfigPlane(applier, node_name="n1")
    spec = ('{"scope": [{"nodes": ["n*"], "containers": [{"key": "name", "operator": "Equals", '
            '"values": ["web"]}]}], "resources": {"requests": {"cpu": "1"}}}')
    outcomes, error = plane.set_adjustments("n1", {"prod/a": spec})
    assert error == ""
    assert outcomes["prod/a"].applied == []
    assert outcomes["prod/a"].container_errors == {"prod/web-0/web": "policy could not place it"}


@pytest.fixture
def config_server():
    applier = RecordingApplier([ContainerView(id="c1", name="web", namespace="prod", pod_name="web-0")])
    plane = ConfigPlane(applier, node_name="n1")
    workdir = tempfile.mkdtemp(prefix="cfg-", dir="/tmp")
    sock = os.path.join(workdir, "config.sock")
    server = serve_config(plane, sock)
    channel = unix_channel(sock)
    yield applier, config_pb2_grpc.ConfigStub(channel), sock
    channel.close()
    server.stop()
    shutil.rmtree(workdir, ignore_errors=True)


def test_grpc_set_config_and_adjustment(config_server):
    applier, stub, sock = config_server
    assert oct(os.stat(sock).st_mode & 0o777) == oct(0o660)
    reply = stub.SetConfig(config_pb2.SetConfigRequest(node_name="n1", config=GOOD, source="s"), timeout=10)
    assert reply.error == "" and applier.applied
    reply = stub.SetConfig(config_pb2.SetConfigRequest(node_name="n1", config={"policy": "x: ["}), timeout=10)
    assert "invalid YAML" in reply.error
    spec = '{"scope": [{}], "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}}'
    reply = stub.SetAdjustment(config_pb2.SetAdjustmentRequest(node_name="n1", adjustments={"prod/a": spec}),
                               timeout=10)
    assert reply.error == "" and list(reply.results["prod/a"].applied) == ["c1"]
    assert applier.overrides["c1"].request_milli == 2000


def test_grpc_rejects_garbage_bytes(config_server):
    _, _, sock = config_server
    channel = unix_channel(sock)
    call = channel.unary_unary("/criresmgr.v1.Config/SetConfig")
    with pytest.raises(grpc.RpcError) as err:
        call(b"\xff\xff\xff\xff", timeout=10)
    assert err.value.code() in (grpc.StatusCode.INTERNAL, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNKNOWN)
    channel.close()


def test_a_live_socket_is_not_taken_over(config_server):
    _, _, sock = config_server
    plane = ConfigPlane(RecordingApplier())
    with pytest.raises(Exception, match="another process|serving"):
        serve_config(plane, sock)


def test_refresh_applies_current_adjustments_to_new_containers():
    applier = RecordingApplier([])
    plane = ConfigPlane(applier, node_name="n1")
    plane.refresh_adjustments()  # nothing yet: no-op
    spec = '{"scope": [{"containers": [{"key": "name", "operator": "Equals", "values": ["web"]}]}], ' \
           '"resources": {"requests": {"cpu": "1"}}}'
    outcomes, _ = plane.set_adjustments("n1", {"prod/a": spec})
    assert outcomes["prod/a"].applied == [] and applier.overrides == {}
    applier.containers.append(ContainerView(id="c9", name="web", namespace="prod", pod_name="web-1"))
    plane.refresh_adjustments()
    assert applier.overrides["c9"].adjustment == "prod/a"
    assert plane.status.adjustments["prod/a"].applied == ["c9"]
