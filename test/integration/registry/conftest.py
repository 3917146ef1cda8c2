"""A real docker-registry on loopback (hacks/registry.py) and a private containerd that pulls through it.

Each test module runs inside a network namespace of its own that has nothing but loopback: whatever the
registry configuration does, no pull can reach beyond this machine (a broken mirror setup shows up as a
failed lookup or an unreachable network, never as traffic to an upstream registry).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from fixtures.containerd import Containerd, running_containerd

from devland.hacks import load_hack
from devland.netns import NetNS
from devland.procs import free_port
from devland.tools import Tools

REPO = Path(__file__).resolve().parents[3]
# This machine's own network namespace, held open from import time (before any test enters its own):
# builds that need PyPI run there.
HOST_NET_FD = os.open("/proc/thread-self/ns/net", os.O_RDONLY)


@pytest.fixture(scope="module", autouse=True)
def loopback_only_network() -> Iterator[NetNS]:
    """The module's tests, and every process they start, in a fresh network namespace with only ``lo``."""
    netns = NetNS(f"crl-reg-{secrets.token_hex(4)}")
    netns.create([])
    try:
        with netns.entered():
            yield netns
    finally:
        netns.delete()


@pytest.fixture(scope="session")
def registry_mod() -> ModuleType:
    return load_hack("registry")


@pytest.fixture(scope="session")
def test_images_tar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """busybox + pause as a docker-archive (hacks/make-test-images.py), independent of the setup cache."""
    out = tmp_path_factory.mktemp("archives") / "test-images.tar"
    subprocess.run([sys.executable, str(REPO / "hacks" / "make-test-images.py"), "--output", str(out)],
                   check=True, capture_output=True, timeout=120)
    return out


@pytest.fixture(scope="module")
def registry(registry_mod: ModuleType, tmp_path_factory: pytest.TempPathFactory):
    """A registry of this module's own, on a free loopback port; stopped (and checked gone) afterwards."""
    workdir = tmp_path_factory.mktemp("registry")
    reg = registry_mod.start(workdir, f"127.0.0.1:{free_port()}")
    yield reg
    assert registry_mod.stop(workdir)


@pytest.fixture(scope="module")
def certs_dir(registry_mod: ModuleType, registry, tmp_path_factory: pytest.TempPathFactory) -> Path:
    certs = tmp_path_factory.mktemp("certs.d")
    registry_mod.write_hosts_toml(certs, registry.address)
    return certs


@pytest.fixture(scope="module")
def pulling_containerd(tools: Tools, certs_dir: Path) -> Iterator[Containerd]:
    """A containerd whose CRI pulls read certs_dir, as a landscape node's does."""
    with running_containerd(tools, "ctrd-reg-", registry_config_path=certs_dir) as ctrd:
        yield ctrd


@pytest.fixture(scope="session")
def dockerfile_image_tars(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The Dockerfile-built images under their default names, those of charts/images.yaml (cached: warm in
    seconds, a cold build takes minutes)."""
    out = tmp_path_factory.mktemp("dockerfile-images")
    # The build reaches PyPI, so it runs in this machine's network namespace, not the tests' loopback-only one.
    r = subprocess.run(["nsenter", f"--net=/proc/self/fd/{HOST_NET_FD}", sys.executable,
                        str(REPO / "hacks" / "build-dockerfile-images.py"), "--output-dir", str(out)],
                       capture_output=True, text=True, timeout=2400, pass_fds=(HOST_NET_FD,))
    assert r.returncode == 0, f"build-dockerfile-images.py failed:\n{r.stderr[-6000:]}"
    return [out / "extension.tar", out / "installation.tar"]
