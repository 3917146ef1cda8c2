"""The splice transport at the HTTP/2 frame level, between two real HTTP/2 stacks (the h2 library).

A client and an upstream server, each a full h2 connection over a socketpair, talk through
one spliced connection. This exercises what kubelet and containerd rarely show on demand:
padded frames, header blocks split into CONTINUATION frames, and requests rewritten to a
different size, after which both ends must still agree on the flow-control window.
"""

from __future__ import annotations

import socket
import threading

import h2.config
import h2.connection
import h2.events
import pytest
from cri_api.v1 import api_pb2

from devland.waiting import eventually
from resmgr.relay.dump import Dumper
from resmgr.relay.hooks import INTERCEPTED_METHODS, HookResult, NoopHook
from resmgr.relay.interception import Interceptor
from resmgr.relay.metrics import RelayMetrics
from resmgr.relay.splice import SpliceServer, _Connection
from resmgr.rpc.wire import grpc_frame, grpc_message

CREATE = "/runtime.v1.RuntimeService/CreateContainer"


def counted(metrics: RelayMetrics, method: str, expected: int) -> bool:
    """The relay counts a call once its last frame is relayed, a moment after the client has it."""
    for _ in range(100):
        if metrics.registry.get_sample_value("cri_resmgr_requests_total", {"method": method, "code": "OK"}) \
                == expected:
            return True
        threading.Event().wait(0.05)
    return False
VERSION = "/runtime.v1.RuntimeService/Version"


class Upstream(threading.Thread):
    """An HTTP/2 server answering every call with its request size, like a gRPC runtime would."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(daemon=True)
        self.sock = sock
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
        self.requests: dict[int, tuple[dict[bytes, bytes], bytearray]] = {}
        self.lock = threading.Lock()
        self.replies: dict[bytes, bytes] = {}  # path -> the message to answer with (default: a create's answer)

    def run(self) -> None:
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())
        while data := self.sock.recv(65536):
            with self.lock:
                for event in self.conn.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        self.requests[event.stream_id] = (dict(event.headers), bytearray())
                    elif isinstance(event, h2.events.DataReceived):
                        self.requests[event.stream_id][1].extend(event.data)
                        self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    elif isinstance(event, h2.events.StreamEnded):
                        headers, body = self.requests[event.stream_id]
                        reply = grpc_frame(self.replies.get(headers[b":path"]) or api_pb2.CreateContainerResponse(
                            container_id=f"c{len(body)}").SerializeToString())
                        sid = event.stream_id
                        self.conn.send_headers(sid, [(b":status", b"200"), (b"content-type", b"application/grpc")])
                        for i in range(0, len(reply), 16000):  # within the default frame size
                            self.conn.send_data(sid, reply[i:i + 16000], pad_length=7)
                        self.conn.send_headers(sid, [(b"grpc-status", b"0")], end_stream=True)
                self.sock.sendall(self.conn.data_to_send())


class Client:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())
        self.sock.settimeout(10)

    def call(self, path: str, message: bytes, extra_headers: list[tuple[bytes, bytes]] = (), pad: int = 0
             ) -> tuple[bytes, dict[bytes, bytes]]:
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [(b":method", b"POST"), (b":scheme", b"http"), (b":path", path.encode()),
                                     (b":authority", b"relay"), (b"content-type", b"application/grpc"),
                                     (b"te", b"trailers"), *extra_headers])
        data = grpc_frame(message)
        step = 16000
        for i in range(0, len(data), step):
            last = i + step >= len(data)
            self.conn.send_data(sid, data[i:i + step], end_stream=last, pad_length=pad or None)
        self.sock.sendall(self.conn.data_to_send())
        body, trailers = bytearray(), {}
        while True:
            data = self.sock.recv(65536)
            assert data, "relay closed the connection"
            for event in self.conn.receive_data(data):
                if isinstance(event, h2.events.DataReceived) and event.stream_id == sid:
                    body += event.data
                    self.conn.acknowledge_received_data(event.flow_controlled_length, sid)
                elif isinstance(event, h2.events.TrailersReceived) and event.stream_id == sid:
                    trailers = dict(event.headers)
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == sid:
                    self.sock.sendall(self.conn.data_to_send())
                    return bytes(body), trailers
            self.sock.sendall(self.conn.data_to_send())


class Growing(NoopHook):
    def before(self, method, request):
        request.config.annotations["padding"] = "x" * 30000
        return HookResult(request=request)


@pytest.fixture
def spliced():
    def make(hook, observers=None):
        client_sock, relay_client = socket.socketpair()
        relay_upstream, upstream_sock = socket.socketpair()
        metrics = RelayMetrics()
        interceptor = Interceptor(hook, metrics, lambda raw: None)
        server = SpliceServer(relay_socket="unused", runtime_socket="unused", interceptor=interceptor,
                              metrics=metrics, dumper=Dumper(),
                              intercepted=frozenset(f"/runtime.v1.RuntimeService/{m}" for m in INTERCEPTED_METHODS),
                              observers=observers)
        connection = _Connection(server, relay_client, relay_upstream)
        threading.Thread(target=connection.run, daemon=True).start()
        upstream = Upstream(upstream_sock)
        upstream.start()
        made.append((client_sock, upstream_sock, upstream, connection))
        return Client(client_sock), upstream, metrics, connection
    made = []
    yield make
    for client_sock, upstream_sock, upstream, connection in made:
        client_sock.close()
        # The upstream thread may be in recv(): end its stream and let it finish before the socket goes,
        # or its recv() on a closed descriptor fails in the thread (EBADF, a pytest warning).
        upstream_sock.shutdown(socket.SHUT_RDWR)
        upstream.join(5)
        upstream_sock.close()
        connection.closed.wait(5)


def test_rewritten_requests_keep_both_ends_on_the_same_window(spliced):
    client, upstream, metrics, relay = spliced(Growing())
    request = api_pb2.CreateContainerRequest(pod_sandbox_id="p")
    request.config.metadata.name = "c"
    for _ in range(8):  # 8 x 30 KB of growth: far past the 64 KB initial connection window
        body, trailers = client.call(CREATE, request.SerializeToString())
        assert trailers[b"grpc-status"] == b"0"
        grown = api_pb2.CreateContainerResponse.FromString(grpc_message(body)).container_id
        assert int(grown[1:]) > 30000  # the runtime saw the rewritten request
    # The relay reads the runtime's WINDOW_UPDATEs along after forwarding them, so the client can
    # have its answer a moment before the relay's own view has caught up: let it land first.
    def relay_caught_up() -> bool:
        with upstream.lock:
            return relay.send_window == upstream.conn.inbound_flow_control_window

    eventually(relay_caught_up, timeout=5)
    with upstream.lock:
        for _headers, data in upstream.requests.values():
            sent = api_pb2.CreateContainerRequest.FromString(grpc_message(bytes(data)))
            assert len(sent.config.annotations["padding"]) == 30000
        # The relay's own view of what it may send is exactly the runtime's ...
        assert relay.send_window == upstream.conn.inbound_flow_control_window
        # ... and the client over-estimates by exactly the growth not yet taken off its window updates.
        assert client.conn.outbound_flow_control_window - upstream.conn.inbound_flow_control_window \
            == relay.window_debt > 0
    # The client may now send more than the runtime's window: the relay must split and wait, not overrun it.
    body, trailers = client.call(VERSION, b"z" * (upstream.conn.inbound_flow_control_window + 5000))
    assert trailers[b"grpc-status"] == b"0"
    with upstream.lock:
        assert max(len(data) for _, data in upstream.requests.values()) > 51000
    assert counted(metrics, "CreateContainer", 8)


def test_padding_and_continuation_frames_keep_header_decoding_in_step(spliced):
    client, upstream, metrics, _ = spliced(NoopHook())
    big = [(b"x-big", b"v" * 40000)]  # larger than a frame: sent as HEADERS + CONTINUATION
    for path, headers, pad in ((VERSION, big, 0), (VERSION, [], 200), (CREATE, big, 13), (VERSION, [], 0)):
        message = api_pb2.CreateContainerRequest(pod_sandbox_id="p").SerializeToString() \
            if path == CREATE else b""
        body, trailers = client.call(path, message, headers, pad)
        assert trailers[b"grpc-status"] == b"0"
    with upstream.lock:
        seen = [(h[b":path"].decode(), len(h.get(b"x-big", b""))) for h, _ in upstream.requests.values()]
    assert seen == [(VERSION, 40000), (VERSION, 0), (CREATE, 40000), (VERSION, 0)]
    # The relay decoded every header block in order: all calls were attributed to the right method.
    assert counted(metrics, "Version", 3) and counted(metrics, "CreateContainer", 1)


LIST = "/runtime.v1.RuntimeService/ListContainers"


def test_an_observed_call_is_handed_over_after_its_answer(spliced):
    """ListContainers passes through untouched; once the runtime's answer (here 120 containers in several DATA
    frames, padded) went to the client, its request and answer are handed to the observer (resmgr.relay.exits)."""
    seen: list[tuple[bytes, bytes]] = []
    got = threading.Event()

    def observe(req, resp):
        seen.append((bytes(req), bytes(resp)))
        got.set()

    client, upstream, metrics, _ = spliced(NoopHook(), {LIST: observe})
    answer = api_pb2.ListContainersResponse()
    for i in range(120):
        answer.containers.add(id=f"{i:064x}", state=api_pb2.CONTAINER_EXITED if i % 3 else 0,
                              labels={"io.kubernetes.container.name": "x" * 300})
    listing = answer.SerializeToString()
    assert 16384 * 2 < len(listing) < 65535 - 5  # several frames, within the simple upstream's window
    upstream.replies[LIST.encode()] = listing
    req = api_pb2.ListContainersRequest(filter=api_pb2.ContainerFilter()).SerializeToString()
    body, trailers = client.call(LIST, req, pad=9)
    assert trailers[b"grpc-status"] == b"0" and grpc_message(body) == listing
    assert got.wait(10)
    assert seen == [(req, listing)]
    client.call(VERSION, b"")  # other methods are not observed
    assert counted(metrics, "Version", 1) and len(seen) == 1
