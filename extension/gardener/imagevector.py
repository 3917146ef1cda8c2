"""Gardener's image vector: charts/images.yaml plus an optional overwrite file.

The schema is Gardener's ``ImageSource`` (gardener v1.149.3 pkg/utils/imagevector/types.go): name,
runtimeVersion, targetVersion, architectures, ref, repository, tag, version; the file may carry a global
``caBundle``. Gardener decodes it with sigs.k8s.io/yaml, which ignores keys it does not know
(pkg/utils/imagevector/imagevector.go Read), so operators' overwrites carry component-descriptor keys such
as ``resourceId``, ``labels`` and ``sourceRepository``: those are accepted silently, any other unknown key
is accepted with a warning (once per file and key), never refused.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from extension.errors import ConfigurationError
from extension.gardener.versions import ConstraintError, check_constraint, matches

log = logging.getLogger("extension.imagevector")

# Gardener's ImageSource fields.
_FIELDS = ("name", "runtimeVersion", "targetVersion", "architectures", "ref", "repository", "tag", "version")
_STRING_FIELDS = ("repository", "tag", "ref", "targetVersion", "runtimeVersion", "version")
# Keys of images.yaml that Gardener ignores (component descriptors read them): no warning.
_IGNORED = ("sourceRepository", "resourceId", "labels")
# Top-level keys besides images (pkg/utils/imagevector/imagevector.go Read); the CA bundle is for pulls by
# gardenlet's components, the images here are pulled by the shoot's kubelets.
_TOP_LEVEL = ("images", "caBundle")
# gardener pkg/utils/imagevector checkArchitectureConstraint: an entry without architectures is multi-arch,
# a machine without one is amd64 (v1beta1constants.ArchitectureAMD64/ARM64).
DEFAULT_ARCHITECTURES = ("amd64", "arm64")
DEFAULT_ARCHITECTURE = "amd64"
_warned: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class ImageSource:
    name: str
    repository: str = ""
    tag: str = ""
    ref: str = ""
    source_repository: str = ""
    target_version: str = ""
    runtime_version: str = ""
    architectures: tuple[str, ...] = ()  # empty: every architecture
    version: str = ""  # human-readable version (Gardener's ``version``)

    def key(self) -> tuple[str, str, str, tuple[str, ...]]:
        """What an overwrite entry must match to replace this one (Gardener's computeKey)."""
        return self.name, self.target_version, self.runtime_version, self.architectures

    def image(self) -> str:
        """The pullable reference: ref wins, else repository with tag or digest."""
        if self.ref:
            return self.ref
        if not self.tag:
            return self.repository
        sep = "@" if self.tag.startswith("sha256:") else ":"
        return f"{self.repository}{sep}{self.tag}"


def _warn_unknown(where: str, keys: list[str]) -> None:
    for key in keys:
        if (where, key) not in _warned:
            _warned.add((where, key))
            log.warning(f"{where}: ignoring unknown key {key!r} (not in Gardener's image vector schema)")


def _parse(doc: Any, origin: str) -> list[ImageSource]:
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), list):
        raise ConfigurationError(origin, "an image vector is a mapping with a list 'images'")
    _warn_unknown(origin, sorted(set(doc) - set(_TOP_LEVEL)))
    images = []
    for i, entry in enumerate(doc["images"]):
        where = f"{origin}: images[{i}]"
        if not isinstance(entry, dict):
            raise ConfigurationError(where, "must be a mapping")
        _warn_unknown(where, sorted(set(entry) - set(_FIELDS) - set(_IGNORED)))
        if not isinstance(entry.get("name"), str) or not entry["name"]:
            raise ConfigurationError(f"{where}.name", "is required")
        for key in _STRING_FIELDS:
            if key in entry and not isinstance(entry[key], str):
                raise ConfigurationError(f"{where}.{key}", "must be a string")
        archs = entry.get("architectures") or []
        if not isinstance(archs, list) or not all(isinstance(a, str) and a for a in archs):
            raise ConfigurationError(f"{where}.architectures", "must be a list of architecture names")
        for key in ("targetVersion", "runtimeVersion"):
            if entry.get(key):
                try:
                    check_constraint(entry[key])
                except ConstraintError as err:
                    raise ConfigurationError(f"{where}.{key}", str(err)) from None
        images.append(ImageSource(
            name=entry["name"], repository=entry.get("repository", ""), tag=entry.get("tag", ""),
            ref=entry.get("ref", ""), source_repository=str(entry.get("sourceRepository") or ""),
            target_version=entry.get("targetVersion", ""), runtime_version=entry.get("runtimeVersion", ""),
            architectures=tuple(archs), version=entry.get("version", "")))
    return images


def load_file(path: str | Path) -> list[ImageSource]:
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ConfigurationError(str(path), f"cannot read image vector: {err.strerror}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigurationError(str(path), f"invalid YAML: {err}") from None
    return _parse(doc, str(path))


def merge(base: list[ImageSource], overwrite: list[ImageSource]) -> list[ImageSource]:
    """An overwrite entry replaces the base entry with the same name, version constraints and architectures."""
    merged = list(base)
    for over in overwrite:
        for i, img in enumerate(merged):
            if img.key() == over.key():
                merged[i] = ImageSource(
                    name=img.name, repository=over.repository or img.repository,
                    tag=over.tag or ("" if over.ref else img.tag),
                    ref=over.ref, source_repository=over.source_repository or img.source_repository,
                    target_version=img.target_version, runtime_version=img.runtime_version,
                    architectures=img.architectures, version=over.version or img.version)
                break
        else:
            merged.append(over)
    return merged


def load(images_file: str | Path, overwrite_file: str | None = None) -> list[ImageSource]:
    """Read the image vector, applying $IMAGEVECTOR_OVERWRITE (or ``overwrite_file``) when set."""
    images = load_file(images_file)
    overwrite_file = overwrite_file if overwrite_file is not None else os.environ.get("IMAGEVECTOR_OVERWRITE")
    if overwrite_file:
        images = merge(images, load_file(overwrite_file))
    return images


def _architecture_score(img: ImageSource, architecture: str) -> int:
    """Gardener's checkArchitectureConstraint: 2 for an entry of exactly this architecture, 1 for a multi-arch
    entry that includes it, 0 for no match."""
    archs = img.architectures or DEFAULT_ARCHITECTURES
    if architecture not in archs:
        return 0
    return 2 if len(archs) == 1 else 1


def find_image(images: list[ImageSource], name: str, *, target_version: str | None = None,
               runtime_version: str | None = None, architecture: str = DEFAULT_ARCHITECTURE) -> ImageSource:
    """Pick the image for ``name``; an entry whose version constraints match beats an unconstrained one,
    and one of exactly ``architecture`` beats a multi-arch one."""
    best: ImageSource | None = None
    best_score = -1
    for img in images:
        if img.name != name:
            continue
        arch_score = _architecture_score(img, architecture)
        if not arch_score:
            continue
        score = arch_score
        ok = True
        for constraint, version in ((img.target_version, target_version),
                                    (img.runtime_version, runtime_version)):
            if not constraint:
                continue
            if version is None:
                ok = False
                break
            try:
                if not matches(constraint, version):
                    ok = False
                    break
            except ConstraintError as err:
                raise ConfigurationError(f"image {name}", f"cannot match version {version!r}: {err}") from None
            score += 1
        if ok and score > best_score:
            best, best_score = img, score
    if best is None:
        raise ConfigurationError(f"image {name}", "no image in the image vector matches "
                                                  f"(target version {target_version or 'unknown'})")
    return best
