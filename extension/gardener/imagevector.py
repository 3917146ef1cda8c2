"""Gardener's image vector: charts/images.yaml plus an optional overwrite file."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from extension.errors import ConfigurationError
from extension.gardener.versions import ConstraintError, check_constraint, matches

_FIELDS = ("name", "sourceRepository", "repository", "tag", "ref", "targetVersion", "runtimeVersion", "labels")


@dataclass(frozen=True)
class ImageSource:
    name: str
    repository: str = ""
    tag: str = ""
    ref: str = ""
    source_repository: str = ""
    target_version: str = ""
    runtime_version: str = ""

    def image(self) -> str:
        """The pullable reference: ref wins, else repository with tag or digest."""
        if self.ref:
            return self.ref
        if not self.tag:
            return self.repository
        sep = "@" if self.tag.startswith("sha256:") else ":"
        return f"{self.repository}{sep}{self.tag}"


def _parse(doc: Any, origin: str) -> list[ImageSource]:
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), list):
        raise ConfigurationError(origin, "an image vector is a mapping with a list 'images'")
    images = []
    for i, entry in enumerate(doc["images"]):
        where = f"{origin}: images[{i}]"
        if not isinstance(entry, dict):
            raise ConfigurationError(where, "must be a mapping")
        unknown = sorted(set(entry) - set(_FIELDS))
        if unknown:
            raise ConfigurationError(f"{where}.{unknown[0]}", "unknown field")
        if not isinstance(entry.get("name"), str) or not entry["name"]:
            raise ConfigurationError(f"{where}.name", "is required")
        for key in ("repository", "tag", "ref", "sourceRepository", "targetVersion", "runtimeVersion"):
            if key in entry and not isinstance(entry[key], str):
                raise ConfigurationError(f"{where}.{key}", "must be a string")
        for key in ("targetVersion", "runtimeVersion"):
            if entry.get(key):
                try:
                    check_constraint(entry[key])
                except ConstraintError as err:
                    raise ConfigurationError(f"{where}.{key}", str(err)) from None
        images.append(ImageSource(
            name=entry["name"], repository=entry.get("repository", ""), tag=entry.get("tag", ""),
            ref=entry.get("ref", ""), source_repository=entry.get("sourceRepository", ""),
            target_version=entry.get("targetVersion", ""), runtime_version=entry.get("runtimeVersion", "")))
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
    """An overwrite entry replaces the base entry with the same name and version constraints."""
    merged = list(base)
    for over in overwrite:
        for i, img in enumerate(merged):
            if (img.name, img.target_version, img.runtime_version) == (
                    over.name, over.target_version, over.runtime_version):
                merged[i] = ImageSource(
                    name=img.name, repository=over.repository or img.repository,
                    tag=over.tag or ("" if over.ref else img.tag),
                    ref=over.ref, source_repository=over.source_repository or img.source_repository,
                    target_version=img.target_version, runtime_version=img.runtime_version)
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


def find_image(images: list[ImageSource], name: str, *, target_version: str | None = None,
               runtime_version: str | None = None) -> ImageSource:
    """Pick the image for ``name``; an entry whose version constraints match beats an unconstrained one."""
    best: ImageSource | None = None
    best_score = -1
    for img in images:
        if img.name != name:
            continue
        score = 0
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
