"""One connection to containerd's NRI socket: the multiplexed trunk, ttrpc in both directions.

A reader thread splits the trunk into the plugin connection (containerd's requests, served on a small
pool so that a slow answer does not hold the others) and the runtime connection (answers to our calls).
Writes of whole frames are serialised by one lock. Whatever breaks the framing closes the connection;
the front end then connects again and containerd synchronises it anew.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from google.protobuf.message import DecodeError, Message

from resmgr.nri import mux, ttrpc
from resmgr.nri.ttrpc_pb2 import Request, Response

log = logging.getLogger(__name__)

# Serves one request: (service, method, payload) -> encoded answer; raises to answer with an error.
Serve = Callable[[str, str, bytes], bytes]
ErrorCode = Callable[[Exception], int]


class CallError(Exception):
    """A call to the runtime failed: its status, or the connection closed."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"{message} (code {code})")
        self.code = code


class NriConnection:
    def __init__(self, sock: socket.socket, serve: Serve, error_code: ErrorCode, workers: int = 4) -> None:
        self.sock = sock
        self.serve = serve
        self.error_code = error_code
        self.closed = threading.Event()
        self._write_lock = threading.Lock()
        self._ids = ttrpc.StreamIds()
        self._pending: dict[int, Future[Response]] = {}
        self._pending_lock = threading.Lock()
        self._parsers = {mux.PLUGIN_CONN: ttrpc.FrameParser(), mux.RUNTIME_CONN: ttrpc.FrameParser()}
        self._streams = mux.Streams(known=(mux.PLUGIN_CONN, mux.RUNTIME_CONN))
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nri-serve")
        self._reader = threading.Thread(target=self._read_loop, name="nri-reader", daemon=True)

    def start(self) -> NriConnection:
        self._reader.start()
        return self

    def close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        with self._pending_lock:
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(CallError(ttrpc.CODE_UNAVAILABLE, "NRI connection closed"))
        self._pool.shutdown(wait=False, cancel_futures=True)

    def call(self, service: str, method: str, request: Message, response_class: type[Message],
             timeout: float = 5.0) -> Message:
        """A unary call on the runtime connection; raises CallError."""
        future: Future[Response] = Future()
        with self._write_lock:
            stream_id = self._ids.next()
            with self._pending_lock:
                if self.closed.is_set():
                    raise CallError(ttrpc.CODE_UNAVAILABLE, "NRI connection closed")
                self._pending[stream_id] = future
            frame = ttrpc.encode_request(stream_id, service, method, request.SerializeToString(), timeout)
            self._send_locked(mux.RUNTIME_CONN, frame)
        try:
            response = future.result(timeout=timeout)
        except TimeoutError:
            with self._pending_lock:
                self._pending.pop(stream_id, None)
            raise CallError(ttrpc.CODE_DEADLINE_EXCEEDED, f"{method}: no answer in {timeout} s") from None
        if response.HasField("status") and response.status.code != ttrpc.CODE_OK:
            raise CallError(response.status.code, f"{method}: {response.status.message}")
        return response_class.FromString(response.payload)

    def _send_locked(self, conn_id: int, frame: bytes) -> None:
        try:
            self.sock.sendall(mux.encode(conn_id, frame))
        except OSError as err:
            self.close()
            raise CallError(ttrpc.CODE_UNAVAILABLE, f"NRI connection lost: {err}") from err

    def _answer(self, stream_id: int, frame: bytes) -> None:
        with self._write_lock:
            try:
                self._send_locked(mux.PLUGIN_CONN, frame)
            except CallError as err:
                log.warning("cannot answer the runtime: %s", err)

    def _read_loop(self) -> None:
        try:
            while not self.closed.is_set():
                data = self.sock.recv(1 << 16)
                if not data:
                    log.info("the runtime closed the NRI connection")
                    break
                for conn_id, payload in self._streams.feed(data).items():
                    for frame in self._parsers[conn_id].feed(payload):
                        self._dispatch(conn_id, frame)
        except (mux.ProtocolError, ttrpc.ProtocolError) as err:
            log.error("NRI connection broke its framing; closing it: %s", err)
        except OSError as err:
            if not self.closed.is_set():
                log.warning("NRI connection failed: %s", err)
        finally:
            self.close()

    def _dispatch(self, conn_id: int, frame: ttrpc.Frame) -> None:
        if conn_id == mux.RUNTIME_CONN and frame.type == ttrpc.TYPE_RESPONSE:
            with self._pending_lock:
                future = self._pending.pop(frame.stream_id, None)
            if future is None:
                log.debug("answer for a call no longer waited for", extra={"stream": frame.stream_id})
                return
            try:
                future.set_result(Response.FromString(frame.payload))
            except DecodeError as err:
                future.set_exception(CallError(ttrpc.CODE_INTERNAL, f"undecodable answer: {err}"))
        elif conn_id == mux.PLUGIN_CONN and frame.type == ttrpc.TYPE_REQUEST:
            try:
                self._pool.submit(self._serve_one, frame)
            except RuntimeError:
                pass  # closing
        else:
            log.debug("ignoring ttrpc frame", extra={"conn": conn_id, "type": frame.type})

    def _serve_one(self, frame: ttrpc.Frame) -> None:
        try:
            request = Request.FromString(frame.payload)
            answer = ttrpc.encode_response(frame.stream_id, self.serve(request.service, request.method,
                                                                        request.payload))
        except Exception as err:  # the error goes back to the runtime as the call's status
            code = self.error_code(err)
            if code == ttrpc.CODE_INTERNAL:
                log.exception("serving an NRI call failed")
            answer = ttrpc.encode_error(frame.stream_id, code, str(err))
        self._answer(frame.stream_id, answer)
