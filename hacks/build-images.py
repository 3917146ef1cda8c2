#!/usr/bin/env python3
"""Build the two shipped images as docker-archive tars, without a container engine.

  extension image     gardener-extension-cri-resmgr, the helm CLI and the charts at /charts;
                      runs as uid 65532 with CRI_RESMGR_CHARTS_DIR=/charts. Also carries
                      gardener-extension-admission-cri-resmgr (the garden's admission).
  installation image  cri-resmgr, cri-resmgr-agent(-probe), cri-resmgr-installer and cri-resmgr-webhook on PATH,
                      and nsenter; tagged as both the installer and the agent image. The installer copies
                      the program directory /opt/cri-resmgr/lib to nodes (its --binary default).

Containers run the unpacked (one-dir) build from hacks/build-executable.sh at /opt/cri-resmgr/lib: it needs
no writable /tmp (the agent's root is read-only) and starts without unpacking itself on every probe.
Both images sit on a base layer with the host's glibc (the program is built on this host, so its glibc
matches), /tmp and passwd/group entries for root and nonroot (65532); that layer and the program's are shared.
Writes <output-dir>/extension.tar and <output-dir>/installation.tar; import them with
``ctr -n k8s.io images import``. The Dockerfile builds the same images with a container engine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from docker_archive import PATH_ENV, Image, Layer, write_docker_archive
from shipped_images import image_names, run_builder

REPO = Path(__file__).resolve().parent.parent
PROGRAM_DIR = "/opt/cri-resmgr/lib"
NODE_COMMANDS = ["cri-resmgr", "cri-resmgr-agent", "cri-resmgr-agent-probe", "cri-resmgr-installer",
                 "cri-resmgr-installer-probe", "cri-resmgr-webhook"]
EXTENSION_COMMAND = "gardener-extension-cri-resmgr"
# The garden's admission runs from the extension image (its chart names the command).
ADMISSION_COMMAND = "gardener-extension-admission-cri-resmgr"
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


def program_layer(executable_dir: str, commands: list[str]) -> bytes:
    """The unpacked (one-dir) program the containers run, with every command on PATH."""
    layer = Layer()
    layer.host_tree(executable_dir, PROGRAM_DIR)
    for name in commands:
        layer.symlink(f"usr/local/bin/{name}", f"{PROGRAM_DIR}/cri-resmgr")
    # The bootloader's own libraries (libz); the bundle brings the rest.
    for lib in ldd_libs(os.path.join(executable_dir, "cri-resmgr")):
        layer.host_path(lib)
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
    executable_dir = args.executable_dir or args.executable + ".dir"
    for what, path in (("executable", args.executable), ("executable", os.path.join(executable_dir, "cri-resmgr")),
                       ("helm", args.helm), ("nsenter", args.nsenter)):
        if not os.path.isfile(path):
            hint = {"executable": "run `make build-exe`", "helm": "run `make setup`"}.get(what, "install util-linux")
            raise SystemExit(f"build-images: {what} not found at {path}: {hint}")
    if not os.path.isdir(os.path.join(args.charts, "internal")):
        raise SystemExit(f"build-images: {args.charts} does not look like the repository's charts/ directory")
    os.makedirs(args.output_dir, exist_ok=True)
    names = image_names(args.registry, args.tag)
    by = "hacks/build-images.py"

    log("base layer (glibc, /tmp, users)")
    base = base_layer()
    log(f"program layer from {executable_dir}")
    program = program_layer(executable_dir, [*NODE_COMMANDS, EXTENSION_COMMAND, ADMISSION_COMMAND])

    written: dict[str, list[str]] = {}
    log(f"installation image: nsenter from {args.nsenter}")
    installation = Image(names["installation"],
                         [base, program, nsenter_layer(args.nsenter)],
                         entrypoint=["/usr/local/bin/cri-resmgr-installer"], created_by=by)
    out = os.path.join(args.output_dir, "installation.tar")
    written[out] = write_docker_archive(out, [installation])

    log(f"extension image: helm from {args.helm}, charts from {args.charts}")
    extension = Image(names["extension"],
                      [base, program, extension_layer(args.helm, args.charts)],
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
    p.add_argument("--executable-dir", default=None,
                   help="its unpacked one-dir build (default: <executable>.dir)")
    p.add_argument("--helm", default=str(cache / "bin" / "helm"), help="helm binary (default: %(default)s)")
    p.add_argument("--charts", default=str(REPO / "charts"), help="charts directory (default: %(default)s)")
    p.add_argument("--nsenter", default="/usr/bin/nsenter", help="nsenter binary (default: %(default)s)")
    p.add_argument("--output-dir", default=str(REPO / "_out" / "images"),
                   help="where the tars go (default: %(default)s)")
    return run_builder("build-images", p, build)


if __name__ == "__main__":
    sys.exit(main())
