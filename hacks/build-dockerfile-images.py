#!/usr/bin/env python3
"""Build the Dockerfile's two targets with buildah (no daemon) and write them as docker-archive tars.

  1. Base images, made locally from the test rootfs that `make setup` debootstraps
     (~/.cache/cri-resmgr-dev/rootfs/bookworm.tar.zst):
       localhost/cri-resmgr-base:<hash>     the rootfs as an image (BASE_IMAGE: glibc, zlib, nsenter)
       localhost/cri-resmgr-python:<hash>   plus python3-venv, libpython3.11 and binutils from Debian's apt
                                            (PYTHON_IMAGE)
  2. `buildah bud` of --target extension and --target installation with those as build args, helm from
     the setup cache as the `helm` build context, host network for pip (PyPI is the only thing it reaches).
  3. Each target exported as <output-dir>/extension.tar and <output-dir>/installation.tar (the latter
     tagged as both the installer and the agent image), named like hacks/build-images.py names them.

The context is first staged (the Dockerfile and every path it COPYs), then hashed and built from that
frozen copy. The result is cached by the content hash (staged context, helm, the rootfs, this script)
under ~/.cache/cri-resmgr-dev/dockerfile-images/<hash>/ (the newest three), so a rerun with unchanged
inputs takes seconds; other --registry/--tag names are written by rewriting the archive's manifest.
buildah's own storage lives in ~/.cache/cri-resmgr-dev/buildah/ (never the machine's /var/lib/containers);
intermediate layers are pruned after each build. Needs root (as `make setup` does).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from shipped_images import ARCHIVES, DEFAULT_REGISTRY, DEFAULT_TAG, image_names, run_builder

REPO = Path(__file__).resolve().parent.parent
# Bump when the steps below change what they produce.
RECIPE = "v2"
KEEP_RESULTS = 3
PYTHON_PACKAGES = ["python3-venv", "libpython3.11", "binutils"]
# Dockerfile targets: one per archive, named alike.
TARGETS = list(ARCHIVES)
SETUP_HINT = "run `make setup` (bash hacks/setup-tools.sh)"
# As Debian's slim images do: no documentation but copyright notices, no man pages or translations, no apt
# lists; packages installed later leave them out too (dpkg path filters).
SLIM_FILTERS = """path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
"""
SLIM_REMOVE = "usr/share/man usr/share/info usr/share/locale var/lib/apt/lists var/cache/apt/archives"


def log(msg: str) -> None:
    print(f"build-dockerfile-images: {msg}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    return Path(os.environ.get("CRI_RESMGR_DEV_CACHE", Path.home() / ".cache" / "cri-resmgr-dev"))


class Buildah:
    """buildah and skopeo on a private storage root under the cache."""

    def __init__(self, storage: Path) -> None:
        for tool in ("buildah", "skopeo"):
            if shutil.which(tool) is None:
                raise SystemExit(f"build-dockerfile-images: {tool} not found; {SETUP_HINT}")
        self.root, self.runroot = storage / "root", storage / "runroot"
        self.driver = "overlay"

    def argv(self, *args: str) -> list[str]:
        return ["buildah", "--root", str(self.root), "--runroot", str(self.runroot),
                "--storage-driver", self.driver, *args]

    def run(self, *args: str, capture: bool = True) -> str:
        argv = self.argv(*args)
        r = subprocess.run(argv, text=True, stdout=subprocess.PIPE if capture else None,
                           stderr=subprocess.PIPE if capture else None)
        if r.returncode != 0:
            detail = (r.stderr or "").strip()[-3000:] if capture else "(see the output above)"
            raise SystemExit(f"build-dockerfile-images: {shlex.join(argv)} failed ({r.returncode}):\n{detail}")
        return (r.stdout or "").strip()

    def has_image(self, name: str) -> bool:
        return subprocess.run(self.argv("inspect", "--type", "image", name), capture_output=True).returncode == 0

    def storage_ref(self, name: str) -> str:
        return f"containers-storage:[{self.driver}@{self.root}+{self.runroot}]{name}"


def sha256_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def make_base_image(b: Buildah, rootfs: Path) -> str:
    """The debootstrapped rootfs as an image; its tag is the tarball's hash, so it is made once."""
    name = f"localhost/cri-resmgr-base:{sha256_file(rootfs)[:16]}-{RECIPE}"
    if b.has_image(name):
        return name
    log(f"base image {name} from {rootfs}")
    ctr = b.run("from", "scratch")
    try:
        mnt = b.run("mount", ctr)
        subprocess.run(f"zstd -dc {shlex.quote(str(rootfs))} | tar -C {shlex.quote(mnt)} --numeric-owner -xf -",
                       shell=True, check=True)
        slim(Path(mnt))
        # The rootfs boots systemd-nspawn nodes; as an image it only needs a shell and a sane PATH.
        b.run("config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
              "--cmd", "/bin/bash", "--os", "linux", "--arch", "amd64", ctr)
        b.run("commit", "--rm", ctr, name)
    except BaseException:
        subprocess.run(b.argv("rm", ctr), capture_output=True)
        raise
    return name


def slim(root: Path) -> None:
    for rel in SLIM_REMOVE.split():
        for child in (root / rel).glob("*"):
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            elif child.name != "partial":
                child.unlink()
    for doc in (root / "usr/share/doc").glob("*"):
        for item in doc.iterdir() if doc.is_dir() and not doc.is_symlink() else []:
            if item.name != "copyright":
                shutil.rmtree(item) if item.is_dir() and not item.is_symlink() else item.unlink()
    (root / "etc/dpkg/dpkg.cfg.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/dpkg/dpkg.cfg.d/slim-image").write_text(SLIM_FILTERS)


def make_python_image(b: Buildah, base: str) -> str:
    """The base plus python3's venv module and binutils, from Debian's apt (the only network it uses)."""
    key = hashlib.sha256(f"{base} {' '.join(PYTHON_PACKAGES)}".encode()).hexdigest()[:16]
    name = f"localhost/cri-resmgr-python:{key}-{RECIPE}"
    if b.has_image(name):
        return name
    log(f"python image {name}: apt-get install {' '.join(PYTHON_PACKAGES)}")
    ctr = b.run("from", "--pull-never", base)
    try:
        script = ("export DEBIAN_FRONTEND=noninteractive && apt-get update -qq && "
                  f"apt-get install -y -qq --no-install-recommends {' '.join(PYTHON_PACKAGES)} >/dev/null && "
                  "rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb && python3 -m venv --help >/dev/null")
        b.run("run", "--isolation", "chroot", "--network", "host", ctr, "--", "sh", "-c", script, capture=False)
        b.run("commit", "--rm", ctr, name)
    except BaseException:
        subprocess.run(b.argv("rm", ctr), capture_output=True)
        raise
    return name


def context_sources(dockerfile: Path) -> list[str]:
    """Every context path the Dockerfile COPYs or ADDs (not --from another stage or context)."""
    sources: list[str] = []
    for line in dockerfile.read_text().splitlines():
        words = line.split()
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        if any(w.startswith("--from=") for w in words[1:]) or len(args) < 2:
            continue
        sources += args[:-1]
    return sources


def stage_context(dockerfile: Path, context: Path, dest: Path) -> Path:
    """Copy the Dockerfile, .dockerignore and what the Dockerfile copies from ``context`` into ``dest``;
    returns the staged Dockerfile. Hashing and building the same frozen copy means edits made to the
    working tree during a build cannot end up in an image cached under another content hash."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(dockerfile, dest / "Dockerfile")
    if (context / ".dockerignore").is_file():
        shutil.copy2(context / ".dockerignore", dest / ".dockerignore")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for rel in context_sources(dockerfile):
        src, out = context / rel, dest / rel
        if not src.exists():
            raise SystemExit(f"build-dockerfile-images: the Dockerfile copies {rel}, which does not exist")
        out.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, out, ignore=ignore, dirs_exist_ok=True)
        else:
            shutil.copy2(src, out)
    return dest / "Dockerfile"


def tree_digest(h: hashlib._Hash, root: Path, rel: str) -> None:
    path = root / rel
    if not path.exists():
        raise SystemExit(f"build-dockerfile-images: the Dockerfile copies {rel}, which does not exist")
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        if "__pycache__" in f.parts or f.suffix == ".pyc":
            continue
        digest, mode = sha256_file(f), f.stat().st_mode
        h.update(f"{f.relative_to(root)}\0{oct(mode & 0o111)}\0".encode())
        h.update(digest.encode())


def content_key(dockerfile: Path, context: Path, helm: Path, rootfs: Path) -> str:
    h = hashlib.sha256(f"{RECIPE} {PYTHON_PACKAGES}".encode())
    for path in (dockerfile, context / ".dockerignore", Path(__file__), helm, rootfs):
        h.update(f"{path.name}\0".encode())
        h.update(sha256_file(path).encode() if path.exists() else b"-")
    for rel in context_sources(dockerfile):
        tree_digest(h, context, rel)
    return h.hexdigest()


def pip_ca_bundle() -> str | None:
    """The CA bundle this machine's pip trusts (PyPI may be reached through a TLS-inspecting proxy)."""
    for candidate in (os.environ.get("PIP_CERT"), os.environ.get("SSL_CERT_FILE"),
                      "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and os.path.isfile(candidate):
            return candidate
    return None


def build_target(b: Buildah, target: str, dockerfile: Path, context: Path, helm: Path, python_image: str,
                 base_image: str, image: str) -> None:
    t0 = time.monotonic()
    log(f"buildah bud --target {target} (pip from PyPI; the executable build takes a few minutes)")
    ca = pip_ca_bundle()
    b.run("bud", "--layers", "--force-rm", "--pull-never", "--isolation", "chroot", "--network", "host",
          *(["--secret", f"id=pip_ca,src={ca}"] if ca else []),
          "--build-arg", f"PYTHON_IMAGE={python_image}", "--build-arg", f"BASE_IMAGE={base_image}",
          "--build-context", f"helm={helm.parent}", "--target", target, "-f", str(dockerfile), "-t", image,
          str(context), capture=False)
    log(f"{target}: built {image} in {time.monotonic() - t0:.0f}s")


def export(b: Buildah, image: str, archive: Path, names: list[str]) -> None:
    tmp = archive.with_suffix(".tar.tmp")
    tmp.unlink(missing_ok=True)
    argv = ["skopeo", "copy", "--quiet", b.storage_ref(image), f"docker-archive:{tmp}:{names[0]}"]
    for extra in names[1:]:
        argv += ["--additional-tag", extra]
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"build-dockerfile-images: exporting {image} failed: {r.stderr.strip()}")
    os.replace(tmp, archive)


def place(src: Path, dest: Path, names: list[str], cached_names: list[str]) -> None:
    """Put a cached archive at ``dest`` under ``names``: a hard link when the names are the cached ones (the
    tars are hundreds of MB), else a copy whose manifest.json carries the new names (layers unchanged)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".tar.tmp")
    tmp.unlink(missing_ok=True)
    if names == cached_names:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
    else:
        with tarfile.open(src) as tin, tarfile.open(tmp, "w") as tout:
            for member in tin:
                data = tin.extractfile(member) if member.isfile() else None
                if member.name == "manifest.json" and data is not None:
                    manifest = json.load(data)
                    for entry in manifest:
                        entry["RepoTags"] = names
                    body = json.dumps(manifest).encode()
                    member.size = len(body)
                    data = io.BytesIO(body)
                tout.addfile(member, data)
    os.replace(tmp, dest)


def prune(b: Buildah, keep: tuple[str, ...]) -> None:
    """Drop working containers (left by failed builds), every image but ``keep`` and dangling layers:
    the archives in the cache are what is kept, buildah's storage only holds the base images."""
    subprocess.run(b.argv("rm", "--all"), capture_output=True)
    listed = subprocess.run(b.argv("images", "--format", "{{.Name}}:{{.Tag}}"), capture_output=True, text=True)
    for name in listed.stdout.split():
        if name not in keep and not name.startswith("<none>"):
            subprocess.run(b.argv("rmi", "--force", name), capture_output=True)
    subprocess.run(b.argv("rmi", "--prune"), capture_output=True)


def build(args: argparse.Namespace) -> dict[str, list[str]]:
    cache = cache_dir()
    dockerfile, context = Path(args.dockerfile).resolve(), Path(args.context).resolve()
    helm, rootfs = Path(args.helm), Path(args.rootfs)
    for what, path in (("helm", helm), ("rootfs", rootfs), ("Dockerfile", dockerfile)):
        if not path.is_file():
            raise SystemExit(f"build-dockerfile-images: {what} not found at {path}; "
                             f"{SETUP_HINT if what != 'Dockerfile' else 'pass --dockerfile'}")
    if os.geteuid() != 0:
        raise SystemExit("build-dockerfile-images: needs root (buildah's overlay storage and chroot isolation)")
    names = image_names(args.registry, args.tag)
    # The cache holds the images under the default names; others are written by rewriting manifest.json.
    cached_names = image_names(DEFAULT_REGISTRY, DEFAULT_TAG)

    out_dir = Path(args.output_dir)
    (cache / "dockerfile-images").mkdir(parents=True, exist_ok=True)
    with open(cache / "dockerfile-images" / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time per cache (parallel test sessions)
        (cache / "dockerfile-context").mkdir(exist_ok=True)
        staged = Path(tempfile.mkdtemp(dir=cache / "dockerfile-context"))
        try:
            return _build_staged(args, cache, stage_context(dockerfile, context, staged), staged, helm, rootfs,
                                 out_dir, names, cached_names)
        finally:
            shutil.rmtree(staged, ignore_errors=True)


def _build_staged(args: argparse.Namespace, cache: Path, dockerfile: Path, context: Path, helm: Path, rootfs: Path,
                  out_dir: Path, names: dict[str, list[str]], cached_names: dict[str, list[str]]
                  ) -> dict[str, list[str]]:
    results = cache / "dockerfile-images"
    key = content_key(dockerfile, context, helm, rootfs)
    done = results / key
    if args.force or not all((done / f"{t}.tar").is_file() for t in TARGETS):
        b = Buildah(cache / "buildah")
        subprocess.run(b.argv("rm", "--all"), capture_output=True)
        base = make_base_image(b, rootfs)
        python_image = make_python_image(b, base)
        tmp = done.with_name(key + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for target in TARGETS:
            image = f"localhost/cri-resmgr-dockerfile-{target}:{key[:16]}"
            build_target(b, target, dockerfile, context, helm, python_image, base, image)
            export(b, image, tmp / f"{target}.tar", cached_names[target])
        prune(b, keep=(base, python_image))
        shutil.rmtree(done, ignore_errors=True)
        os.replace(tmp, done)
        # Keep the newest few results (each is ~750 MB): parallel sessions on different trees share the cache.
        kept = sorted((d for d in results.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime, reverse=True)
        for old in kept[KEEP_RESULTS:]:
            shutil.rmtree(old, ignore_errors=True)
    else:
        os.utime(done)  # recently used
        log(f"up to date (inputs {key[:16]}): {done}")
    written = {}
    for target in TARGETS:
        dest = out_dir / f"{target}.tar"
        place(done / f"{target}.tar", dest, names[target], cached_names[target])
        written[str(dest)] = names[target]
    (out_dir / "dockerfile-images.sha256").write_text(key + "\n")
    return written


def main() -> int:
    cache = cache_dir()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output-dir", default=str(REPO / "_out" / "images-dockerfile"),
                   help="where extension.tar and installation.tar go (default: %(default)s)")
    p.add_argument("--dockerfile", default=str(REPO / "Dockerfile"), help="default: %(default)s")
    p.add_argument("--context", default=str(REPO), help="build context (default: %(default)s)")
    p.add_argument("--helm", default=str(cache / "bin" / "helm"), help="linux helm binary (default: %(default)s)")
    p.add_argument("--rootfs", default=str(cache / "rootfs" / "bookworm.tar.zst"),
                   help="debootstrapped rootfs for the base images (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="rebuild even when the cached result matches")
    return run_builder("build-dockerfile-images", p, build)


if __name__ == "__main__":
    sys.exit(main())
