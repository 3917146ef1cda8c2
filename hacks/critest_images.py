#!/usr/bin/env python3
"""Build the images critest (cri-tools v1.34) pulls, as one docker-archive, without a container engine.

critest pulls its test images by fixed names (pkg/validate/consts.go, pkg/framework/util.go,
multi_container_linux.go, security_context_linux.go of cri-tools). No image can be pulled from the
internet on the test machines, so this script builds images under those names from the host's
busybox-static (Debian package busybox-static): push the archive into a local registry
(hacks/registry.py push) and point containerd's certs.d at it (hacks/registry.py hosts).

What each image holds is what critest checks in it (cri-tools images/*/Dockerfile and images/build):
  registry.k8s.io/e2e-test-images/busybox:1.29-2         busybox; the default container image. As in
      the upstream image, applets are hard links to /bin/busybox (MaskedPaths masks /bin/ls alone);
      Debian's busybox-static lacks pgrep and ipcs, which critest runs: procps' and util-linux's
      binaries (with their libraries) are copied from this machine
  registry.k8s.io/e2e-test-images/nonewprivs:1.3          a setuid-root program printing "Effective uid: N"
      (compiled here with gcc -static), as the upstream image's
  gcr.io/k8s-staging-cri-tools/test-image-user-*          USER 1002 / www-data / 1003:1004 / www-data:1004
  gcr.io/k8s-staging-cri-tools/test-image-predefined-group  default-user (uid 1000) in group 50000, USER 1000
  gcr.io/k8s-staging-cri-tools/test-image-{latest,tag,1,2,3}  distinct images (a marker file each)
  gcr.io/k8s-staging-cri-tools/test-image-tags:{1,2,3}    one image under three tags
  registry.k8s.io/e2e-test-images/nginx:1.14-2, gcr.io/k8s-staging-cri-tools/hostnet-nginx-amd64,
  registry.k8s.io/e2e-test-images/httpd:2.4.39-4          STAND-INS for nginx and httpd: busybox httpd
      serves the page (port 80, 12003 for hostnet-nginx); the nginx stand-in's own process is named
      nginx, shows "master process" in its command line and writes /var/run/nginx.pid, the httpd
      stand-in logs a line naming httpd: what critest looks at. They are not nginx or Apache.
Not built: gcr.io/k8s-staging-cri-tools/test-image-digest@sha256:9700f9a2... (a digest names the
upstream manifest's exact bytes; no local build can have it), so critest's "image with digest" spec
still fails on its pull.

The archive is cached under ~/.cache/cri-resmgr-dev/critest-images/ by the hash of its inputs (this
script, the layer code and the busybox binary): a warm call only prints the path.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

HACKS = Path(__file__).resolve().parent
sys.path.insert(0, str(HACKS))

from docker_archive import Image, Layer, add_entry, write_docker_archive  # noqa: E402

E2E = "registry.k8s.io/e2e-test-images/"
STAGING = "gcr.io/k8s-staging-cri-tools/"
# The upstream image the test images are built FROM is busybox; these are its users and groups.
PASSWD = (b"root:x:0:0:root:/root:/bin/sh\ndaemon:x:1:1:daemon:/usr/sbin:/bin/false\nbin:x:2:2:bin:/bin:/bin/false\n"
          b"sys:x:3:3:sys:/dev:/bin/false\nsync:x:4:100:sync:/bin:/bin/sync\nmail:x:8:8:mail:/var/spool/mail:/bin/false\n"
          b"www-data:x:33:33:www-data:/var/www:/bin/false\noperator:x:37:37:Operator:/var:/bin/false\n"
          b"nobody:x:65534:65534:nobody:/home:/bin/false\n")
GROUP = (b"root:x:0:\ndaemon:x:1:\nbin:x:2:\nsys:x:3:\nadm:x:4:\ntty:x:5:\ndisk:x:6:\nlp:x:7:\nmail:x:8:\n"
         b"kmem:x:9:\nwheel:x:10:root\ncdrom:x:11:\ndialout:x:18:\nfloppy:x:19:\nvideo:x:28:\naudio:x:29:\n"
         b"tape:x:32:\nwww-data:x:33:\noperator:x:37:\nutmp:x:43:\nplugdev:x:46:\nstaff:x:50:\nlock:x:54:\n"
         b"netdev:x:82:\nusers:x:100:\nnogroup:x:65534:\n")

NGINX_STAND_IN = """#!/bin/sh
# STAND-IN for nginx (critest's web server image): busybox httpd serves the page. This script's own
# process is named nginx (pidof nginx finds it), carries nginx's "master process" title in its
# command line (critest greps /proc/1/cmdline for it) and writes /var/run/nginx.pid, as nginx does.
[ "$1" = "master process" ] || exec "$0" "master process" "$@"
echo $$ > /var/run/nginx.pid
httpd -f -p {port} -h /usr/share/nginx/html & child=$!
trap 'kill $child; exit 0' TERM INT QUIT
wait $child
"""
HTTPD_STAND_IN = """#!/bin/sh
# STAND-IN for Apache httpd (critest's multi-container image): busybox httpd serves the page.
echo "httpd (stand-in: busybox httpd) serving /usr/local/apache2/htdocs on port 80"
exec httpd -f -p 80 -h /usr/local/apache2/htdocs
"""
INDEX = b"<html><body><h1>Welcome to the critest web server stand-in</h1></body></html>\n"


HOST_BINARIES = ("/usr/bin/pgrep", "/usr/bin/ipcs")  # what critest runs that busybox-static lacks
NNP_SOURCE = b"""#include <stdio.h>
#include <unistd.h>
int main(void) { printf("Effective uid: %d\\n", (int)geteuid()); return 0; }
"""


def busybox_layer(busybox: str) -> bytes:
    """busybox in /bin with every applet a hard link to it (the upstream image's layout)."""
    applets = subprocess.run([busybox, "--list"], check=True, capture_output=True, text=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "dev", "etc", "home", "proc", "root", "sys", "tmp", "usr", "usr/bin", "usr/sbin", "var",
                  "var/run", "sbin"):
            add_entry(tar, d, kind=tarfile.DIRTYPE, mode=0o1777 if d == "tmp" else 0o755)
        add_entry(tar, "bin/busybox", data=Path(busybox).read_bytes(), mode=0o755)
        for applet in sorted(set(applets) - {"busybox"}):
            add_entry(tar, f"bin/{applet}", kind=tarfile.LNKTYPE, link="bin/busybox", mode=0o755)
        add_entry(tar, "etc/passwd", data=PASSWD, mode=0o644)
        add_entry(tar, "etc/group", data=GROUP, mode=0o644)
    return buf.getvalue()


def shared_libraries(binary: str) -> list[str]:
    """The libraries (and loader) ``binary`` loads, as ldd resolves them on this machine."""
    out = subprocess.run(["ldd", binary], check=True, capture_output=True, text=True).stdout
    libs = []
    for line in out.splitlines():
        path = line.split("=>")[-1].strip().split(" (")[0].strip()
        if path.startswith("/"):
            libs.append(path)
    return libs


def host_binaries_layer(binaries: tuple[str, ...] = HOST_BINARIES) -> bytes:
    layer = Layer()
    for b in binaries:
        for path in [b, *shared_libraries(b)]:
            layer.host_path(path)
    return layer.close()


def nonewprivs_layer() -> bytes:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise SystemExit("gcc not found: the nonewprivs image's program is compiled here (apt: gcc, libc6-dev)")
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp, "nnp.c"), Path(tmp, "nnp")
        src.write_bytes(NNP_SOURCE)
        subprocess.run([cc, "-static", "-O2", "-o", str(exe), str(src)], check=True, capture_output=True)
        data = exe.read_bytes()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("usr", "usr/local", "usr/local/bin"):
            add_entry(tar, d, kind=tarfile.DIRTYPE)
        add_entry(tar, "usr/local/bin/nnp", data=data, mode=0o4755)  # setuid root: what NoNewPrivs must stop
    return buf.getvalue()


def _layer(files: dict[str, tuple[bytes, int]], dirs: tuple[str, ...] = ()) -> bytes:
    layer = Layer()
    for d in dirs:
        layer.dir(d)
    for path, (data, mode) in files.items():
        layer.file(path, data, mode)
    return layer.close()


def images(busybox: str) -> list[Image]:
    """Every critest image, layered on the test images' busybox layer plus busybox's users."""
    base = [busybox_layer(busybox)]
    by = "hacks/critest_images.py"

    def img(tags: list[str], extra: list[bytes] = (), **kw) -> Image:  # type: ignore[assignment]
        kw.setdefault("cmd", ["sh"])
        return Image(tags, [*base, *extra], created_by=by, **kw)

    def marker(name: str) -> bytes:  # cri-tools images/image-test: ADD ${TEST} ${TEST}
        return _layer({name: (b"", 0o644)})

    def web(port: int) -> bytes:
        return _layer({"usr/sbin/nginx": (NGINX_STAND_IN.format(port=port).encode(), 0o755),
                       "usr/share/nginx/html/index.html": (INDEX, 0o644)}, dirs=("var/run",))

    predefined = _layer({"etc/passwd": (PASSWD + b"default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh\n",
                                        0o644),
                         "etc/group": (GROUP + b"default-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n",
                                       0o644)}, dirs=("home/default-user",))
    out = [
        img([f"{E2E}busybox:1.29-2"], [host_binaries_layer()]),
        img([f"{E2E}nonewprivs:1.3"], [nonewprivs_layer()], entrypoint=["/usr/local/bin/nnp"], cmd=None),
        img([f"{E2E}nginx:1.14-2"], [web(80)], cmd=["nginx", "-g", "daemon off;"]),
        img([f"{STAGING}hostnet-nginx-amd64:latest"], [web(12003)], cmd=["nginx", "-g", "daemon off;"]),
        img([f"{E2E}httpd:2.4.39-4"], [_layer({"usr/local/bin/httpd-foreground": (HTTPD_STAND_IN.encode(), 0o755),
                                               "usr/local/apache2/htdocs/index.html": (INDEX, 0o644)})],
            cmd=["httpd-foreground"]),
        img([f"{STAGING}test-image-predefined-group:latest"], [predefined], user="1000"),
        img([f"{STAGING}test-image-tags:1", f"{STAGING}test-image-tags:2", f"{STAGING}test-image-tags:3"],
            [marker("test-image-tags")]),
    ]
    for name, user in (("test-image-user-uid", "1002"), ("test-image-user-username", "www-data"),
                       ("test-image-user-uid-group", "1003:1004"), ("test-image-user-username-group", "www-data:1004")):
        out.append(img([f"{STAGING}{name}:latest"], user=user))
    for name, tag in (("test-image-latest", "latest"), ("test-image-tag", "test"), ("test-image-1", "latest"),
                      ("test-image-2", "latest"), ("test-image-3", "latest")):
        out.append(img([f"{STAGING}{name}:{tag}"], [marker(name)]))
    out.append(img([f"{STAGING}test-image-tag:all"], [marker("test-image-tag-all")]))
    return out


def cache_dir() -> Path:
    return Path(os.environ.get("CRI_RESMGR_DEV_CACHE", Path.home() / ".cache" / "cri-resmgr-dev")) / "critest-images"


def input_key(busybox: str) -> str:
    h = hashlib.sha256()
    inputs = [Path(__file__), HACKS / "docker_archive.py", Path(busybox)]
    inputs += [Path(p) for b in HOST_BINARIES for p in [b, *shared_libraries(b)]]
    for path in inputs:
        h.update(path.read_bytes())
    h.update((shutil.which("gcc") or "").encode())
    return h.hexdigest()[:16]


def build(busybox: str = "/bin/busybox", cache: Path | None = None) -> Path:
    """The critest images' docker-archive, built once per input hash (returns the cached path)."""
    if not Path(busybox).is_file():
        raise SystemExit(f"{busybox} not found: install busybox-static (apt) or pass --busybox")
    out = (cache or cache_dir()) / f"critest-images-{input_key(busybox)}.tar"
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".{os.getpid()}")
    write_docker_archive(str(tmp), images(busybox))
    os.replace(tmp, out)  # write_docker_archive is atomic itself; the rename makes concurrent builds safe too
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--busybox", default="/bin/busybox", help="a static busybox binary (busybox-static)")
    parser.add_argument("--cache", type=Path, default=None, help=f"cache directory (default {cache_dir()})")
    args = parser.parse_args()
    t0 = time.monotonic()
    path = build(args.busybox, args.cache)
    print(f"critest images: {path} ({time.monotonic() - t0:.1f}s)", file=sys.stderr)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
