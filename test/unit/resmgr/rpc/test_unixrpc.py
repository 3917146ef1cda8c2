"""resmgr.rpc.unixrpc (unary gRPC on h2, unix sockets) and resmgr.relay.cri: cri-resmgr's own calls without grpcio."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from resmgr.proto import config_pb2
from resmgr.rpc.sockets import SocketInUse
from resmgr.rpc.unixrpc import RpcError, UnaryClient, UnaryServer, method_path, service_methods

CONFIG = config_pb2.DESCRIPTOR.services_by_name["Config"]
SET_CONFIG = method_path(CONFIG, "SetConfig")


def echo_methods(calls: list[object], release: threading.Event | None = None) -> dict:
    def set_config(request: config_pb2.SetConfigRequest) -> config_pb2.SetConfigReply:
        calls.append(request)
        if request.source == "not-found":
            raise RpcError("NOT_FOUND", "no such node")
        if request.source == "crash":
            raise ValueError("handler bug")
        if request.source == "slow" and release is not None:
            release.wait(10)
        return config_pb2.SetConfigReply(error=f"{request.node_name}:{len(request.config)}")

    return service_methods(CONFIG, {"SetConfig": set_config})


@pytest.fixture
def sock(tmp_path: Path) -> str:
    path = f"/tmp/rpc-{os.getpid()}-{tmp_path.name[-8:]}.sock"  # unix socket paths are short
    yield path
    if os.path.exists(path):
        os.unlink(path)


def test_roundtrip_status_codes_and_socket_mode(sock: str) -> None:
    calls: list[object] = []
    server = UnaryServer(sock, echo_methods(calls), "test").start()
    client = UnaryClient(sock)
    try:
        assert oct(os.stat(sock).st_mode & 0o777) == oct(0o660)
        reply = client.call(SET_CONFIG, config_pb2.SetConfigRequest(node_name="n1", config={"a": "b"}),
                            config_pb2.SetConfigReply, timeout=10)
        assert reply.error == "n1:1" and len(calls) == 1
        with pytest.raises(RpcError) as err:
            client.call(SET_CONFIG, config_pb2.SetConfigRequest(source="not-found"), config_pb2.SetConfigReply, 10)
        assert (err.value.code, err.value.message) == ("NOT_FOUND", "no such node")
        with pytest.raises(RpcError) as err:
            client.call(SET_CONFIG, config_pb2.SetConfigRequest(source="crash"), config_pb2.SetConfigReply, 10)
        assert err.value.code == "INTERNAL" and "handler bug" in err.value.message
        # Raw bytes go through unchanged both ways (the relay's container updates use this).
        raw = config_pb2.SetConfigRequest(node_name="raw").SerializeToString()
        assert config_pb2.SetConfigReply.FromString(client.call(SET_CONFIG, raw, bytes, 10)).error == "raw:0"
    finally:
        client.close()
        server.stop()
    assert not os.path.exists(sock)


def test_grpcio_clients_interoperate(sock: str) -> None:
    """The agent dials the Config API with grpcio: both stacks must agree on the wire."""
    server = UnaryServer(sock, echo_methods([]), "test").start()
    channel = grpc.insecure_channel("unix://" + sock)
    try:
        call = channel.unary_unary(SET_CONFIG, request_serializer=config_pb2.SetConfigRequest.SerializeToString,
                                   response_deserializer=config_pb2.SetConfigReply.FromString)
        assert call(config_pb2.SetConfigRequest(node_name="g", config={"x": "1", "y": "2"}), timeout=10).error == "g:2"
        with pytest.raises(grpc.RpcError) as err:
            call(config_pb2.SetConfigRequest(source="not-found"), timeout=10)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND and err.value.details() == "no such node"
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary(SET_CONFIG)(b"\xff\xff\xff", timeout=10)  # not a SetConfigRequest
        assert err.value.code() != grpc.StatusCode.OK
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary("/criresmgr.v1.Config/NoSuchMethod")(b"", timeout=10)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        channel.close()
        server.stop()


def test_unavailable_deadline_and_reconnect_after_restart(sock: str) -> None:
    client = UnaryClient(sock)
    request = config_pb2.SetConfigRequest(node_name="n")
    try:
        with pytest.raises(RpcError) as err:
            client.call(SET_CONFIG, request, config_pb2.SetConfigReply, 5)
        assert err.value.code == "UNAVAILABLE"

        release = threading.Event()
        server = UnaryServer(sock, echo_methods([], release), "test").start()
        with pytest.raises(RpcError) as err:
            client.call(SET_CONFIG, config_pb2.SetConfigRequest(source="slow"), config_pb2.SetConfigReply, 0.3)
        assert err.value.code == "DEADLINE_EXCEEDED"
        release.set()
        assert client.call(SET_CONFIG, request, config_pb2.SetConfigReply, 5).error == "n:0"

        # A restarted server on the same path: the old connection is closed, the client dials again.
        server.stop(grace=0)
        server = UnaryServer(sock, echo_methods([]), "test").start()
        deadline = time.monotonic() + 10
        while True:
            try:
                assert client.call(SET_CONFIG, request, config_pb2.SetConfigReply, 5).error == "n:0"
                break
            except RpcError as err:
                assert err.code == "UNAVAILABLE" and time.monotonic() < deadline, err
                time.sleep(0.05)
        server.stop()
    finally:
        client.close()


def test_a_live_socket_is_refused_and_a_stale_one_replaced(sock: str) -> None:
    server = UnaryServer(sock, echo_methods([]), "test").start()
    try:
        with pytest.raises(SocketInUse, match="another process is serving"):
            UnaryServer(sock, echo_methods([]), "second").start()
    finally:
        server.stop()
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(sock)
    stale.close()  # bound, never listening: what a killed process leaves behind
    server = UnaryServer(sock, echo_methods([]), "test").start()
    client = UnaryClient(sock)
    try:
        assert client.call(SET_CONFIG, config_pb2.SetConfigRequest(), config_pb2.SetConfigReply, 5).error == ":0"
    finally:
        client.close()
        server.stop()


def run_python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          check=True).stdout.strip()


def test_cri_resmgr_never_imports_grpcio_or_asyncio() -> None:
    """grpcio would add ~20 MB to the relay's RSS (bench-relay's rss_mb), asyncio with grpclib 3.5 MB;
    they must stay out of cri-resmgr."""
    out = run_python("import sys, resmgr.cli, resmgr.relay.server\n"
                     "print(sorted(m for m in sys.modules if m.split('.')[0] in ('grpc', 'grpclib', 'asyncio')"
                     " or m.startswith('grpc_')))")
    assert out == "[]"


def test_big_messages_both_ways_and_concurrent_callers(sock: str) -> None:
    """Messages far over HTTP/2's 64 KiB initial windows, from many threads on one connection."""
    def echo(request: config_pb2.SetConfigRequest) -> config_pb2.SetConfigReply:
        return config_pb2.SetConfigReply(error=request.config["blob"][::-1])

    server = UnaryServer(sock, service_methods(CONFIG, {"SetConfig": echo}), "test", max_workers=4).start()
    client = UnaryClient(sock)
    try:
        def call(i: int) -> None:
            blob = f"{i}-" + "x" * (3 << 20) + f"-{i}"
            reply = client.call(SET_CONFIG, config_pb2.SetConfigRequest(config={"blob": blob}),
                                config_pb2.SetConfigReply, 30)
            assert reply.error == blob[::-1]

        with futures.ThreadPoolExecutor(6) as pool:
            for result in [pool.submit(call, i) for i in range(6)]:
                result.result(60)  # raises what the call raised
    finally:
        client.close()
        server.stop()


def test_calls_a_grpcio_server(sock: str) -> None:
    """cri-resmgr calls the agent's Agent API, served by grpcio: big answers, errors and unknown methods."""
    def handler(request: bytes, context: grpc.ServicerContext) -> bytes:
        req = config_pb2.SetConfigRequest.FromString(request)
        if req.source == "not-found":
            context.abort(grpc.StatusCode.NOT_FOUND, "no such node: ünïcode % ok")
        return config_pb2.SetConfigReply(error="y" * (2 << 20)).SerializeToString()

    server = grpc.server(futures.ThreadPoolExecutor(2), options=[("grpc.max_send_message_length", 64 << 20),
                                                                 ("grpc.max_receive_message_length", 64 << 20)])
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "criresmgr.v1.Config", {"SetConfig": grpc.unary_unary_rpc_method_handler(handler)})])
    server.add_insecure_port("unix://" + sock)
    server.start()
    client = UnaryClient(sock)
    try:
        reply = client.call(SET_CONFIG, config_pb2.SetConfigRequest(), config_pb2.SetConfigReply, 10)
        assert len(reply.error) == 2 << 20
        with pytest.raises(RpcError) as err:
            client.call(SET_CONFIG, config_pb2.SetConfigRequest(source="not-found"), config_pb2.SetConfigReply, 10)
        assert (err.value.code, err.value.message) == ("NOT_FOUND", "no such node: ünïcode % ok")
        with pytest.raises(RpcError) as err:
            client.call("/criresmgr.v1.Config/NoSuchMethod", b"", bytes, 10)
        assert err.value.code == "UNIMPLEMENTED"
    finally:
        client.close()
        server.stop(0)


def test_cri_api_package_still_works_after_deferred_init() -> None:
    out = run_python("import resmgr.relay.cri, cri_api\n"
                     "from cri_api import RuntimeServiceStub, VersionRequest\n"
                     "from cri_api.v1 import api_pb2\n"
                     "assert VersionRequest is api_pb2.VersionRequest is resmgr.relay.cri.api_pb2.VersionRequest\n"
                     "print(RuntimeServiceStub.__module__)")
    assert out == "cri_api.v1.api_pb2_grpc"


STUCK_HANDLER_THEN_EXIT = """
import sys, threading
from resmgr.proto import config_pb2
from resmgr.rpc.unixrpc import RpcError, UnaryClient, UnaryServer, method_path, service_methods
CONFIG = config_pb2.DESCRIPTOR.services_by_name["Config"]
def stuck(request):
    threading.Event().wait()  # a handler that never returns (say, waiting on a lock forever)
server = UnaryServer(sys.argv[1], service_methods(CONFIG, {"SetConfig": stuck}), "test").start()
try:
    UnaryClient(sys.argv[1]).call(method_path(CONFIG, "SetConfig"), config_pb2.SetConfigRequest(),
                                  config_pb2.SetConfigReply, timeout=0.5)
except RpcError as err:
    print(err.code, flush=True)
server.stop(grace=0.1)
"""


def test_a_stuck_handler_never_keeps_the_process_from_exiting(sock: str) -> None:
    # The stdlib's ThreadPoolExecutor joins its threads at exit: a relay whose Config API handler
    # was stuck never exited on SIGTERM, and its node's poweroff waited for systemd to kill it.
    proc = subprocess.Popen([sys.executable, "-c", STUCK_HANDLER_THEN_EXIT, sock], stdout=subprocess.PIPE, text=True)
    try:
        out, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail("the process did not exit: a handler still running holds it")
    assert (proc.returncode, out.strip()) == (0, "DEADLINE_EXCEEDED")
