"""CRI message dumping, configured by the ``dump:`` section of cri-resource-manager's config.

    dump:
      Config: 'off:.*,short:((Create)|(Start)|(Run)|(Update)|(Stop)|(Remove)).*'
      File: /tmp/cri-full-message.dump

``Config`` is a comma-separated list of ``LEVEL:REGEXP`` rules; a rule's regexp must match the
whole method name (``CreateContainer``, ``PullImage``), and the last matching rule wins.
``full`` dumps complete request and response messages, ``short`` one-line summaries, ``off``
nothing (the schema parses the rules, ``resmgr.config.dump_rules``; the dumper applies the
parsed ``DumpConfig``). Entries go to the ``resmgr.dump`` logger and, if ``File`` is set, as JSON lines to
that file. With policy ``none`` this makes the relay a pure CRI message dumper.

The file is the relay's own (it runs as root): it always lies in ``<relay dir>/dump/`` (a
``File`` elsewhere, like upstream's ``/tmp/...`` example, keeps its name there, with a warning),
is opened without following symlinks, mode 0600, and is rotated once it reaches
``MAX_DUMP_BYTES`` (one older file is kept). Environment variable values in requests are
written as ``<redacted>``: they often carry credentials.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from google.protobuf import text_format
from google.protobuf.message import DecodeError, Message

from resmgr.config.dump_rules import DumpConfig
from resmgr.options import DEFAULT_RELAY_DIR
from resmgr.relay.methods import cri_methods

log = logging.getLogger("resmgr.dump")

SHORT_LIMIT = 200
MAX_DUMP_BYTES = 64 * 1024 * 1024  # per file; the one before is kept as <file>.1
REDACTED = "<redacted>"


def dump_path(file: str, directory: str | os.PathLike[str]) -> Path:
    """Where ``File`` is written: itself if it lies in ``directory``, else ``directory/dump/<its name>``."""
    base = Path(os.path.abspath(directory))
    wanted = Path(os.path.abspath(base / file))
    if wanted.is_relative_to(base) and wanted != base:
        return wanted
    return base / "dump" / (wanted.name or "dump.jsonl")


def _redact_env(message: Message) -> None:
    """Blank the values of container environment variables (CreateContainer's config.envs)."""
    config = getattr(message, "config", None)
    envs = getattr(config, "envs", None) if config is not None else None
    for env in envs or ():
        if env.value:
            env.value = REDACTED


def _render(message_bytes: bytes | None, message_class: type[Message] | None, level: str,
            *, redact: bool = False) -> str | None:
    if message_bytes is None:
        return None
    if message_class is None:
        return f"<{len(message_bytes)} bytes, unknown message type>"
    try:
        message = message_class.FromString(message_bytes)
    except DecodeError:
        return f"<{len(message_bytes)} undecodable bytes>"
    if redact:
        _redact_env(message)
    if level == "full":
        return text_format.MessageToString(message)
    text = text_format.MessageToString(message, as_one_line=True)
    return text if len(text) <= SHORT_LIMIT else text[:SHORT_LIMIT] + "..."


@dataclass
class Dumper:
    """Decides per method whether to dump and writes entries. Thread-safe."""

    config: DumpConfig = field(default_factory=DumpConfig)
    directory: str = DEFAULT_RELAY_DIR  # the relay's directory: dump files stay inside it

    def __post_init__(self) -> None:
        self._levels: dict[str, str] = {}
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._path: Path | None = None
        self._size = 0
        self._open_file()

    def _open_file(self) -> None:
        if not self.config.file:
            return
        path = dump_path(self.config.file, self.directory)
        if str(path) != os.path.abspath(self.config.file):
            log.warning("dump.File %s is outside the relay's directory; dumping to %s instead",
                        self.config.file, path, extra={"file": str(path)})
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            os.fchmod(fd, 0o600)
            self._file = os.fdopen(fd, "a", encoding="utf-8")
            self._path, self._size = path, os.fstat(fd).st_size
        except OSError as err:  # ELOOP: a symlink was planted there
            log.error("cannot open dump file; dumping to the log only", extra={"file": str(path), "error": str(err)})

    def _rotate(self) -> None:
        assert self._file is not None and self._path is not None
        self._file.close()
        self._file = None
        try:
            os.replace(self._path, self._path.with_name(self._path.name + ".1"))
        except OSError as err:
            log.error("cannot rotate dump file", extra={"file": str(self._path), "error": str(err)})
        self._open_file()

    def reconfigure(self, config: DumpConfig) -> None:
        with self._lock:
            if self._file:
                self._file.close()
                self._file = None
            self.config = config
            self._levels = {}
            self._open_file()

    def close(self) -> None:
        self.reconfigure(DumpConfig())

    def level(self, method: str) -> str:
        level = self._levels.get(method)
        if level is None:
            level = self._levels[method] = self.config.level_for(method)
        return level

    def enabled(self, method: str) -> bool:
        return self.level(method) != "off"

    def dump(self, path: str, method: str, request: bytes | None, response: bytes | None,
             error: str | None, latency: float, *, started: float | None = None) -> dict[str, Any] | None:
        """Write one entry for a finished call; returns the entry (None if off for this method)."""
        level = self.level(method)
        if level == "off":
            return None
        entry_method = cri_methods().get(path)
        entry: dict[str, Any] = {
            "ts": _timestamp(started if started is not None else time.time()),
            "method": method,
            "latency_ms": round(latency * 1e3, 3),
            "request": _render(request, entry_method.request_class if entry_method else None, level, redact=True),
        }
        if error is not None:
            entry["error"] = error
        else:
            entry["response"] = _render(response, entry_method.response_class if entry_method else None,
                                        level)
        log.info("%s %s", "=>" if error is None else "=>!", method, extra={"dump": entry})
        if self._file:
            line = json.dumps(entry, ensure_ascii=False) + "\n"
            with self._lock:
                if self._file and self._size + len(line) > MAX_DUMP_BYTES and self._size:
                    self._rotate()
                if self._file:
                    self._file.write(line)
                    self._file.flush()
                    self._size += len(line.encode())
        return entry


def _timestamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1e6):06d}Z"
