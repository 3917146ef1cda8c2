"""How hacks/registry.py names images: upstream names, their place in the mirror, renaming (no components)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("ref,expected", [
    ("busybox", ("docker.io", "library/busybox", "latest")),
    ("busybox:1.35", ("docker.io", "library/busybox", "1.35")),
    ("docker.io/library/busybox:1.35", ("docker.io", "library/busybox", "1.35")),
    ("index.docker.io/team/app:v1", ("docker.io", "team/app", "v1")),
    ("team/app", ("docker.io", "team/app", "latest")),
    ("registry.k8s.io/pause:3.6", ("registry.k8s.io", "pause", "3.6")),
    ("localhost/app:1", ("localhost", "app", "1")),
    ("127.0.0.1:5000/a/b/c:t", ("127.0.0.1:5000", "a/b/c", "t")),
    ("127.0.0.1:5000/a/b", ("127.0.0.1:5000", "a/b", "latest")),
    ("europe-docker.pkg.dev/gardener-project/public/gardener/extensions/cri-resmgr-agent:v0.1.0",
     ("europe-docker.pkg.dev", "gardener-project/public/gardener/extensions/cri-resmgr-agent", "v0.1.0")),
])
def test_split_reference(registry_mod, ref: str, expected: tuple[str, str, str]) -> None:
    assert registry_mod.split_reference(ref) == expected


@pytest.mark.parametrize("ref", ["", "app@sha256:" + "0" * 64, " app", "a//b"])
def test_bad_references_are_refused(registry_mod, ref: str) -> None:
    with pytest.raises(registry_mod.RegistryError, match="bad image reference"):
        registry_mod.split_reference(ref)


def test_mirror_and_retag(registry_mod) -> None:
    up = "europe-docker.pkg.dev/gardener-project/public/gardener/extensions/cri-resmgr-agent:v0.1.0"
    assert registry_mod.mirror_reference(up, "127.0.0.1:5000") == \
        "127.0.0.1:5000/gardener-project/public/gardener/extensions/cri-resmgr-agent:v0.1.0"
    assert registry_mod.mirror_reference("busybox", "127.0.0.1:5000") == "127.0.0.1:5000/library/busybox:latest"
    assert registry_mod.retag(up, "ghcr.io/me/x", None) == "ghcr.io/me/x/cri-resmgr-agent:v0.1.0"
    assert registry_mod.retag(up, None, "v2") == up.replace("v0.1.0", "v2")
    assert registry_mod.retag("busybox:1", None, None) == "docker.io/library/busybox:1"


@pytest.mark.parametrize("address,loopback", [
    ("127.0.0.1:5000", True), ("127.3.4.5:80", True), ("localhost:5000", True), ("[::1]:5000", True),
    ("10.0.0.1:5000", False), ("registry.example.com:443", False), ("0.0.0.0:5000", False),
])
def test_is_loopback(registry_mod, address: str, loopback: bool) -> None:
    assert registry_mod.is_loopback(address) is loopback
