"""Write container images as docker-archive tars without a container engine (stdlib only).

Shared by hacks/make-test-images.py (busybox/pause test images) and
hacks/build-images.py (the shipped images). Layers are plain tars built in
memory with fixed mtimes, so the same inputs give the same image digests.
Import the result with ``ctr -n k8s.io images import`` (or ``docker load``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
from dataclasses import dataclass, field

PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
EPOCH = "1970-01-01T00:00:00Z"


def add_entry(tar: tarfile.TarFile, name: str, *, data: bytes | None = None, mode: int = 0o755,
              kind: bytes = tarfile.REGTYPE, link: str = "", uid: int = 0, gid: int = 0) -> None:
    """One tar member with a fixed mtime; ``data`` for regular files."""
    info = tarfile.TarInfo(name)
    info.mode = mode
    info.mtime = 0
    info.type = kind
    info.linkname = link
    info.uid, info.gid = uid, gid
    if data is not None:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        tar.addfile(info)


class Layer:
    """A layer being written: directories are created once, parents first; host paths keep their symlinks."""

    def __init__(self) -> None:
        self._buf = io.BytesIO()
        self._tar = tarfile.open(fileobj=self._buf, mode="w", format=tarfile.PAX_FORMAT)
        self._seen: set[str] = set()

    def dir(self, path: str, mode: int = 0o755, uid: int = 0, gid: int = 0) -> None:
        path = path.strip("/")
        if not path or path in self._seen:
            return
        self.dir(os.path.dirname(path))
        self._seen.add(path)
        add_entry(self._tar, path, kind=tarfile.DIRTYPE, mode=mode, uid=uid, gid=gid)

    def file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        path = path.strip("/")
        self.dir(os.path.dirname(path))
        self._seen.add(path)
        add_entry(self._tar, path, data=data, mode=mode)

    def symlink(self, path: str, target: str) -> None:
        path = path.strip("/")
        if path in self._seen:
            return
        self.dir(os.path.dirname(path))
        self._seen.add(path)
        add_entry(self._tar, path, kind=tarfile.SYMTYPE, link=target, mode=0o777)

    def host_file(self, src: str, dest: str, mode: int | None = None) -> None:
        """Copy a host file (following symlinks) to ``dest``."""
        with open(src, "rb") as f:
            data = f.read()
        self.file(dest, data, mode if mode is not None else stat.S_IMODE(os.stat(src).st_mode))

    def host_path(self, path: str) -> None:
        """Copy a host file to the same path, recreating every symlink on the way (e.g. merged /usr, lib links)."""
        parts = path.strip("/").split("/")
        cur = ""
        for i, part in enumerate(parts):
            cur = f"{cur}/{part}"
            if os.path.islink(cur):
                link = os.readlink(cur)
                self.symlink(cur, link)
                target = os.path.normpath(os.path.join(os.path.dirname(cur), link))
                rest = parts[i + 1:]
                self.host_path("/".join([target, *rest]) if rest else target)
                return
            if i < len(parts) - 1:
                self.dir(cur)
        if cur.strip("/") not in self._seen:
            self.host_file(cur, cur)

    def host_tree(self, src: str, dest: str) -> None:
        """Copy a host directory tree to ``dest``; symlinks inside it stay symlinks."""
        for root, dirs, files in os.walk(src):
            dirs.sort()
            rel = os.path.relpath(root, src)
            base = dest if rel == "." else f"{dest}/{rel}"
            self.dir(base)
            for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(root, d))]):
                path = os.path.join(root, name)
                if os.path.islink(path):
                    self.symlink(f"{base}/{name}", os.readlink(path))
                else:
                    self.host_file(path, f"{base}/{name}")

    def close(self) -> bytes:
        self._tar.close()
        return self._buf.getvalue()


def image_config(diff_ids: list[str], *, entrypoint: list[str] | None, cmd: list[str] | None,
                 env: list[str] | None = None, user: str = "", created_by: str = "") -> bytes:
    cfg = {
        "architecture": "amd64",
        "os": "linux",
        "created": EPOCH,
        "config": {"Env": env or [PATH_ENV], "Entrypoint": entrypoint, "Cmd": cmd, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created": EPOCH, "created_by": created_by} for _ in diff_ids],
    }
    if user:
        cfg["config"]["User"] = user
    return json.dumps(cfg, sort_keys=True).encode()


@dataclass
class Image:
    tags: list[str]
    layers: list[bytes]
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    env: list[str] = field(default_factory=lambda: [PATH_ENV])
    user: str = ""
    created_by: str = ""


def write_docker_archive(output: str, images: list[Image]) -> list[str]:
    """Write images (layers shared by content) as one docker-archive; returns every tag written."""
    written: set[str] = set()
    manifest = []
    tmp = output + ".tmp"
    with tarfile.open(tmp, "w") as tar:
        for image in images:
            layer_paths, diff_ids = [], []
            for layer in image.layers:
                digest = hashlib.sha256(layer).hexdigest()
                if digest not in written:
                    add_entry(tar, digest, kind=tarfile.DIRTYPE)
                    add_entry(tar, f"{digest}/layer.tar", data=layer, mode=0o644)
                    written.add(digest)
                layer_paths.append(f"{digest}/layer.tar")
                diff_ids.append(f"sha256:{digest}")
            cfg = image_config(diff_ids, entrypoint=image.entrypoint, cmd=image.cmd, env=image.env,
                               user=image.user, created_by=image.created_by)
            name = hashlib.sha256(cfg).hexdigest() + ".json"
            add_entry(tar, name, data=cfg, mode=0o644)
            manifest.append({"Config": name, "RepoTags": image.tags, "Layers": layer_paths})
        add_entry(tar, "manifest.json", data=json.dumps(manifest).encode(), mode=0o644)
    os.replace(tmp, output)
    return [t for image in images for t in image.tags]
