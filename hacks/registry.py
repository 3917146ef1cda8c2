#!/usr/bin/env python3
"""A local OCI registry on loopback for the landscape, the demo and `make push-images` (stdlib only).

  start    run Debian's docker-registry on a loopback address (default 127.0.0.1:5000) with its own config
           file and storage under WORKDIR; returns once it answers /v2/. WORKDIR keeps registry.pid,
           config.yml, registry.log and (unless --storage) storage/.
  stop     stop the registry started in WORKDIR, by its pid file, and verify it is gone.
  push     copy docker-archive tars (hacks/build-images.py, the Dockerfile build, test images) into a
           registry with skopeo, no Docker daemon. By default into the local registry as a mirror: the
           image docker.io/library/busybox:1 lands at 127.0.0.1:5000/library/busybox:1, which is where a
           node's containerd looks when certs.d sends docker.io to that registry (see hosts).
  list     what the registry holds: every repository with its tags and manifest digests.
  verify   check that references resolve: manifest present and every blob it names stored.
  hosts    write containerd certs.d/<host>/hosts.toml files so that the local registry's own name and every
           upstream name the landscape uses (docker.io, registry.k8s.io, europe-docker.pkg.dev, ...) resolve
           to the loopback registry. Each file sets `server` to the registry too, so a miss is a fast
           "not found" from loopback and never a fall-through to the internet. Containerd reads these
           files with [plugins."io.containerd.grpc.v1.cri".registry] config_path = "<dir>".

Upstream names share one namespace in the mirror (the host part is dropped), as with any registry
mirror: docker.io/library/x and quay.io/library/x would be the same repository.

Examples:
  hacks/registry.py start --workdir _out/registry
  hacks/registry.py push _out/images/*.tar
  hacks/registry.py push --registry ghcr.io/me/cri-resmgr --tag v1 --no-mirror _out/images/extension.tar
  hacks/registry.py hosts --certs-dir /var/lib/machines/node0/etc/containerd/certs.d
  hacks/registry.py stop --workdir _out/registry
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ADDRESS = "127.0.0.1:5000"
# Every registry name an image of the landscape may carry: test images (docker.io, registry.k8s.io), the
# Makefile's REGISTRY default (europe-docker.pkg.dev), the ship tests' registry.test, and the usual public
# hosts so that a stray reference is a local miss too. "_default" is containerd's catch-all directory.
UPSTREAM_HOSTS = ("docker.io", "registry-1.docker.io", "registry.k8s.io", "k8s.gcr.io", "gcr.io", "ghcr.io",
                  "quay.io", "europe-docker.pkg.dev", "eu.gcr.io", "registry.test", "_default")
DOCKER_HUB = "docker.io"
MANIFEST_TYPES = ", ".join([
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
])
SETUP_HINT = "run `make setup` (bash hacks/setup-tools.sh installs docker-registry and skopeo)"
# Loopback only: never a proxy, whatever the environment says.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class RegistryError(RuntimeError):
    """A registry operation failed; the message says what and how to fix it."""


def log(msg: str) -> None:
    print(f"registry: {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Registry:
    """A docker-registry process started by :func:`start`."""

    address: str
    workdir: Path
    storage: Path
    pid: int

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "registry.log"


# ---- addresses and names

def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise RegistryError(f"bad registry address {address!r}: expected HOST:PORT, e.g. {DEFAULT_ADDRESS}")
    return host.strip("[]"), int(port)


def is_loopback(address: str) -> bool:
    host = address.split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    return host == "localhost" or host.startswith("127.") or host == "::1"


def split_reference(ref: str) -> tuple[str, str, str]:
    """(host, repository path, tag) of a tagged reference; Docker Hub's short forms are normalized."""
    if "@" in ref or not ref or ref != ref.strip() or "//" in ref:
        raise RegistryError(f"bad image reference {ref!r}: expected [HOST[:PORT]/]PATH[:TAG] (digests are not "
                            f"supported here)")
    name, _, tag = ref.rpartition(":")
    if not name or "/" in tag:
        name, tag = ref, "latest"
    first, _, rest = name.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        first, rest = DOCKER_HUB, name
    if first in (DOCKER_HUB, "index.docker.io", "registry-1.docker.io"):
        first = DOCKER_HUB
        if "/" not in rest:
            rest = f"library/{rest}"
    return first, rest, tag


def mirror_reference(ref: str, address: str) -> str:
    """Where an upstream reference lives in the mirror at ``address``: the host part is replaced."""
    _, path, tag = split_reference(ref)
    return f"{address}/{path}:{tag}"


def retag(ref: str, registry: str | None, tag: str | None) -> str:
    """``ref`` moved under the repository prefix ``registry`` (keeping its last path element) and/or ``tag``."""
    host, path, old_tag = split_reference(ref)
    name = f"{registry.rstrip('/')}/{path.rsplit('/', 1)[-1]}" if registry else f"{host}/{path}"
    return f"{name}:{tag or old_tag}"


# ---- process: start, wait, stop

def render_config(address: str, storage: Path) -> str:
    # JSON is YAML. No proxy section: a pull-through cache would reach for the upstream on a miss.
    return json.dumps({
        "version": 0.1,
        "log": {"level": "info", "formatter": "text", "fields": {"service": "registry"}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True},
                    "maintenance": {"uploadpurging": {"enabled": False}}},
        "http": {"addr": address, "headers": {"X-Content-Type-Options": ["nosniff"]}},
    }, indent=2) + "\n"


def answers(address: str, timeout: float = 2.0) -> bool:
    """True if a registry answers GET /v2/ at ``address`` (200, or 401 from one that wants auth)."""
    try:
        with _HTTP.open(f"http://{address}/v2/", timeout=timeout) as r:
            return r.status == 200
    except urllib.error.HTTPError as e:
        return e.code == 401
    except OSError:
        return False


def port_taken(address: str) -> bool:
    host, port = split_address(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(1)
        return s.connect_ex((host, port)) == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (our own unreaped child) no longer runs.
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _is_registry_process(pid: int, config: Path) -> bool:
    """Guards pid reuse: only a docker-registry serving this workdir's config may be signalled."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(a.endswith(b"docker-registry") for a in argv[:1]) and str(config).encode() in argv


def _log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def running(workdir: Path) -> Registry | None:
    """The registry started in ``workdir`` if it still runs."""
    workdir = Path(workdir)
    try:
        state = json.loads((workdir / "registry.pid").read_text())
    except (OSError, ValueError):
        return None
    pid = int(state["pid"])
    if not _pid_alive(pid) or not _is_registry_process(pid, workdir / "config.yml"):
        return None
    return Registry(state["address"], workdir, Path(state["storage"]), pid)


def start(workdir: Path, address: str = DEFAULT_ADDRESS, storage: Path | None = None,
          timeout: float = 30.0, binary: str = "docker-registry") -> Registry:
    """Start docker-registry serving ``storage`` (default WORKDIR/storage) on ``address``; wait for /v2/.

    Reuses the registry already running from ``workdir`` on the same address. Refuses a non-loopback address
    (nothing here may listen beyond the machine) and an address something else already holds.
    """
    workdir = Path(workdir).resolve()
    host, _ = split_address(address)
    if not is_loopback(host):
        raise RegistryError(f"refusing to serve on {address}: the local registry listens on loopback only")
    current = running(workdir)
    if current is not None:
        if current.address != address:
            raise RegistryError(f"{workdir} already runs a registry on {current.address} (pid {current.pid}); "
                                f"stop it first: hacks/registry.py stop --workdir {workdir}")
        if answers(address):
            log(f"already running on {address} (pid {current.pid})")
            return current
    exe = shutil.which(binary)
    if exe is None:
        raise RegistryError(f"{binary} not found; {SETUP_HINT}")
    if port_taken(address):
        raise RegistryError(f"{address} is already taken by another process; pick another address "
                            f"(--address) or stop what listens there (ss -ltnp 'sport = :{split_address(address)[1]}')")
    storage = Path(storage).resolve() if storage else workdir / "storage"
    storage.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "config.yml"
    config.write_text(render_config(address, storage))
    # REGISTRY_* variables would override the config file; the registry gets none of them.
    env = {k: v for k, v in os.environ.items() if not k.startswith("REGISTRY_")}
    log_path = workdir / "registry.log"
    with open(log_path, "ab") as out:
        proc = subprocess.Popen([exe, "serve", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True, cwd=workdir)
    reg = Registry(address, workdir, storage, proc.pid)
    (workdir / "registry.pid").write_text(json.dumps({"pid": proc.pid, "address": address,
                                                      "storage": str(storage)}) + "\n")
    deadline = time.monotonic() + timeout
    while not answers(address, timeout=1):
        if proc.poll() is not None:
            (workdir / "registry.pid").unlink(missing_ok=True)
            raise RegistryError(f"docker-registry exited with {proc.returncode} before answering on {address}:\n"
                                f"{_log_tail(log_path)}")
        if time.monotonic() > deadline:
            stop(workdir)
            raise RegistryError(f"docker-registry did not answer http://{address}/v2/ within {timeout:.0f}s:\n"
                                f"{_log_tail(log_path)}")
        time.sleep(0.1)
    log(f"serving {storage} on http://{address} (pid {proc.pid}, log {log_path})")
    return reg


def stop(workdir: Path, timeout: float = 15.0) -> bool:
    """Stop the registry started in ``workdir`` by its pid; verify the process is gone and the port free.

    Returns False if none was running there."""
    workdir = Path(workdir).resolve()
    reg = running(workdir)
    pid_file = workdir / "registry.pid"
    if reg is None:
        pid_file.unlink(missing_ok=True)
        return False
    os.kill(reg.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _pid_alive(reg.pid) and time.monotonic() < deadline:
        _reap(reg.pid)
        time.sleep(0.05)
    if _pid_alive(reg.pid):
        log(f"pid {reg.pid} ignored SIGTERM for {timeout:.0f}s; killing it")
        os.kill(reg.pid, signal.SIGKILL)
        for _ in range(100):
            _reap(reg.pid)
            if not _pid_alive(reg.pid):
                break
            time.sleep(0.05)
    if _pid_alive(reg.pid):
        raise RegistryError(f"docker-registry (pid {reg.pid}) is still running after SIGKILL")
    if answers(reg.address, timeout=1):
        raise RegistryError(f"docker-registry pid {reg.pid} is gone but {reg.address} still answers /v2/")
    pid_file.unlink(missing_ok=True)
    log(f"stopped pid {reg.pid} ({reg.address})")
    return True


def _reap(pid: int) -> None:
    """Collect our own child's exit status (started by start() in this process), if it is one."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


# ---- content: push, list, verify

def archive_tags(archive: Path) -> list[str]:
    """Every RepoTag of a docker-archive tar, in its manifest's order."""
    archive = Path(archive)
    if not archive.is_file():
        raise RegistryError(f"docker-archive not found: {archive} (build it first, e.g. `make build-images`)")
    try:
        with tarfile.open(archive) as tar:
            member = tar.extractfile("manifest.json")
            manifest = json.load(member) if member else None
    except (tarfile.TarError, KeyError, ValueError) as e:
        raise RegistryError(f"{archive} is not a docker-archive (no readable manifest.json): {e}") from e
    tags = [t for entry in manifest or [] for t in entry.get("RepoTags") or []]
    if not tags:
        raise RegistryError(f"{archive} has no tagged image (RepoTags empty)")
    return tags


def _skopeo() -> str:
    exe = shutil.which("skopeo")
    if exe is None:
        raise RegistryError(f"skopeo not found; {SETUP_HINT}")
    return exe


@dataclass(frozen=True)
class Pushed:
    source: str       # the tag inside the archive
    name: str         # the name nodes pull by (what the image vector says)
    destination: str  # where it was written (the mirror's path for that name, or the name itself)


def push(archive: Path, mirror: str | None = DEFAULT_ADDRESS, *, registry: str | None = None,
         tag: str | None = None) -> list[Pushed]:
    """Copy every tagged image of a docker-archive with skopeo.

    Each image is named after its archive tag, moved under ``registry`` and/or ``tag`` when given. With a
    ``mirror`` address the image goes to the mirror's path for that name (plain HTTP on loopback); without
    one it goes to the name itself (TLS, credentials from `skopeo login`).
    """
    skopeo = _skopeo()
    pushed = []
    for source in archive_tags(archive):
        name = retag(source, registry, tag)
        dest = mirror_reference(name, mirror) if mirror else name
        argv = [skopeo, "copy", "--quiet", f"docker-archive:{archive}:{source}", f"docker://{dest}"]
        if is_loopback(dest):
            argv.insert(2, "--dest-tls-verify=false")
        log(f"push {source} -> {dest}" + (f" (pulled as {name})" if dest != name else ""))
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode != 0:
            hint = f"; is a registry running at {mirror}? (hacks/registry.py start)" if mirror else ""
            raise RegistryError(f"skopeo copy {source} -> {dest} failed ({r.returncode}): "
                                f"{r.stderr.strip()}{hint}")
        pushed.append(Pushed(source, name, dest))
    return pushed


def _get(address: str, path: str, accept: str | None = None, method: str = "GET") -> tuple[int, dict, bytes]:
    req = urllib.request.Request(f"http://{address}{path}", method=method)
    if accept:
        req.add_header("Accept", accept)
    try:
        with _HTTP.open(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()
    except OSError as e:
        raise RegistryError(f"no registry answers at http://{address}: {e}") from e


def catalog(address: str = DEFAULT_ADDRESS) -> list[str]:
    repos: list[str] = []
    path = "/v2/_catalog?n=1000"
    while path:
        status, headers, body = _get(address, path)
        if status != 200:
            raise RegistryError(f"GET http://{address}{path}: HTTP {status}")
        repos += json.loads(body).get("repositories") or []
        # Pagination: Link: </v2/_catalog?last=...&n=...>; rel="next"
        link = headers.get("Link", "")
        path = link[link.find("<") + 1:link.find(">")] if 'rel="next"' in link else ""
    return sorted(repos)


def tags(address: str, repository: str) -> list[str]:
    status, _, body = _get(address, f"/v2/{repository}/tags/list")
    if status == 404:
        return []
    if status != 200:
        raise RegistryError(f"tags of {repository} at {address}: HTTP {status}")
    return sorted(json.loads(body).get("tags") or [])


def manifest_digest(address: str, repository: str, tag: str) -> str | None:
    """The digest of ``repository:tag`` in the registry, or None if it is not there."""
    status, headers, _ = _get(address, f"/v2/{repository}/manifests/{tag}", accept=MANIFEST_TYPES, method="HEAD")
    if status == 404:
        return None
    if status != 200:
        raise RegistryError(f"manifest {repository}:{tag} at {address}: HTTP {status}")
    return headers.get("Docker-Content-Digest")


def contents(address: str = DEFAULT_ADDRESS) -> dict[str, str]:
    """Every ``repository:tag`` the registry holds, with its manifest digest."""
    out = {}
    for repo in catalog(address):
        for tag in tags(address, repo):
            out[f"{repo}:{tag}"] = manifest_digest(address, repo, tag) or "?"
    return out


def verify(address: str, references: list[str]) -> dict[str, str]:
    """Check each reference resolves in the registry at ``address`` (by its path: upstream names work as
    through a mirror) and that every blob its manifest names is stored. Returns reference -> digest."""
    found, problems = {}, []
    for ref in references:
        _, path, tag = split_reference(ref)
        status, headers, body = _get(address, f"/v2/{path}/manifests/{tag}", accept=MANIFEST_TYPES)
        if status != 200:
            problems.append(f"{ref}: no manifest {path}:{tag} (HTTP {status})")
            continue
        manifest = json.loads(body)
        blobs = [manifest["config"]["digest"], *(layer["digest"] for layer in manifest.get("layers", []))] \
            if "config" in manifest else []
        missing = [b for b in blobs if _get(address, f"/v2/{path}/blobs/{b}", method="HEAD")[0] != 200]
        if missing:
            problems.append(f"{ref}: blobs missing: {', '.join(missing)}")
            continue
        found[ref] = headers.get("Docker-Content-Digest", "?")
    if problems:
        raise RegistryError(f"registry {address} lacks:\n  " + "\n  ".join(problems))
    return found


# ---- nodes: containerd's certs.d

def render_hosts_toml(address: str) -> str:
    url = f"http://{address}"
    # `server` is the fallback after the hosts: loopback too, so nothing is ever tried beyond the machine.
    return (f'# Written by hacks/registry.py: this name resolves to the local registry only.\n'
            f'server = "{url}"\n\n[host."{url}"]\n  capabilities = ["pull", "resolve"]\n')


def write_hosts_toml(certs_dir: Path, address: str = DEFAULT_ADDRESS,
                     upstreams: tuple[str, ...] | list[str] = UPSTREAM_HOSTS) -> list[Path]:
    """Write ``certs_dir/<host>/hosts.toml`` for the registry's own address and every upstream name."""
    split_address(address)
    written = []
    text = render_hosts_toml(address)
    for host in dict.fromkeys([address, *upstreams]):
        path = Path(certs_dir) / host / "hosts.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".toml.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
        written.append(path)
    return written


def containerd_registry_config(certs_dir: str) -> str:
    """The containerd config.toml section that makes CRI pulls read ``certs_dir`` (a path inside the node)."""
    return f'[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "{certs_dir}"\n'


# ---- CLI

def _cmd_start(args: argparse.Namespace) -> int:
    reg = start(args.workdir, args.address, args.storage, timeout=args.timeout)
    print(json.dumps({"address": reg.address, "pid": reg.pid, "storage": str(reg.storage),
                      "log": str(reg.log_path)}))
    return 0


def _cmd_stop(args: argparse.Namespace) -> int:
    if not stop(args.workdir):
        log(f"no registry running from {Path(args.workdir).resolve()}")
    return 0


def _cmd_push(args: argparse.Namespace) -> int:
    mirror = None if args.no_mirror else args.address
    if mirror and args.ensure_running and not answers(mirror):
        start(args.workdir, mirror)
    t0 = time.monotonic()
    pushed = [p for archive in args.archives for p in push(Path(archive), mirror, registry=args.registry,
                                                           tag=args.tag)]
    if mirror:
        verify(mirror, [p.destination for p in pushed])
    for p in pushed:
        print(p.name if p.name == p.destination else f"{p.name}\t{p.destination}")
    log(f"pushed {len(pushed)} image name(s) from {len(args.archives)} archive(s) in {time.monotonic() - t0:.1f}s")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    for ref, digest in contents(args.address).items():
        print(f"{args.address}/{ref}\t{digest}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    for ref, digest in verify(args.address, args.references).items():
        print(f"{ref}\t{digest}")
    return 0


def _cmd_hosts(args: argparse.Namespace) -> int:
    upstreams = args.upstream or list(UPSTREAM_HOSTS)
    for path in write_hosts_toml(Path(args.certs_dir), args.address, upstreams):
        print(path)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="registry.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    default_workdir = Path(__file__).resolve().parent.parent / "_out" / "registry"

    def common(sp: argparse.ArgumentParser, workdir: bool = False) -> None:
        sp.add_argument("--address", default=DEFAULT_ADDRESS, help="registry HOST:PORT (default: %(default)s)")
        if workdir:
            sp.add_argument("--workdir", type=Path, default=default_workdir,
                            help="config, pid file, log and storage of the registry (default: %(default)s)")

    sp = sub.add_parser("start", help="start docker-registry on loopback and wait until it answers /v2/")
    common(sp, workdir=True)
    sp.add_argument("--storage", type=Path, default=None, help="blob storage directory (default: WORKDIR/storage)")
    sp.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for /v2/ (default: %(default)s)")
    sp.set_defaults(func=_cmd_start)

    sp = sub.add_parser("stop", help="stop the registry started from WORKDIR (by pid) and verify it is gone")
    common(sp, workdir=True)
    sp.set_defaults(func=_cmd_stop)

    sp = sub.add_parser("push", help="copy docker-archive tars into the registry with skopeo (no Docker daemon)")
    common(sp, workdir=True)
    sp.add_argument("archives", nargs="+", help="docker-archive tar files")
    sp.add_argument("--registry", default=None,
                    help="repository prefix to name the images under (default: the archive's own names)")
    sp.add_argument("--tag", default=None, help="tag to push as (default: the archive's tags)")
    sp.add_argument("--no-mirror", action="store_true",
                    help="push to the names themselves (a real registry, TLS) instead of the local mirror")
    sp.add_argument("--ensure-running", action="store_true",
                    help="start a registry from WORKDIR first if nothing answers at --address")
    sp.set_defaults(func=_cmd_push)

    sp = sub.add_parser("list", help="every repository:tag the registry holds, with manifest digests")
    common(sp)
    sp.set_defaults(func=_cmd_list)

    sp = sub.add_parser("verify", help="check references resolve (manifest and all blobs present)")
    common(sp)
    sp.add_argument("references", nargs="+", help="image references; their host part is ignored (mirror view)")
    sp.set_defaults(func=_cmd_verify)

    sp = sub.add_parser("hosts", help="write containerd certs.d/<host>/hosts.toml pointing names at the registry")
    common(sp)
    sp.add_argument("--certs-dir", required=True, help="the node's certs.d directory (as seen from here)")
    sp.add_argument("--upstream", action="append", default=None,
                    help=f"an upstream host to redirect (repeatable; default: {' '.join(UPSTREAM_HOSTS)})")
    sp.set_defaults(func=_cmd_hosts)

    args = p.parse_args(argv)
    try:
        return args.func(args)
    except RegistryError as e:
        print(f"registry: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
