"""One NRI connection over a socketpair, the runtime's side written byte by byte in the test."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from resmgr.nri import mux, ttrpc
from resmgr.nri.connection import CallError, NriConnection
from resmgr.nri.ttrpc_pb2 import Request, Response


class Runtime:
    """containerd's end: reads chunks, answers the plugin's calls, sends requests to the plugin."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.streams = mux.Demux()
        self.parsers = {1: ttrpc.FrameParser(), 2: ttrpc.FrameParser()}

    def send(self, conn_id: int, frame: bytes, piecewise: bool = False) -> None:
        data = mux.encode(conn_id, frame)
        if piecewise:
            for i in range(len(data)):
                self.sock.sendall(data[i:i + 1])
        else:
            self.sock.sendall(data)

    def receive(self, conn_id: int) -> ttrpc.Frame:
        while True:
            data = self.sock.recv(65536)
            assert data, "plugin closed the connection"
            for cid, payload in self.streams.feed(data):
                frames = self.parsers[cid].feed(payload)
                if cid == conn_id and frames:
                    return frames[0]


def echo(service: str, method: str, payload: bytes) -> bytes:
    if method == "Missing":
        raise LookupError("no such method")
    return f"{service}/{method}:".encode() + payload


@pytest.fixture
def pair() -> Iterator[tuple[NriConnection, Runtime]]:
    ours, theirs = socket.socketpair()
    theirs.settimeout(5)
    conn = NriConnection(ours, echo, lambda err: ttrpc.CODE_UNIMPLEMENTED if isinstance(err, LookupError)
                         else ttrpc.CODE_INTERNAL).start()
    yield conn, Runtime(theirs)
    conn.close()
    theirs.close()


def test_requests_on_the_plugin_connection_are_served_even_when_fragmented(pair) -> None:
    conn, runtime = pair
    request = Request(service="svc", method="Configure", payload=b"abc").SerializeToString()
    runtime.send(mux.PLUGIN_CONN, ttrpc.encode_frame(7, ttrpc.TYPE_REQUEST, request), piecewise=True)
    frame = runtime.receive(mux.PLUGIN_CONN)
    assert (frame.stream_id, frame.type) == (7, ttrpc.TYPE_RESPONSE)
    assert Response.FromString(frame.payload).payload == b"svc/Configure:abc"


def test_a_failing_method_answers_with_its_status(pair) -> None:
    conn, runtime = pair
    request = Request(service="svc", method="Missing").SerializeToString()
    runtime.send(mux.PLUGIN_CONN, ttrpc.encode_frame(3, ttrpc.TYPE_REQUEST, request))
    status = Response.FromString(runtime.receive(mux.PLUGIN_CONN).payload).status
    assert status.code == ttrpc.CODE_UNIMPLEMENTED and "no such method" in status.message


def test_calls_on_the_runtime_connection_and_unknown_ids_are_ignored(pair) -> None:
    conn, runtime = pair
    result: dict[str, object] = {}

    def call() -> None:
        try:
            result["answer"] = conn.call("rt", "RegisterPlugin", Request(method="x"), Request, timeout=5)
        except CallError as err:
            result["error"] = err

    caller = threading.Thread(target=call)
    caller.start()
    frame = runtime.receive(mux.RUNTIME_CONN)
    assert frame.stream_id == 1 and Request.FromString(frame.payload).method == "RegisterPlugin"
    # A chunk for a connection nobody opened, and an answer to a stream nobody waits for: both dropped.
    runtime.sock.sendall(mux.encode(9, b"garbage that is not ttrpc"))
    runtime.send(mux.RUNTIME_CONN, ttrpc.encode_response(99, b""))
    runtime.send(mux.RUNTIME_CONN, ttrpc.encode_response(1, Request(method="ok").SerializeToString()))
    caller.join(5)
    assert result["answer"] == Request(method="ok")
    assert not conn.closed.is_set()


def test_an_error_status_raises_call_error(pair) -> None:
    conn, runtime = pair
    errors: list[CallError] = []

    def call() -> None:
        try:
            conn.call("rt", "UpdateContainers", Request(), Request, timeout=5)
        except CallError as err:
            errors.append(err)

    caller = threading.Thread(target=call)
    caller.start()
    frame = runtime.receive(mux.RUNTIME_CONN)
    runtime.send(mux.RUNTIME_CONN, ttrpc.encode_error(frame.stream_id, ttrpc.CODE_INTERNAL, "boom"))
    caller.join(5)
    assert errors and errors[0].code == ttrpc.CODE_INTERNAL


def test_broken_framing_closes_the_connection_and_fails_waiting_calls(pair) -> None:
    conn, runtime = pair
    errors: list[CallError] = []

    def call() -> None:
        try:
            conn.call("rt", "RegisterPlugin", Request(), Request, timeout=5)
        except CallError as err:
            errors.append(err)

    caller = threading.Thread(target=call)
    caller.start()
    runtime.receive(mux.RUNTIME_CONN)
    runtime.sock.sendall(mux.HEADER.pack(2, mux.MAX_CHUNK + 1))
    assert conn.closed.wait(5)
    caller.join(5)
    assert errors and errors[0].code == ttrpc.CODE_UNAVAILABLE
