#!/usr/bin/env python3
"""Build the test images as one docker-archive tarball, without a container engine.

No image can be pulled on the test machines, so the busybox and pause images are
assembled here from the host's busybox-static: one shared layer holding busybox,
its applet links and a tiny pause script, and two image configs on top of it.
Import the result with ``ctr -n k8s.io images import``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
import sys
import tarfile
import time

BUSYBOX_TAGS = ["docker.io/library/busybox:latest", "docker.io/library/busybox:1.35"]
PAUSE_TAGS = ["registry.k8s.io/pause:3.6", "registry.k8s.io/pause:3.10"]
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# PID 1 in a container only reacts to signals it traps.
PAUSE_SCRIPT = b"""#!/bin/sh
trap 'exit 0' TERM INT
while :; do sleep 3600 & wait $!; done
"""


def _add(tar: tarfile.TarFile, name: str, *, data: bytes | None = None, mode: int = 0o755,
         kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.mode = mode
    info.mtime = 0
    info.type = kind
    info.linkname = link
    if data is not None:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        tar.addfile(info)


def build_layer(busybox: str) -> bytes:
    with open(busybox, "rb") as f:
        binary = f.read()
    applets = subprocess.run([busybox, "--list"], check=True, capture_output=True, text=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for d in ("bin", "dev", "etc", "proc", "root", "sys", "tmp", "var", "usr", "usr/bin", "sbin"):
            _add(tar, d, kind=tarfile.DIRTYPE, mode=0o1777 if d == "tmp" else 0o755)
        _add(tar, "bin/busybox", data=binary)
        for applet in sorted(set(applets)):
            if applet != "busybox":
                _add(tar, f"bin/{applet}", kind=tarfile.SYMTYPE, link="busybox", mode=0o777)
        _add(tar, "pause", data=PAUSE_SCRIPT)
        _add(tar, "etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
             mode=0o644)
        _add(tar, "etc/group", data=b"root:x:0:\nnogroup:x:65534:\n", mode=0o644)
    return buf.getvalue()


def image_config(diff_id: str, *, entrypoint: list[str] | None, cmd: list[str] | None) -> bytes:
    cfg = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {"Env": [PATH_ENV], "Entrypoint": entrypoint, "Cmd": cmd, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "hacks/make-test-images.py"}],
    }
    return json.dumps(cfg, sort_keys=True).encode()


def build_archive(busybox: str, output: str) -> list[str]:
    layer = build_layer(busybox)
    layer_hex = hashlib.sha256(layer).hexdigest()
    configs = {
        "busybox": (image_config(f"sha256:{layer_hex}", entrypoint=None, cmd=["sh"]), BUSYBOX_TAGS),
        "pause": (image_config(f"sha256:{layer_hex}", entrypoint=["/pause"], cmd=None), PAUSE_TAGS),
    }
    manifest = []
    with tarfile.open(output, "w") as tar:
        _add(tar, layer_hex, kind=tarfile.DIRTYPE)
        _add(tar, f"{layer_hex}/layer.tar", data=layer, mode=0o644)
        for cfg, tags in configs.values():
            name = hashlib.sha256(cfg).hexdigest() + ".json"
            _add(tar, name, data=cfg, mode=0o644)
            manifest.append({"Config": name, "RepoTags": tags, "Layers": [f"{layer_hex}/layer.tar"]})
        _add(tar, "manifest.json", data=json.dumps(manifest).encode(), mode=0o644)
    return [t for _, tags in configs.values() for t in tags]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--busybox", default="/bin/busybox", help="a static busybox binary")
    parser.add_argument("--output", required=True, help="where to write the docker-archive tar")
    args = parser.parse_args()
    t0 = time.monotonic()
    tags = build_archive(args.busybox, args.output)
    print(f"wrote {args.output} with {', '.join(tags)} in {time.monotonic() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
