"""Access to the node: its files through the mounted host root, its commands through a runner.

The installer pod sees the node's root file system at ``--host-root`` (``/var/host``) and runs
node commands with ``nsenter -t 1 -m`` (hostPID). Tests point both at a systemd-nspawn node:
``/proc/<init pid>/root`` and ``nsenter -t <init pid> -m``.

Paths passed to :class:`Host` methods are node paths (``/etc/...``). They are resolved inside
the host root, following symlinks *relative to the host root*: ``/var/run`` is an absolute
symlink to ``/run`` on Debian, and the kernel would resolve it against the installer's own root.
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger("installer.host")

HOST_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
MAX_SYMLINKS = 40
NSENTER_FLAGS = {"mount": "-m", "pid": "-p", "net": "-n", "uts": "-u", "ipc": "-i"}


class HostCommandError(RuntimeError):
    """A node command failed; str() carries the command, exit code and its stderr."""

    def __init__(self, argv: Sequence[str], returncode: int, stdout: str, stderr: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        detail = (stderr or stdout).strip().splitlines()
        tail = detail[-1] if detail else "no output"
        super().__init__(f"node command {' '.join(argv)!r} exited {returncode}: {tail}")


@dataclass
class CommandRunner:
    """Runs a command on the node.

    ``kind="nsenter"`` enters the mount namespace of ``target_pid`` (1 with hostPID on a real node,
    the container's init pid in tests). ``kind="chroot"`` chroots into ``host_root`` and sets
    SYSTEMD_IGNORE_CHROOT=1 so that systemctl still talks to the node's systemd.
    """

    kind: str = "nsenter"
    target_pid: int = 1
    host_root: str = "/var/host"
    # Namespaces to enter: the mount namespace is enough with hostPID; a node in its own pid
    # namespace (systemd-nspawn) also needs "pid", or systemd refuses systemctl's connection.
    namespaces: tuple[str, ...] = ("mount",)
    extra_env: dict[str, str] = field(default_factory=dict)

    def prefix(self) -> list[str]:
        if self.kind == "nsenter":
            flags = []
            for ns in self.namespaces:
                if ns not in NSENTER_FLAGS:
                    raise ValueError(f"unknown namespace {ns!r} (known: {', '.join(NSENTER_FLAGS)})")
                flags.append(NSENTER_FLAGS[ns])
            return ["nsenter", "-t", str(self.target_pid), *flags, "--"]
        if self.kind == "chroot":
            return ["chroot", self.host_root]
        raise ValueError(f"unknown host command runner {self.kind!r} (expected nsenter or chroot)")

    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float = 60,
            input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(HOST_ENV)
        if self.kind == "chroot":
            env["SYSTEMD_IGNORE_CHROOT"] = "1"
        env.update(self.extra_env)
        full = self.prefix() + list(argv)
        try:
            proc = subprocess.run(full, capture_output=True, text=True, env=env, timeout=timeout,
                                  input=input_text)
        except subprocess.TimeoutExpired as exc:
            raise HostCommandError(argv, -1, "", f"timed out after {timeout:g}s") from exc
        except FileNotFoundError as exc:
            raise HostCommandError(argv, -1, "", f"cannot run {full[0]}: {exc}") from exc
        if check and proc.returncode != 0:
            raise HostCommandError(argv, proc.returncode, proc.stdout, proc.stderr)
        return proc


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def resolve_in_root(root: Path, node_path: str) -> Path:
    """Map an absolute path on a node whose file system is visible at ``root`` to a local path.

    Symlinks are resolved inside ``root``: an absolute link such as Debian's ``/var/run -> /run``
    would otherwise be followed on this machine. The last component is not followed if it does
    not exist yet (so that it can be created).
    """
    if not node_path.startswith("/"):
        raise ValueError(f"node path must be absolute: {node_path!r}")
    parts = [p for p in node_path.split("/") if p and p != "."]
    resolved: list[str] = []
    hops = 0
    while parts:
        name = parts.pop(0)
        if name == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = root.joinpath(*resolved, name)
        try:
            is_link = stat.S_ISLNK(os.lstat(candidate).st_mode)
        except FileNotFoundError:
            is_link = False
        if not is_link:
            resolved.append(name)
            continue
        hops += 1
        if hops > MAX_SYMLINKS:
            raise OSError(f"too many symlinks resolving {node_path} on the node")
        target = os.readlink(candidate)
        if target.startswith("/"):
            resolved = []
        parts = [p for p in target.split("/") if p and p != "."] + parts
    return root.joinpath(*resolved)


@dataclass
class Host:
    """The node: ``root`` is where its file system is visible, ``runner`` runs its commands."""

    root: Path
    runner: CommandRunner

    # ----- path resolution -------------------------------------------------------------------
    def path(self, node_path: str) -> Path:
        """Map a node path to the installer's view, resolving symlinks inside the host root."""
        return resolve_in_root(self.root, node_path)

    # ----- files -----------------------------------------------------------------------------
    def exists(self, node_path: str) -> bool:
        return self.path(node_path).exists()

    def read_bytes(self, node_path: str) -> bytes:
        return self.path(node_path).read_bytes()

    def read_text(self, node_path: str) -> str:
        return self.read_bytes(node_path).decode()

    def read_if_exists(self, node_path: str) -> bytes | None:
        try:
            return self.read_bytes(node_path)
        except FileNotFoundError:
            return None

    def file_sha256(self, node_path: str) -> str | None:
        try:
            return sha256_file(self.path(node_path))
        except FileNotFoundError:
            return None

    def mode(self, node_path: str) -> int | None:
        try:
            return stat.S_IMODE(os.stat(self.path(node_path)).st_mode)
        except FileNotFoundError:
            return None

    def write_atomic(self, node_path: str, data: bytes, mode: int = 0o644) -> None:
        """Write through a temp file in the same directory, fsync, rename: never a torn file."""
        self._replace_via_temp(node_path, lambda out: out.write(data), mode)

    def _replace_via_temp(self, node_path: str, fill: Callable[[BinaryIO], object], mode: int) -> None:
        target = self.path(node_path)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                fill(out)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            _unlink_quietly(tmp)
            raise
        fsync_dir(target.parent)

    def remove(self, node_path: str) -> bool:
        """Remove a file; True if it existed."""
        try:
            os.unlink(self.path(node_path))
        except FileNotFoundError:
            return False
        return True

    def makedirs(self, node_path: str, mode: int = 0o755) -> list[str]:
        """Create a directory and its parents; return the node paths created, outermost first."""
        created: list[str] = []
        current = "/"
        for part in [p for p in node_path.split("/") if p]:
            current = posixpath.join(current, part)
            real = self.path(current)
            if not real.exists():
                os.mkdir(real, mode)
                created.append(current)
        return created

    def rmdir_if_empty(self, node_path: str) -> bool:
        try:
            os.rmdir(self.path(node_path))
        except (FileNotFoundError, OSError):
            return False
        return True

    def remove_tree(self, node_path: str) -> bool:
        """Remove a directory tree on the node (symlinks inside are removed, never followed)."""
        real = self.path(node_path)
        if not real.exists():
            return False
        shutil.rmtree(real)
        return True

    # ----- commands --------------------------------------------------------------------------
    def run(self, argv: Sequence[str], *, check: bool = True, timeout: float = 60,
            input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.runner.run(argv, check=check, timeout=timeout, input_text=input_text)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
