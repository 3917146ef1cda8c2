"""Image vector loading, overwrites and version constraints."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extension.errors import ConfigurationError
from extension.gardener import imagevector
from extension.gardener.versions import ConstraintError, matches, parse_version

REPO_IMAGES = "charts/images.yaml"


@pytest.mark.parametrize("constraint,version,expected", [
    (">= 1.20", "1.31.1", True), (">= 1.20", "1.19.9", False), ("< 1.25", "1.24.99", True),
    ("< 1.25", "1.25.0", False), (">= 1.20, < 1.25", "1.22.0", True), (">= 1.20, < 1.25", "1.26.0", False),
    ("1.31.x", "1.31.4", True), ("1.31.x", "1.32.0", False), ("~1.30", "1.30.9", True), ("~1.30", "1.31.0", False),
    ("^1.2.3", "1.9.0", True), ("^1.2.3", "2.0.0", False), ("< 1.20 || >= 1.30", "1.31.0", True),
    ("< 1.20 || >= 1.30", "1.25.0", False), ("= 1.31.1", "v1.31.1", True), ("!= 1.31.1", "1.31.1", False),
    ("> 1.30", "1.30.5", False), ("> 1.30", "1.31.0", True), ("<= 1.30", "1.30.5", True),
])
def test_constraints(constraint, version, expected):
    assert matches(constraint, version) is expected


@pytest.mark.parametrize("bad", ["", ">= banana", ">=", "1.2.3 <> 4"])
def test_bad_constraints(bad):
    with pytest.raises(ConstraintError):
        matches(bad, "1.2.3")


@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 50))
def test_version_roundtrip_and_ordering(a, b, c):
    assert parse_version(f"{a}.{b}.{c}") == (a, b, c)
    assert matches(f">= {a}.{b}.{c}", f"{a}.{b}.{c}")
    assert not matches(f"< {a}.{b}.{c}", f"{a}.{b}.{c}")


def test_repository_image_vector_has_both_images():
    images = imagevector.load(REPO_IMAGES, overwrite_file="")
    names = {i.name for i in images}
    assert {"gardener-extension-cri-resmgr-installation", "gardener-extension-cri-resmgr-agent"} <= names


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_overwrite_and_target_version(tmp_path):
    base = write(tmp_path, "images.yaml", """
images:
- name: inst
  repository: reg/inst
  tag: v1
- name: inst
  repository: reg/inst-old
  tag: v0
  targetVersion: "< 1.28"
""")
    over = write(tmp_path, "over.yaml", """
images:
- name: inst
  repository: mirror/inst
  tag: v1-patched
- name: agent
  repository: mirror/agent
  tag: sha256:abcdef
""")
    images = imagevector.load(base, str(over))
    assert imagevector.find_image(images, "inst", target_version="1.31.0").image() == "mirror/inst:v1-patched"
    assert imagevector.find_image(images, "inst", target_version="1.27.3").image() == "reg/inst-old:v0"
    assert imagevector.find_image(images, "agent").image() == "mirror/agent@sha256:abcdef"
    with pytest.raises(ConfigurationError, match="no image"):
        imagevector.find_image(images, "missing")


def test_overwrite_from_environment(tmp_path, monkeypatch):
    base = write(tmp_path, "images.yaml", "images:\n- name: a\n  repository: r/a\n  tag: '1'\n")
    over = write(tmp_path, "over.yaml", "images:\n- name: a\n  ref: other/a:2\n")
    monkeypatch.setenv("IMAGEVECTOR_OVERWRITE", str(over))
    assert imagevector.find_image(imagevector.load(base), "a").image() == "other/a:2"


@pytest.mark.parametrize("text,problem", [
    ("images: [", "invalid YAML"),
    ("images: {}", "list 'images'"),
    ("images:\n- repository: x\n", "name"),
    ("images:\n- name: a\n  architectures: amd64\n", "architectures"),
    ("images:\n- name: a\n  version: 1\n", "version"),
    ("images:\n- name: a\n  targetVersion: '>= banana'\n", "targetVersion"),
])
def test_bad_image_vectors(tmp_path, text, problem):
    with pytest.raises(ConfigurationError) as e:
        imagevector.load(write(tmp_path, "images.yaml", text), overwrite_file="")
    assert problem in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigurationError, match="cannot read"):
        imagevector.load(tmp_path / "nope.yaml", overwrite_file="")


# Gardener's whole ImageSource (v1.149.3 pkg/utils/imagevector/types.go) and the component-descriptor keys
# its YAML decoding ignores, as an operator's imageVectorOverwrite carries them.
GARDENER_VECTOR = """\
caBundle:
  inline: |
    -----BEGIN CERTIFICATE-----
images:
- name: a
  sourceRepository: github.com/example/a
  resourceId:
    name: a-image
  labels:
  - name: gardener.cloud/cve-categorisation
    value: {network_exposure: private}
  repository: r/a
  tag: "1.0"
  version: v1.0
  targetVersion: ">= 1.30"
  runtimeVersion: ">= 1.30"
  architectures: [amd64, arm64]
"""


def test_gardeners_whole_schema_is_accepted_without_warnings(tmp_path, caplog):
    caplog.set_level("WARNING", logger="extension.imagevector")
    [img] = imagevector.load(write(tmp_path, "images.yaml", GARDENER_VECTOR), overwrite_file="")
    assert (img.image(), img.version, img.architectures) == ("r/a:1.0", "v1.0", ("amd64", "arm64"))
    assert caplog.records == []


def test_unknown_keys_warn_once_and_are_ignored(tmp_path, caplog):
    caplog.set_level("WARNING", logger="extension.imagevector")
    path = write(tmp_path, "images.yaml", "extra: 1\nimages:\n- name: a\n  repository: r/a\n  tagg: x\n")
    for _ in range(2):
        [img] = imagevector.load(path, overwrite_file="")
        assert img.image() == "r/a"
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2
    assert "images[0]: ignoring unknown key 'tagg'" in warnings[1] and "'extra'" in warnings[0]


def test_architectures_select_and_key_the_overwrite(tmp_path):
    base = write(tmp_path, "images.yaml", "images:\n- name: a\n  repository: r/a\n  tag: '1'\n  version: v1\n")
    over = write(tmp_path, "over.yaml", """\
images:
- name: a
  tag: '2'
- name: a
  repository: r/a-arm
  tag: '3'
  architectures: [arm64]
""")
    vector = imagevector.load(base, overwrite_file=str(over))
    # The arm64-only entry is a new entry (its key differs), the plain one overwrites the base's tag.
    assert [(i.image(), i.architectures, i.version) for i in vector] == [
        ("r/a:2", (), "v1"), ("r/a-arm:3", ("arm64",), "")]
    # Gardener's default machine architecture is amd64; an exact architecture beats a multi-arch entry.
    assert imagevector.find_image(vector, "a").image() == "r/a:2"
    assert imagevector.find_image(vector, "a", architecture="arm64").image() == "r/a-arm:3"
    with pytest.raises(ConfigurationError, match="no image"):
        imagevector.find_image(vector[1:], "a")
