"""Run the real ``cri-resmgr`` program against a runtime socket, for integration tests and benchmarks."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
from cri_api.v1 import api_pb2, api_pb2_grpc

from devland.procs import Process
from resmgr.options import RELAY_ENVIRONMENT


def cri_resmgr_executable() -> str:
    exe = shutil.which("cri-resmgr", path=str(Path(sys.executable).parent))
    if not exe:
        raise RuntimeError("cri-resmgr is not installed in the venv; run `make setup`")
    return exe


def answers_version(endpoint: str) -> bool:
    with grpc.insecure_channel(endpoint) as channel:
        try:
            api_pb2_grpc.RuntimeServiceStub(channel).Version(api_pb2.VersionRequest(), timeout=2)
        except grpc.RpcError:
            return False
    return True


@contextlib.contextmanager
def running_relay(containerd, config_flag: str | None = None, config_text: str = "",
                  prefix: str = "relay-") -> Iterator[RelayProcess]:
    """A started cri-resmgr in a private /tmp dir (``config_flag`` with a file holding ``config_text``);
    stopped, its containers removed and its dir deleted afterwards."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    args: list[str] = []
    if config_flag:
        config = workdir / "config.cfg"
        config.write_text(config_text.format(workdir=workdir))
        args = [config_flag, str(config)]
    proc = RelayProcess(workdir, containerd.socket, args=args)
    try:
        yield proc.start()
    finally:
        proc.stop()
        containerd.remove_all()
        shutil.rmtree(workdir, ignore_errors=True)


class RelayProcess:
    """``cri-resmgr`` on ``workdir/relay.sock`` relaying to ``runtime_socket``; JSON logs in ``workdir``."""

    def __init__(self, workdir: Path, runtime_socket: str, *, args: list[str] | None = None,
                 name: str = "cri-resmgr", executable: str | None = None) -> None:
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.socket = str(workdir / "relay.sock")
        self.endpoint = "unix://" + self.socket
        self.pid_file = workdir / "cri-resmgr.pid"
        self.argv = [executable or cri_resmgr_executable(), "--relay-socket", self.socket,
                     "--runtime-socket", runtime_socket, "--pid-file", str(self.pid_file),
                     "--relay-dir", str(workdir / "state"),
                     "--metrics-address", "127.0.0.1:0", "--log-format", "json", *(args or [])]
        # Private config and agent sockets, so relays of concurrent test runs never meet.
        for flag, name in (("--config-socket", "config.sock"), ("--agent-socket", "agent.sock")):
            if flag not in self.argv:
                self.argv += [flag, str(workdir / name)]
        self.name = name
        self.proc: Process | None = None

    def start(self, timeout: float = 60, wait: bool = True) -> RelayProcess:
        """Launch; unless ``wait`` is false, return once the relay answers CRI Version."""
        # As the installer's unit runs it.
        self.proc = Process(self.name, self.argv, self.workdir, env={**os.environ, **RELAY_ENVIRONMENT})
        if wait:
            self.proc.wait_until(lambda: answers_version(self.endpoint), "relay answers CRI Version", timeout)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log_entries(self) -> list[dict]:
        assert self.proc is not None
        entries = []
        for line in self.proc.log_path.read_text(errors="replace").splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                entries.append({"msg": line, "level": "raw"})
        return entries

    def metrics_url(self) -> str:
        for entry in self.log_entries():
            if entry.get("msg") == "serving metrics":
                return f"http://{entry['address']}/metrics"
        raise RuntimeError("relay did not log its metrics address")

    def metrics_text(self) -> str:
        return urllib.request.urlopen(self.metrics_url(), timeout=10).read().decode()

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.popen.send_signal(sig)

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.popen.wait(timeout)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(sig=signal.SIGTERM)


def metric_value(text: str, sample: str) -> float:
    """The value of one exposition line, e.g. ``cri_resmgr_requests_total{code="OK",method="Version"}``."""
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


class SocketPump:
    """A byte-level unix socket forwarder that can be cut, to take the runtime away from the relay."""

    def __init__(self, listen_path: str, target_path: str) -> None:
        self.listen_path, self.target_path = listen_path, target_path
        self._server: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> SocketPump:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(self.listen_path)
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()
        return self

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.target_path)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._copy, args=(a, b), daemon=True).start()

    @staticmethod
    def _copy(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(2)
                except OSError:
                    pass

    def stop(self) -> None:
        """Close the listener and every connection, and remove the socket file."""
        if self._server is not None:
            self._server.close()
            self._server = None
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            try:
                conn.shutdown(2)
            except OSError:
                pass
            conn.close()
        try:
            os.unlink(self.listen_path)
        except FileNotFoundError:
            pass
