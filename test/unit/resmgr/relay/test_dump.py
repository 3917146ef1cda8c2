"""Dump rules in cri-resource-manager's format, and the entries they produce."""

from __future__ import annotations

import json

import pytest
from cri_api.v1 import api_pb2

from resmgr.config.dump_rules import DumpConfig, DumpConfigError, parse_dump_rules
from resmgr.relay.dump import Dumper

CRI_RM_EXAMPLE = "off:.*,short:((Create)|(Start)|(Run)|(Update)|(Stop)|(Remove)).*"
PATH = "/runtime.v1.RuntimeService/"


def test_example_rules_from_cri_resource_manager():
    config = DumpConfig(rules=parse_dump_rules(CRI_RM_EXAMPLE))
    assert config.level_for("CreateContainer") == "short"
    assert config.level_for("RunPodSandbox") == "short"
    assert config.level_for("UpdateContainerResources") == "short"
    assert config.level_for("ListContainers") == "off"
    assert config.level_for("Version") == "off"


def test_last_matching_rule_wins_and_match_is_whole_name():
    config = DumpConfig(rules=parse_dump_rules("full:.*,off:List.*,short:ListContainers"))
    assert config.level_for("Version") == "full"
    assert config.level_for("ListPodSandbox") == "off"
    assert config.level_for("ListContainers") == "short"
    # "Create" alone does not match "CreateContainer": rules match the whole name.
    assert DumpConfig(rules=parse_dump_rules("full:Create")).level_for("CreateContainer") == "off"


@pytest.mark.parametrize("text, problem", [
    ("loud:.*", "LEVEL one of"),
    ("full", "LEVEL:REGEXP"),
    ("full:(unclosed", "invalid regexp"),
])
def test_bad_rules_are_named(text, problem):
    with pytest.raises(DumpConfigError) as err:
        parse_dump_rules(text)
    assert problem in str(err.value)  # the schema adds the path, dump.Config (test_sections)


def test_full_and_short_entries_go_to_the_file(tmp_path):
    file = tmp_path / "dump.jsonl"
    dumper = Dumper(DumpConfig(rules=parse_dump_rules("full:Create.*,short:Start.*"), file=str(file)),
                    directory=str(tmp_path))
    req = api_pb2.CreateContainerRequest(pod_sandbox_id="pod1")
    req.config.metadata.name = "ctr"
    resp = api_pb2.CreateContainerResponse(container_id="c1")
    dumper.dump(PATH + "CreateContainer", "CreateContainer", req.SerializeToString(), resp.SerializeToString(),
                None, 0.0012)
    dumper.dump(PATH + "StartContainer", "StartContainer",
                api_pb2.StartContainerRequest(container_id="c1").SerializeToString(), None,
                "NOT_FOUND: no such container", 0.0005)
    assert dumper.dump(PATH + "Version", "Version", b"", b"", None, 0.1) is None
    dumper.close()
    entries = [json.loads(line) for line in file.read_text().splitlines()]
    assert [e["method"] for e in entries] == ["CreateContainer", "StartContainer"]
    full, short = entries
    assert 'pod_sandbox_id: "pod1"' in full["request"] and "\n" in full["request"]
    assert 'container_id: "c1"' in full["response"]
    assert full["latency_ms"] == 1.2 and full["ts"].endswith("Z")
    assert short["error"] == "NOT_FOUND: no such container" and "response" not in short
    assert short["request"] == 'container_id: "c1"'


def test_undecodable_and_unknown_messages_are_described_not_fatal(tmp_path):
    dumper = Dumper(DumpConfig(rules=parse_dump_rules("full:.*")))
    entry = dumper.dump(PATH + "CreateContainer", "CreateContainer", b"\xff\xff\xff", b"", None, 0.0)
    assert "undecodable" in entry["request"]
    entry = dumper.dump("/x.Y/Z", "/x.Y/Z", b"abc", b"", None, 0.0)
    assert "unknown message type" in entry["request"]


def test_unwritable_dump_file_falls_back_to_log(tmp_path, caplog):
    (tmp_path / "not-a-dir").write_text("")
    dumper = Dumper(DumpConfig(rules=parse_dump_rules("full:.*"), file=str(tmp_path / "not-a-dir" / "d")),
                    directory=str(tmp_path))
    assert "cannot open dump file" in caplog.text
    assert dumper.dump(PATH + "Version", "Version", b"", b"", None, 0.0) is not None


def test_reconfigure_changes_levels(tmp_path):
    dumper = Dumper(DumpConfig())
    assert not dumper.enabled("Version")
    dumper.reconfigure(DumpConfig(rules=parse_dump_rules("short:Version")))
    assert dumper.level("Version") == "short"
