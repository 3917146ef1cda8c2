#!/usr/bin/env python3
"""Build the two shipped images as docker-archive tars, without a container engine.

  extension image     gardener-extension-cri-resmgr (the single-file executable), the helm CLI
                      and the charts at /charts; runs as uid 65532 with CRI_RESMGR_CHARTS_DIR=/charts.
  installation image  the single-file executable at /opt/cri-resmgr/bin/cri-resmgr (what the installer
                      copies to the node) with cri-resmgr, cri-resmgr-agent, cri-resmgr-agent-probe and
                      cri-resmgr-installer on PATH, plus nsenter; tagged as both the installer and the agent image.

Both sit on a base layer with the host's glibc (the executable is built on this host, so its glibc matches),
/tmp (the one-file executable unpacks itself there) and passwd/group entries for root and nonroot (65532).
Writes <output-dir>/extension.tar and <output-dir>/installation.tar; import them with
``ctr -n k8s.io images import``. The Dockerfile builds the same images with a container engine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from oci_layout import PATH_ENV, Image, Layer, write_docker_archive

REPO = Path(__file__).resolve().parent.parent
DEFAULT_REGISTRY = "europe-docker.pkg.dev/gardener-project/public/gardener/extensions"
DEFAULT_TAG = "v0.1.0"
EXE_DIR = "/opt/cri-resmgr/bin"
NODE_COMMANDS = ["cri-resmgr", "cri-resmgr-agent", "cri-resmgr-agent-probe", "cri-resmgr-installer"]
EXTENSION_COMMAND = "gardener-extension-cri-resmgr"
NONROOT = 65532
# glibc and libgcc_s: what the PyInstaller bootloader and its bundled libraries expect from the system.
SYSTEM_LIB_PACKAGES = ["libc6", "libgcc-s1"]


def log(msg: str) -> None:
    print(f"build-images: {msg}", file=sys.stderr, flush=True)


def package_libs(packages: list[str]) -> list[str]:
    out = subprocess.run(["dpkg", "-L", *packages], check=True, capture_output=True, text=True).stdout
    libs = []
    for path in out.split():
        name = os.path.basename(path)
        in_lib_dir = os.path.dirname(path) in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64")
        if in_lib_dir and ".so" in name and os.path.isfile(path):
            libs.append(path)
    return sorted(libs)


def ldd_libs(binary: str) -> list[str]:
    """Absolute paths of the shared libraries a dynamic binary loads (empty for a static one)."""
    r = subprocess.run(["ldd", binary], capture_output=True, text=True)
    libs = []
    for line in r.stdout.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
            libs.append(parts[2])
        elif parts and parts[0].startswith("/"):
            libs.append(parts[0])
    return libs


def base_layer() -> bytes:
    layer = Layer()
    for d in ("bin", "dev", "etc", "proc", "sys", "root", "var", "run"):
        layer.dir(d)
    layer.dir("tmp", mode=0o1777)
    layer.dir("var/tmp", mode=0o1777)
    layer.dir("home/nonroot", mode=0o755, uid=NONROOT, gid=NONROOT)
    layer.file("etc/passwd", f"root:x:0:0:root:/root:/sbin/nologin\n"
                             f"nonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n".encode())
    layer.file("etc/group", f"root:x:0:\nnonroot:x:{NONROOT}:\n".encode())
    for lib in package_libs(SYSTEM_LIB_PACKAGES):
        layer.host_path(lib)
    return layer.close()


def executable_layer(executable: str, commands: list[str]) -> bytes:
    layer = Layer()
    layer.host_file(executable, f"{EXE_DIR}/cri-resmgr", mode=0o755)
    # The PyInstaller bootloader's own libraries (libz); what it unpacks brings the rest.
    for lib in ldd_libs(executable):
        layer.host_path(lib)
    for name in commands:
        if name != "cri-resmgr" or EXE_DIR != "/usr/local/bin":
            layer.symlink(f"usr/local/bin/{name}", f"{EXE_DIR}/cri-resmgr")
    return layer.close()


def nsenter_layer(nsenter: str) -> bytes:
    layer = Layer()
    layer.host_file(nsenter, "usr/bin/nsenter", mode=0o755)
    for lib in ldd_libs(nsenter):
        layer.host_path(lib)
    return layer.close()


def extension_layer(helm: str, charts: str) -> bytes:
    layer = Layer()
    layer.host_file(helm, "usr/local/bin/helm", mode=0o755)
    layer.host_tree(charts, "charts")
    return layer.close()


def build(args: argparse.Namespace) -> dict[str, list[str]]:
    for what, path in (("executable", args.executable), ("helm", args.helm), ("nsenter", args.nsenter)):
        if not os.path.isfile(path):
            hint = {"executable": "run `make build-exe`", "helm": "run `make setup`"}.get(what, "install util-linux")
            raise SystemExit(f"build-images: {what} not found at {path}: {hint}")
    if not os.path.isdir(os.path.join(args.charts, "internal")):
        raise SystemExit(f"build-images: {args.charts} does not look like the repository's charts/ directory")
    os.makedirs(args.output_dir, exist_ok=True)
    reg, tag = args.registry.rstrip("/"), args.tag
    by = "hacks/build-images.py"

    log("base layer (glibc, /tmp, users)")
    base = base_layer()
    log(f"executable layer from {args.executable}")
    exe = executable_layer(args.executable, [*NODE_COMMANDS, EXTENSION_COMMAND])

    written: dict[str, list[str]] = {}
    log(f"installation image: nsenter from {args.nsenter}")
    installation = Image([f"{reg}/cri-resmgr-installer:{tag}", f"{reg}/cri-resmgr-agent:{tag}"],
                         [base, exe, nsenter_layer(args.nsenter)],
                         entrypoint=["/usr/local/bin/cri-resmgr-installer"], created_by=by)
    out = os.path.join(args.output_dir, "installation.tar")
    written[out] = write_docker_archive(out, [installation])

    log(f"extension image: helm from {args.helm}, charts from {args.charts}")
    extension = Image([f"{reg}/gardener-extension-cri-resmgr:{tag}"],
                      [base, exe, extension_layer(args.helm, args.charts)],
                      entrypoint=[f"/usr/local/bin/{EXTENSION_COMMAND}"], user=f"{NONROOT}:{NONROOT}",
                      env=[PATH_ENV, "CRI_RESMGR_CHARTS_DIR=/charts", "HOME=/home/nonroot"], created_by=by)
    out = os.path.join(args.output_dir, "extension.tar")
    written[out] = write_docker_archive(out, [extension])
    return written


def main() -> int:
    cache = Path(os.environ.get("CRI_RESMGR_DEV_CACHE", Path.home() / ".cache" / "cri-resmgr-dev"))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--executable", default=str(REPO / "_out" / "bin" / "cri-resmgr"),
                   help="the single-file executable from hacks/build-executable.sh (default: %(default)s)")
    p.add_argument("--helm", default=str(cache / "bin" / "helm"), help="helm binary (default: %(default)s)")
    p.add_argument("--charts", default=str(REPO / "charts"), help="charts directory (default: %(default)s)")
    p.add_argument("--nsenter", default="/usr/bin/nsenter", help="nsenter binary (default: %(default)s)")
    p.add_argument("--output-dir", default=str(REPO / "_out" / "images"),
                   help="where the tars go (default: %(default)s)")
    p.add_argument("--registry", default=DEFAULT_REGISTRY, help="image repository prefix (default: %(default)s)")
    p.add_argument("--tag", default=DEFAULT_TAG, help="image tag (default: %(default)s)")
    args = p.parse_args()
    t0 = time.monotonic()
    for path, tags in build(args).items():
        log(f"wrote {path} ({os.path.getsize(path) // (1 << 20)} MiB): {', '.join(tags)}")
    log(f"done in {time.monotonic() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
