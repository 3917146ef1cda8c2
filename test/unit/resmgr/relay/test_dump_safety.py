"""The relay (root) writes dump files safely: confined, no symlinks, 0600, bounded, no secrets."""

from __future__ import annotations

import json
import os
import socket
import stat

import hpack
import pytest
from cri_api.v1 import api_pb2

from resmgr.config.dump_rules import DumpConfig, parse_dump_rules
from resmgr.relay import dump as dump_module
from resmgr.relay.dump import Dumper, dump_path
from resmgr.relay.hooks import NoopHook
from resmgr.relay.interception import Interceptor
from resmgr.relay.metrics import RelayMetrics
from resmgr.relay.splice import DATA, SpliceServer, _Connection

PATH = "/runtime.v1.RuntimeService/"


def dumper(tmp_path, file: str, rules: str = "full:.*") -> Dumper:
    return Dumper(DumpConfig(rules=parse_dump_rules(rules), file=file), directory=str(tmp_path))


def create_request(secret: str) -> bytes:
    req = api_pb2.CreateContainerRequest(pod_sandbox_id="pod1")
    req.config.metadata.name = "app"
    req.config.envs.add(key="PASSWORD", value=secret)
    req.config.envs.add(key="EMPTY", value="")
    return req.SerializeToString()


def test_a_file_outside_the_relay_dir_keeps_its_name_inside_it(tmp_path, caplog):
    d = dumper(tmp_path, "/tmp/cri-full-message.dump")  # upstream's documented example
    d.dump(PATH + "Version", "Version", b"", b"", None, 0.0)
    d.close()
    assert (tmp_path / "dump" / "cri-full-message.dump").read_text()
    assert "outside the relay's directory" in caplog.text
    assert dump_path("../../etc/passwd", tmp_path) == tmp_path / "dump" / "passwd"
    assert dump_path(str(tmp_path / "mine.jsonl"), tmp_path) == tmp_path / "mine.jsonl"


def test_dump_file_is_private(tmp_path):
    d = dumper(tmp_path, str(tmp_path / "d.jsonl"))
    d.dump(PATH + "Version", "Version", b"", b"", None, 0.0)
    d.close()
    assert stat.S_IMODE(os.stat(tmp_path / "d.jsonl").st_mode) == 0o600


def test_a_planted_symlink_is_not_followed(tmp_path, caplog):
    target = tmp_path / "target"
    target.write_text("precious\n")
    (tmp_path / "d.jsonl").symlink_to(target)
    d = dumper(tmp_path, str(tmp_path / "d.jsonl"))
    d.dump(PATH + "Version", "Version", b"", b"", None, 0.0)
    d.close()
    assert target.read_text() == "precious\n"
    assert "cannot open dump file" in caplog.text


def test_environment_values_are_redacted(tmp_path):
    for level in ("full", "short"):
        d = dumper(tmp_path, str(tmp_path / f"{level}.jsonl"), rules=f"{level}:.*")
        entry = d.dump(PATH + "CreateContainer", "CreateContainer", create_request("hunter2"),
                       api_pb2.CreateContainerResponse(container_id="c1").SerializeToString(), None, 0.0)
        d.close()
        assert entry is not None and "<redacted>" in entry["request"] and "PASSWORD" in entry["request"]
        assert "hunter2" not in (tmp_path / f"{level}.jsonl").read_text()


def test_the_file_is_rotated_at_its_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(dump_module, "MAX_DUMP_BYTES", 4096)
    d = dumper(tmp_path, str(tmp_path / "d.jsonl"))
    for _ in range(200):
        d.dump(PATH + "CreateContainer", "CreateContainer", create_request("x"), b"", None, 0.0)
    d.close()
    current, older = tmp_path / "d.jsonl", tmp_path / "d.jsonl.1"
    assert older.exists() and current.stat().st_size <= 4096 and older.stat().st_size <= 4096
    assert all(json.loads(line)["method"] == "CreateContainer" for line in current.read_text().splitlines())


@pytest.mark.parametrize("method,kept", [("GetContainerEvents", False), ("ListContainers", True)])
def test_dumped_streams_do_not_keep_their_responses(tmp_path, method, kept):
    """A dumped server stream (GetContainerEvents runs for the node's lifetime) keeps no response bytes."""
    server = SpliceServer(relay_socket="unused", runtime_socket="unused",
                          interceptor=Interceptor(NoopHook(), RelayMetrics(), lambda raw: None),
                          metrics=RelayMetrics(), dumper=dumper(tmp_path, str(tmp_path / "d.jsonl")),
                          intercepted=frozenset())
    a, b = socket.socketpair()
    c, d = socket.socketpair()
    try:
        connection = _Connection(server, a, c)
        block = hpack.Encoder().encode([(":method", "POST"), (":path", PATH + method)])
        connection._request_headers(1, block)
        connection._response_frame(DATA, 0, 1, memoryview(b"\x00" * 1000))
        assert bool(connection.streams[1].response) == kept
    finally:
        for sock in (a, b, c, d):
            sock.close()
