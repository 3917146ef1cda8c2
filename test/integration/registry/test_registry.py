"""hacks/registry.py against a real docker-registry, skopeo and containerd.

A push lands in the registry under the mirror path of each upstream name; containerd, configured with
the hosts.toml files the module writes, pulls by the upstream name from loopback, and a miss is a "not
found" answered by the loopback registry (its log shows the request), for listed hosts and any other.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from devland.procs import free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def registry_log(registry) -> str:
    return registry.log_path.read_text(errors="replace")


def test_start_stop_lifecycle(registry_mod, tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    reg = registry_mod.start(tmp_path / "reg", address)
    assert registry_mod.answers(address)
    config = json.loads((tmp_path / "reg" / "config.yml").read_text())
    assert config["http"]["addr"] == address
    assert config["storage"]["filesystem"]["rootdirectory"] == str(reg.storage)
    assert "proxy" not in config  # no pull-through: a miss must not reach for an upstream
    # Starting again from the same workdir reuses the running registry.
    assert registry_mod.start(tmp_path / "reg", address).pid == reg.pid
    # Another workdir on the same address is refused with a clear message.
    with pytest.raises(registry_mod.RegistryError, match="already taken"):
        registry_mod.start(tmp_path / "other", address)

    assert registry_mod.stop(tmp_path / "reg") is True
    assert not registry_mod.answers(address)
    assert not Path(f"/proc/{reg.pid}").exists() or "Z" in Path(f"/proc/{reg.pid}/stat").read_text().split()[2]
    assert not (tmp_path / "reg" / "registry.pid").exists()
    assert registry_mod.stop(tmp_path / "reg") is False


def test_start_refuses_bad_input(registry_mod, tmp_path: Path) -> None:
    with pytest.raises(registry_mod.RegistryError, match="loopback only"):
        registry_mod.start(tmp_path, "0.0.0.0:5000")
    with pytest.raises(registry_mod.RegistryError, match="HOST:PORT"):
        registry_mod.start(tmp_path, "127.0.0.1")
    with pytest.raises(registry_mod.RegistryError, match="make setup"):
        registry_mod.start(tmp_path, f"127.0.0.1:{free_port()}", binary="no-such-docker-registry")


def test_cli_start_push_list_stop(registry_mod, test_images_tar: Path, tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    workdir = tmp_path / "reg"

    def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run([sys.executable, str(REPO / "hacks" / "registry.py"), *args],
                           capture_output=True, text=True, timeout=300)
        assert not check or r.returncode == 0, r.stderr
        return r

    assert "hosts.toml" in cli("--help").stdout
    try:
        # push --ensure-running starts the registry when nothing answers.
        out = cli("push", "--ensure-running", "--workdir", str(workdir), "--address", address,
                  str(test_images_tar)).stdout
        assert f"docker.io/library/busybox:1.35\t{address}/library/busybox:1.35" in out.splitlines()
        listed = cli("list", "--address", address).stdout
        assert f"{address}/pause:3.10\tsha256:" in listed
        assert cli("verify", "--address", address, "registry.k8s.io/pause:3.6").returncode == 0
        missing = cli("verify", "--address", address, "docker.io/library/busybox:nope", check=False)
        assert missing.returncode == 1 and "busybox:nope" in missing.stderr and "Traceback" not in missing.stderr
        bad = cli("push", "--address", address, str(tmp_path / "nope.tar"), check=False)
        assert bad.returncode == 1 and "docker-archive not found" in bad.stderr
    finally:
        cli("stop", "--workdir", str(workdir))
    assert not registry_mod.answers(address)


def test_push_lists_and_verifies(registry_mod, registry, test_images_tar: Path) -> None:
    pushed = registry_mod.push(test_images_tar, registry.address)
    assert {p.name for p in pushed} == {"docker.io/library/busybox:latest", "docker.io/library/busybox:1.35",
                                        "registry.k8s.io/pause:3.6", "registry.k8s.io/pause:3.10"}
    assert {p.destination for p in pushed} >= {f"{registry.address}/library/busybox:1.35",
                                               f"{registry.address}/pause:3.6"}
    held = registry_mod.contents(registry.address)
    assert {"library/busybox:latest", "library/busybox:1.35", "pause:3.6", "pause:3.10"} <= set(held)
    # Both tags of one image are one manifest.
    assert held["pause:3.6"] == held["pause:3.10"] and held["pause:3.6"].startswith("sha256:")
    digests = registry_mod.verify(registry.address, ["busybox:1.35", "registry.k8s.io/pause:3.6"])
    assert digests["busybox:1.35"] == held["library/busybox:1.35"]
    with pytest.raises(registry_mod.RegistryError, match="no manifest"):
        registry_mod.verify(registry.address, ["docker.io/library/busybox:absent"])


def test_push_renames_under_registry_and_tag(registry_mod, registry, test_images_tar: Path) -> None:
    pushed = registry_mod.push(test_images_tar, registry.address,
                               registry="europe-docker.pkg.dev/gardener-project/public/renamed", tag="t1")
    names = {p.name for p in pushed}
    assert "europe-docker.pkg.dev/gardener-project/public/renamed/busybox:t1" in names
    assert registry_mod.tags(registry.address, "gardener-project/public/renamed/pause") == ["t1"]


def test_push_rejects_bad_archives(registry_mod, registry, tmp_path: Path) -> None:
    with pytest.raises(registry_mod.RegistryError, match="not found"):
        registry_mod.push(tmp_path / "missing.tar", registry.address)
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar at all")
    with pytest.raises(registry_mod.RegistryError, match="not a docker-archive"):
        registry_mod.push(junk, registry.address)


def test_push_to_a_dead_registry_says_so(registry_mod, test_images_tar: Path) -> None:
    with pytest.raises(registry_mod.RegistryError, match="is a registry running"):
        registry_mod.push(test_images_tar, f"127.0.0.1:{free_port()}")


def test_hosts_toml_points_every_name_at_loopback(registry_mod, registry, certs_dir: Path) -> None:
    hosts = {p.name for p in certs_dir.iterdir()}
    assert {registry.address, "docker.io", "registry.k8s.io", "europe-docker.pkg.dev", "_default"} <= hosts
    for host in hosts:
        text = (certs_dir / host / "hosts.toml").read_text()
        servers = [line for line in text.splitlines() if line.startswith(("server", "[host"))]
        assert servers and all(f"http://{registry.address}" in line for line in servers), (host, text)


def test_containerd_pulls_by_upstream_name(registry_mod, registry, pulling_containerd, test_images_tar: Path) -> None:
    # A tag nothing else has: the pull can only be satisfied by the registry.
    tag = f"pull-{secrets.token_hex(4)}"
    prefix = "europe-docker.pkg.dev/gardener-project/public/gardener/extensions"
    registry_mod.push(test_images_tar, registry.address, registry=prefix, tag=tag)

    upstream = f"{prefix}/busybox:{tag}"
    r = pulling_containerd.crictl("pull", upstream)
    assert "Image is up to date" in r.stdout, r.stdout
    images = json.loads(pulling_containerd.crictl("images", "-o", "json").stdout)["images"]
    assert upstream in {t for img in images for t in img["repoTags"]}
    # containerd asked the loopback registry, naming the upstream namespace.
    assert f"/v2/gardener-project/public/gardener/extensions/busybox/manifests/{tag}?ns=europe-docker.pkg.dev" \
        in registry_log(registry)

    # The registry's own name works the same way.
    direct = f"{registry.address}/gardener-project/public/gardener/extensions/pause:{tag}"
    pulling_containerd.crictl("pull", direct)
    inspect = json.loads(pulling_containerd.crictl("inspecti", "-o", "json", direct).stdout)
    assert inspect["status"]["id"].startswith("sha256:")


@pytest.mark.parametrize("ref,namespace", [
    ("docker.io/library/no-such-image:1", "docker.io"),       # a listed upstream
    ("quay.io/nobody/no-such-image:1", "quay.io"),             # listed too
    ("example.com/team/no-such-image:1", "example.com"),       # any other name: certs.d/_default
])
def test_miss_fails_on_loopback(registry, pulling_containerd, ref: str, namespace: str) -> None:
    path = ref.split("/", 1)[1].rsplit(":", 1)[0]
    r = pulling_containerd.crictl("pull", ref, check=False, timeout=60)
    assert r.returncode != 0
    assert "not found" in r.stderr, r.stderr
    # No DNS lookup or dial to the upstream: the loopback registry answered the miss.
    assert "dial tcp" not in r.stderr and "lookup" not in r.stderr, r.stderr
    assert f"/v2/{path}/manifests/1?ns={namespace}" in registry_log(registry)


@pytest.mark.timeout(2700)  # a cold Dockerfile build in the fixture takes minutes
def test_image_vector_names_pull_on_a_node(registry_mod, registry, pulling_containerd,
                                           dockerfile_image_tars: list[Path]) -> None:
    # What `make push-images` does, then what a node's kubelet asks for: the image vector's names.
    pushed = [p for tar in dockerfile_image_tars for p in registry_mod.push(tar, registry.address)]
    vector = yaml.safe_load((REPO / "charts" / "images.yaml").read_text())["images"]
    refs = [f"{img['repository']}:{img['tag']}" for img in vector]
    assert set(refs) <= {p.name for p in pushed}, (refs, pushed)
    digests = registry_mod.verify(registry.address, refs)
    for ref in refs:
        pulling_containerd.crictl("pull", ref, timeout=300)
        info = json.loads(pulling_containerd.crictl("inspecti", "-o", "json", ref).stdout)
        assert ref in info["status"]["repoTags"]
        assert any(d.endswith(digests[ref]) for d in info["status"]["repoDigests"]), (info["status"], digests[ref])


def test_registry_and_containerd_run_in_the_private_network(registry, pulling_containerd,
                                                           loopback_only_network) -> None:
    # The conftest's loopback-only namespace: a pull cannot leave the machine even if the mirror setup broke.
    own = os.readlink("/proc/thread-self/ns/net")
    assert own == f"net:[{os.stat(loopback_only_network.path).st_ino}]"
    assert loopback_only_network.links() == ["lo"]
    assert os.readlink(f"/proc/{registry.pid}/ns/net") == own
    assert os.readlink(f"/proc/{pulling_containerd.proc.pid}/ns/net") == own


def test_registry_files_stay_in_workdir(registry) -> None:
    assert (registry.workdir / "registry.pid").is_file()
    assert os.path.commonpath([registry.storage, registry.workdir]) == str(registry.workdir)
