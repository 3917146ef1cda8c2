"""The cri-resmgr program: startup (runtime wait, stale socket), SIGTERM drain, SIGHUP reload, bad flags."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import grpc
import pytest
from cri_api.v1 import api_pb2, api_pb2_grpc
from fixtures.cri_objects import make_container_config, make_pod_config, write_json
from integration.relay.relay_process import RelayProcess, SocketPump, answers_version, cri_resmgr_executable


@pytest.fixture
def workdir():
    path = Path(tempfile.mkdtemp(prefix="relay-lc-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def wait_for(check, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_sigterm_drains_in_flight_calls(containerd, workdir, tmp_path):
    relay = RelayProcess(workdir, containerd.socket).start()
    try:
        ep = relay.endpoint
        pod_cfg = write_json(tmp_path / "pod.json", make_pod_config("drain"))
        pod_id = containerd.crictl("runp", pod_cfg, endpoint=ep).stdout.strip()
        cid = containerd.crictl("create", pod_id, write_json(tmp_path / "c.json", make_container_config("c")),
                                pod_cfg, endpoint=ep).stdout.strip()
        containerd.crictl("start", cid, endpoint=ep)
        result: dict[str, object] = {}
        marker = f"relay-drain-{os.getpid()}-{time.monotonic_ns()}"

        def slow_exec() -> None:
            with grpc.insecure_channel(ep) as channel:
                try:
                    command = ["sh", "-c", f"sleep 2; echo drained; : {marker}"]
                    result["response"] = api_pb2_grpc.RuntimeServiceStub(channel).ExecSync(
                        api_pb2.ExecSyncRequest(container_id=cid, cmd=command), timeout=60)
                except grpc.RpcError as err:
                    result["error"] = err
        caller = threading.Thread(target=slow_exec)
        caller.start()
        # SIGTERM once the call is inside the runtime (the exec'd process shows up under the shim).
        wait_for(lambda: marker.encode() in subprocess.run(["ps", "-eo", "args"], capture_output=True).stdout,
                 "the exec to start")
        relay.signal(signal.SIGTERM)
        caller.join(60)
        assert "error" not in result, result.get("error")
        assert result["response"].stdout == b"drained\n"
        assert relay.wait(30) == 0
        assert not os.path.exists(relay.socket) and not relay.pid_file.exists()
        messages = [e["msg"] for e in relay.log_entries()]
        assert "relay draining in-flight calls" in messages and "relay stopped" in messages
        # A stuck shutdown would end by force: the default 5 s grace plus 30 s.
        received = [e for e in relay.log_entries() if e["msg"] == "received SIGTERM; shutting down"]
        assert received and received[0]["force_exit_after_s"] == 35.0
    finally:
        relay.stop()
        containerd.remove_all()


def test_sighup_reloads_forced_config(containerd, workdir):
    dump = workdir / "state" / "dump.jsonl"  # dump files stay in the relay dir
    config = workdir / "force.cfg"
    config.write_text("dump:\n  Config: 'off:.*'\n")
    relay = RelayProcess(workdir, containerd.socket, args=["--force-config", str(config)]).start()
    try:
        answers_version(relay.endpoint)
        assert not dump.exists()
        config.write_text(f"dump:\n  Config: 'full:Version'\n  File: {dump}\nlogger:\n  Debug: relay\n")
        relay.signal(signal.SIGHUP)
        wait_for(lambda: any(e["msg"] == "SIGHUP: reloaded forced config" for e in relay.log_entries()),
                 "the reload")
        answers_version(relay.endpoint)
        # Entries are written once the call is complete, which may be just after the client has its answer.
        wait_for(lambda: dump.exists() and dump.read_text().strip(), "the dump entry")
        entries = [json.loads(line) for line in dump.read_text().splitlines()]
        assert entries and entries[-1]["method"] == "Version" and "containerd" in entries[-1]["response"]
        # A broken config on SIGHUP keeps the current one and says why.
        config.write_text("dump:\n  Config: 'loud:.*'\n")
        relay.signal(signal.SIGHUP)
        wait_for(lambda: any("keeping the current config" in e["msg"] for e in relay.log_entries()), "rejection")
        before = len(dump.read_text().splitlines())
        answers_version(relay.endpoint)
        wait_for(lambda: len(dump.read_text().splitlines()) == before + 1, "the next dump entry")
    finally:
        relay.stop()


def test_waits_for_missing_runtime_then_serves(containerd, workdir):
    late = str(workdir / "late-runtime.sock")
    relay = RelayProcess(workdir, late).start(wait=False)
    pump = None
    try:
        wait_for(lambda: any("runtime socket does not exist" in e["msg"] for e in relay.log_entries()),
                 "the relay to report the missing runtime")
        assert not os.path.exists(relay.socket)  # no serving before the runtime is there
        pump = SocketPump(late, containerd.socket).start()
        wait_for(lambda: answers_version(relay.endpoint), "the relay to serve once the runtime appears", 60)
        assert any(e["msg"] == "runtime is up" for e in relay.log_entries())
    finally:
        relay.stop()
        if pump:
            pump.stop()


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([cri_resmgr_executable(), *args], capture_output=True, text=True, timeout=timeout)


def test_gives_up_on_missing_runtime_with_timeout(workdir):
    r = run_cli("--relay-socket", str(workdir / "r.sock"), "--runtime-socket", str(workdir / "none.sock"),
                "--pid-file", "", "--relay-dir", str(workdir / "d"), "--metrics-address", "off",
                "--runtime-wait-timeout", "1")
    assert r.returncode == 1
    assert "waiting for the runtime" in r.stderr
    assert "gave up waiting for the runtime" in r.stderr and "does not exist" in r.stderr


def test_stale_socket_is_replaced_and_non_socket_refused(containerd, workdir):
    stale = workdir / "relay.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()  # leaves a socket file nobody listens on
    relay = RelayProcess(workdir, containerd.socket).start()
    relay.stop()
    other = workdir / "other"
    other.mkdir()
    (other / "relay.sock").write_text("not a socket")
    r = run_cli("--relay-socket", str(other / "relay.sock"), "--runtime-socket", containerd.socket,
                "--pid-file", "", "--relay-dir", str(other / "d"), "--metrics-address", "off")
    assert r.returncode == 1 and "is not a socket; refusing to remove it" in r.stderr
    assert (other / "relay.sock").read_text() == "not a socket"


def test_live_relay_socket_is_not_stolen(containerd, workdir):
    relay = RelayProcess(workdir, containerd.socket).start()
    try:
        r = run_cli("--relay-socket", relay.socket, "--runtime-socket", containerd.socket, "--pid-file", "",
                    "--relay-dir", str(workdir / "d2"), "--metrics-address", "off")
        assert r.returncode == 1 and "another process is serving" in r.stderr
        assert answers_version(relay.endpoint)
    finally:
        relay.stop()


def test_bad_flags(workdir):
    # A bad config file no longer stops cri-resmgr: test_startup_config_fallback.py.
    r = run_cli("--log-format", "xml")
    assert r.returncode == 2 and "invalid choice" in r.stderr
    for flag, value, problem in (("--workers", "0", "at least 1"), ("--shutdown-grace", "-1", "negative"),
                                 ("--runtime-wait-timeout", "soon", "not a number"),
                                 ("--transport", "carrier-pigeon", "invalid choice")):
        r = run_cli(flag, value)
        assert r.returncode == 2 and problem in r.stderr, (flag, r.stderr)
    r = run_cli("--metrics-address", "nonsense", "--runtime-socket", str(workdir / "none.sock"),
                "--relay-socket", str(workdir / "r.sock"), "--pid-file", "", "--relay-dir", str(workdir / "d"),
                "--runtime-wait-timeout", "0")
    assert "cannot serve metrics on nonsense" in r.stderr  # reported, and not fatal by itself
    assert r.returncode == 1 and "gave up waiting for the runtime" in r.stderr


def test_help_version_and_policies():
    r = run_cli("--help")
    assert r.returncode == 0
    for flag in ("--relay-socket", "--runtime-socket", "--image-socket", "--relay-dir", "--fallback-config",
                 "--force-config", "--reset-config", "--reset-policy", "--disable-policy-switch", "--debug",
                 "--log-format", "--list-policies", "--metrics-address"):
        assert flag in r.stdout, flag
    assert "NOT ACTIVE" not in r.stdout  # every flag is wired now
    assert run_cli("--version").stdout.startswith("cri-resmgr ")
    r = run_cli("--list-policies")
    assert r.returncode == 0 and "none" in r.stdout.split()
