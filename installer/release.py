"""Releases of cri-resmgr on the node: immutable program directories named by their content digest.

The unpacked (one-dir) build runs as a single process and unpacks nothing at start, so the node gets the
whole program directory. A release is copied into a temp directory beside the releases, verified against
its manifest, and only then renamed to ``RELEASES_DIR/<digest>``: a directory under that name is always
complete. The stable path the unit runs (node_files.BINARY) is a symlink to ``<release>/cri-resmgr``,
replaced atomically (a symlink under a temp name, then rename), so it names one release or the other.

The digest is the sha256 of the manifest: one line per entry (type, mode, file sha256 or link target,
relative path), sorted by path. It is "the executable's checksum" wherever the installer compares one.
A single file as source is a release of one file named cri-resmgr: the same code path.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from installer import failpoints
from installer.host import Host, fsync_dir, sha256_file

RELEASES_DIR = "/opt/cri-resmgr/releases"
EXE_NAME = "cri-resmgr"
_TMP_PREFIX = ".incoming-"


@dataclass(frozen=True)
class Manifest:
    lines: tuple[str, ...]

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text().encode()).hexdigest()

    def text(self) -> str:
        return "".join(line + "\n" for line in self.lines)


def manifest_of(source: Path) -> Manifest:
    """The manifest of a program directory, or of a single executable (then named EXE_NAME)."""
    if source.is_file():
        return Manifest((_entry(source, EXE_NAME),))
    if not source.is_dir():
        raise FileNotFoundError(f"no program file or directory at {source}")
    lines = []
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames.sort()
        for name in dirnames + filenames:
            full = Path(dirpath, name)
            lines.append(_entry(full, full.relative_to(source).as_posix()))
    if not any(line.endswith(" " + EXE_NAME) and line.startswith("f ") for line in lines):
        raise FileNotFoundError(f"{source} has no executable {EXE_NAME} at its top")
    return Manifest(tuple(sorted(lines, key=lambda line: line.rsplit(" ", 1)[1])))


def _entry(full: Path, rel: str) -> str:
    if " " in rel or "\n" in rel:
        raise ValueError(f"release paths must not contain blanks: {rel!r}")
    st = os.lstat(full)
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(full)
        if target.startswith("/") or ".." in Path(target).parts or " " in target:
            raise ValueError(f"symlink {rel} -> {target} points out of the release")
        return f"l {target} {rel}"
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        return f"d {mode:o} {rel}"
    if stat.S_ISREG(st.st_mode):
        return f"f {mode:o}:{sha256_file(full)} {rel}"
    raise ValueError(f"{rel} is neither a file, a directory nor a symlink")


def release_dir(digest: str) -> str:
    return f"{RELEASES_DIR}/{digest}"


def executable(digest: str) -> str:
    return f"{release_dir(digest)}/{EXE_NAME}"


def is_installed(host: Host, digest: str) -> bool:
    """True if the release directory exists and its content matches its name."""
    real = host.path(release_dir(digest))
    try:
        return real.is_dir() and manifest_of(real).digest == digest
    except (OSError, ValueError):
        return False


def install(host: Host, source: Path, manifest: Manifest) -> str:
    """Put the release of ``source`` in place (copy, verify, rename); returns its executable's node path.

    A release already in place and intact is left alone; a damaged one is replaced.
    """
    digest = manifest.digest
    host.makedirs(RELEASES_DIR, mode=0o755)
    if is_installed(host, digest):
        return executable(digest)
    parent = host.path(RELEASES_DIR)
    tmp = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=parent))
    try:
        if source.is_file():
            shutil.copy2(source, tmp / EXE_NAME, follow_symlinks=False)
        else:
            shutil.copytree(source, tmp, symlinks=True, dirs_exist_ok=True)
        os.chmod(tmp, 0o755)  # copy2/copytree keep the entries' modes, mkdtemp made the top 0700
        _fsync_tree(tmp)
        got = manifest_of(tmp).digest
        if got != digest:
            raise OSError(f"release copied to the node does not match its manifest: expected {digest}, got {got}")
        failpoints.hit("release-verified")
        final = parent / digest
        if final.exists() or final.is_symlink():
            shutil.rmtree(final)  # damaged (is_installed said so): replace it
        os.rename(tmp, final)
        fsync_dir(parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return executable(digest)


def current(host: Host, link: str) -> str | None:
    """The digest of the release the stable path ``link`` points at; None if it is no such symlink."""
    try:
        target = os.readlink(host.path(os.path.dirname(link)) / os.path.basename(link))
    except (FileNotFoundError, OSError):
        return None
    prefix = RELEASES_DIR + "/"
    if not target.startswith(prefix) or not target.endswith("/" + EXE_NAME):
        return None
    digest = target[len(prefix):-len("/" + EXE_NAME)]
    return digest if "/" not in digest else None


def point(host: Host, link: str, digest: str) -> bool:
    """Make ``link`` a symlink to the release's executable, atomically; False if it already was."""
    if current(host, link) == digest:
        return False
    host.makedirs(os.path.dirname(link), mode=0o755)
    parent = host.path(os.path.dirname(link))
    tmp = parent / f".{os.path.basename(link)}.{os.getpid()}.link"
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    os.symlink(executable(digest), tmp)
    try:
        os.replace(tmp, parent / os.path.basename(link))
    except BaseException:
        os.unlink(tmp)
        raise
    fsync_dir(parent)
    return True


def unpoint(host: Host, link: str) -> bool:
    """Remove the stable path if it is a symlink to a release (the link itself, never its target)."""
    if current(host, link) is None:
        return False
    os.unlink(host.path(os.path.dirname(link)) / os.path.basename(link))
    fsync_dir(host.path(os.path.dirname(link)))
    return True


def prune(host: Host, keep: set[str]) -> list[str]:
    """Remove every release but ``keep``, and interrupted copies; returns the names removed."""
    parent = host.path(RELEASES_DIR)
    if not parent.is_dir():
        return []
    removed = []
    for entry in sorted(parent.iterdir()):
        if entry.name not in keep:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            removed.append(entry.name)
    return removed


def _fsync_tree(top: Path) -> None:
    for dirpath, _, filenames in os.walk(top):
        for name in filenames:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                fd = os.open(full, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        fsync_dir(Path(dirpath))

