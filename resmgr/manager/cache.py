"""The resource manager's persistent cache: one JSON document under ``--relay-dir``.

It holds pods, containers, the policy's allocations, the active policy and the
last applied config, plus a ``version`` field. Writes are atomic: a temporary
file in the same directory is written, fsynced and renamed over the cache, so a
crash leaves either the old or the new state, never a torn file.

In cri-resmgr the writes happen in a background thread (``background=True``): the
fsync took 1.5-2.5 ms while containerd was busy creating pods, and the next
kubelet request waited for it behind the resource manager's lock. Saves made while
a write is going on are coalesced into one write of the newest state; ``close()``
writes whatever is still pending.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resmgr.options import DEFAULT_RELAY_DIR, DEFAULT_RELAY_SOCKET

log = logging.getLogger("resmgr.cache")

# Names of the files a write goes through before it replaces the cache. Not tempfile.mkstemp: tempfile
# imports shutil, random, bz2 and lzma, 0.9 MB of the relay's resident memory for one file name.
_TMP_SEQ = itertools.count()


def _create_tmp(directory: Path) -> tuple[int, str]:
    """A new file in ``directory`` (mode 0600, opened for writing, never an existing one) and its path."""
    while True:
        path = os.path.join(directory, f".cache-{os.getpid()}-{next(_TMP_SEQ)}")
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), path
        except FileExistsError:  # left by an earlier process with our pid: take the next number
            continue

CACHE_VERSION = 1
CACHE_FILE = "cache"


class CacheError(RuntimeError):
    """The cache cannot be read/written, or a reset was refused."""


@dataclass
class CacheData:
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    containers: dict[str, dict[str, Any]] = field(default_factory=dict)
    policy: str | None = None
    policy_data: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] | None = None
    config_source: str = ""

    @classmethod
    def from_json(cls, data: Any) -> CacheData:
        if not isinstance(data, dict):
            raise CacheError("cache is not a JSON object")
        version = data.get("version")
        if version != CACHE_VERSION:
            raise CacheError(f"cache version {version!r} is not supported (expected {CACHE_VERSION})")
        try:
            return cls(pods=dict(data.get("pods") or {}), containers=dict(data.get("containers") or {}),
                       policy=data.get("policy"), policy_data=dict(data.get("policy_data") or {}),
                       config=data.get("config"), config_source=str(data.get("config_source") or ""))
        except (TypeError, ValueError) as exc:
            raise CacheError(f"malformed cache: {exc}") from None


class CacheEncoder:
    """The one writer of CacheData's layout.

    Pods, containers and grants do not change once made, so their JSON is encoded once and
    reused (values with ``to_json()`` are memoised by identity): re-encoding 200 containers
    on every CRI call would cost milliseconds. Keys starting with ``skip_prefix`` (allocations
    the runtime has not confirmed yet) are left out.
    """

    def __init__(self, skip_prefix: str = "") -> None:
        self.skip_prefix = skip_prefix
        self._memo: dict[str, dict[str, tuple[Any, str]]] = {"pods": {}, "containers": {}, "grants": {}}

    def _section(self, name: str, items: dict[str, Any]) -> str:
        memo, dumps, skip = self._memo[name], json.dumps, self.skip_prefix
        parts = []
        for key, obj in items.items():
            if skip and key.startswith(skip):
                continue
            hit = memo.get(key)
            if hit is None or hit[0] is not obj:
                value = obj.to_json() if hasattr(obj, "to_json") else obj
                # The key's JSON goes into the memo too: dumping 600 keys per save was 15% of a balloons decision.
                hit = memo[key] = (obj, f"{dumps(key)}:{dumps(value, separators=(',', ':'))}")
            parts.append(hit[1])
        if len(memo) > 2 * len(items) + 64:  # forget removed entries now and then
            for key in [key for key in memo if key not in items]:
                del memo[key]
        return "{" + ",".join(parts) + "}"

    def encode(self, *, pods: dict[str, Any], containers: dict[str, Any], policy: str | None,
               grants: dict[str, Any] | None, policy_extra: dict[str, Any], config: dict[str, Any] | None,
               config_source: str) -> bytes:
        """The cache document; ``policy_data`` is ``{"grants": ..., **policy_extra}`` (no grants key if None)."""
        dumps = json.dumps
        extra = dumps(policy_extra, separators=(",", ":"))
        if grants is None:
            policy_data = extra
        else:
            policy_data = '{"grants":' + self._section("grants", grants) + ("," + extra[1:] if policy_extra else "}")
        return (
            '{"version":' + str(CACHE_VERSION)
            + ',"pods":' + self._section("pods", pods)
            + ',"containers":' + self._section("containers", containers)
            + ',"policy":' + dumps(policy)
            + ',"policy_data":' + policy_data
            + ',"config":' + dumps(config, separators=(",", ":"))
            + ',"config_source":' + dumps(config_source) + "}"
        ).encode()

    def encode_data(self, data: CacheData) -> bytes:
        extra = dict(data.policy_data)
        grants = extra.pop("grants", None)
        return self.encode(pods=data.pods, containers=data.containers, policy=data.policy, grants=grants,
                           policy_extra=extra, config=data.config, config_source=data.config_source)


class Cache:
    """Load/save ``<relay_dir>/cache`` atomically."""

    def __init__(self, relay_dir: str | Path = DEFAULT_RELAY_DIR, *, fsync: bool = True,
                 background: bool = False) -> None:
        self.dir = Path(relay_dir)
        self.path = self.dir / CACHE_FILE
        self.fsync = fsync
        self.background = background
        self._cond = threading.Condition()
        self._pending: bytes | Callable[[], bytes] | None = None  # newest state not yet written (background mode)
        self._writing = False
        self._writer: threading.Thread | None = None

    def load(self) -> CacheData:
        """The cached state; an empty state if there is no cache. A corrupt cache is set aside."""
        try:
            raw = self.path.read_text()
        except FileNotFoundError:
            return CacheData()
        except OSError as exc:
            raise CacheError(f"cannot read cache {self.path}: {exc}") from None
        try:
            return CacheData.from_json(json.loads(raw))
        except (ValueError, RecursionError, CacheError) as exc:  # RecursionError: absurdly deep JSON
            aside = self.path.with_name(CACHE_FILE + ".corrupt")
            os.replace(self.path, aside)
            log.error("cache %s is unusable (%s); moved to %s, starting from an empty cache", self.path, exc, aside)
            return CacheData()

    def save(self, data: CacheData) -> None:
        self.save_encoded(CacheEncoder().encode_data(data))

    def save_encoded(self, payload: bytes | Callable[[], bytes]) -> None:
        """Replace the cache with ``payload``, a JSON document in CacheData's layout (now, or soon if background).

        ``payload`` may be a function that encodes it: in background mode the writer thread calls it, so the
        encoding (about 0.3 ms for 200 containers) leaves the CRI call's path, and a burst encodes only the last.
        """
        if not self.background:
            self._write(payload() if callable(payload) else payload)
            return
        with self._cond:
            self._pending = payload
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, daemon=True, name="cache-writer")
                self._writer.start()
            self._cond.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every save so far is on disk (background mode); False if ``timeout`` ran out."""
        with self._cond:
            return self._cond.wait_for(lambda: self._pending is None and not self._writing, timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is pending; later saves are written synchronously."""
        if not self.flush(timeout):
            log.error("cache %s: the last state was not written within %.0fs", self.path, timeout)
        self.background = False

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending is not None)
                payload, self._pending = self._pending, None
                self._writing = True
            try:
                self._write(payload() if callable(payload) else payload)  # type: ignore[arg-type]
            except Exception as exc:  # e.g. a full disk: the next save tries again
                log.error("cannot write cache %s: %s", self.path, exc)
            finally:
                with self._cond:
                    self._writing = False
                    self._cond.notify_all()

    def _write(self, payload: bytes) -> None:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = _create_tmp(self.dir)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(payload)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise


def relay_is_live(socket_path: str | Path) -> bool:
    """True if something accepts connections on the relay's unix socket."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(str(socket_path))
    except OSError:
        return False
    finally:
        s.close()
    return True


def reset_cache(relay_dir: str | Path, *, policy: bool, config: bool,
                relay_socket: str | Path = DEFAULT_RELAY_SOCKET) -> list[str]:
    """``--reset-policy`` / ``--reset-config``: clear parts of the cache; refuses while a relay is live.

    Returns what was cleared, for the caller to report.
    """
    if relay_is_live(relay_socket):
        raise CacheError(f"a cri-resmgr relay is live on {relay_socket}; stop it before resetting its cache")
    cache = Cache(relay_dir)
    data = cache.load()
    cleared = []
    if policy:
        data.policy, data.policy_data = None, {}
        cleared.append("policy data")
    if config:
        data.config, data.config_source = None, ""
        cleared.append("cached config")
    if cleared and cache.dir.exists():
        cache.save(data)
    return cleared
