#!/usr/bin/env python3
"""Build the test images as one docker-archive tarball, without a container engine.

No image can be pulled on the test machines, so the busybox and pause images are
assembled here from the host's busybox-static: one shared layer holding busybox,
its applet links and a tiny pause script, and two image configs on top of it.
Import the result with ``ctr -n k8s.io images import``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from docker_archive import Image, Layer, write_docker_archive

BUSYBOX_TAGS = ["docker.io/library/busybox:latest", "docker.io/library/busybox:1.35"]
PAUSE_TAGS = ["registry.k8s.io/pause:3.6", "registry.k8s.io/pause:3.10"]

# PID 1 in a container only reacts to signals it traps.
PAUSE_SCRIPT = b"""#!/bin/sh
trap 'exit 0' TERM INT
while :; do sleep 3600 & wait $!; done
"""


def build_layer(busybox: str) -> bytes:
    applets = subprocess.run([busybox, "--list"], check=True, capture_output=True, text=True).stdout.split()
    layer = Layer()
    for d in ("bin", "dev", "etc", "proc", "root", "sys", "tmp", "var", "usr", "usr/bin", "sbin"):
        layer.dir(d, mode=0o1777 if d == "tmp" else 0o755)
    layer.host_file(busybox, "bin/busybox", mode=0o755)
    for applet in sorted(set(applets)):
        if applet != "busybox":
            layer.symlink(f"bin/{applet}", "busybox")
    layer.file("pause", PAUSE_SCRIPT, mode=0o755)
    layer.file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
    layer.file("etc/group", b"root:x:0:\nnogroup:x:65534:\n")
    return layer.close()


def build_archive(busybox: str, output: str) -> list[str]:
    layer = build_layer(busybox)
    by = "hacks/make-test-images.py"
    return write_docker_archive(output, [
        Image(BUSYBOX_TAGS, [layer], entrypoint=None, cmd=["sh"], created_by=by),
        Image(PAUSE_TAGS, [layer], entrypoint=["/pause"], cmd=None, created_by=by),
    ])


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
