"""What the shipped images are called, shared by both builders (hacks/build-images.py without an engine,
hacks/build-dockerfile-images.py with buildah) so their tars are interchangeable for `make push-images`."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

DEFAULT_REGISTRY = "europe-docker.pkg.dev/gardener-project/public/gardener/extensions"
DEFAULT_TAG = "v0.1.0"
# archive (<output-dir>/<key>.tar) -> the repositories its one image is tagged as
ARCHIVES = {
    "extension": ["gardener-extension-cri-resmgr"],
    "installation": ["cri-resmgr-installer", "cri-resmgr-agent"],
}


def image_names(registry: str, tag: str) -> dict[str, list[str]]:
    """archive key -> full image names under ``registry`` with ``tag``."""
    return {key: [f"{registry.rstrip('/')}/{repo}:{tag}" for repo in repos] for key, repos in ARCHIVES.items()}


def add_name_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--registry", default=DEFAULT_REGISTRY,
                        help="image repository prefix (default: %(default)s)")
    parser.add_argument("--tag", default=DEFAULT_TAG, help="image tag (default: %(default)s)")


def run_builder(prog: str, parser: argparse.ArgumentParser,
                build: Callable[[argparse.Namespace], dict[str, list[str]]]) -> int:
    """Parse the command line (with --registry/--tag), build, and report each archive's size and names."""
    add_name_options(parser)
    args = parser.parse_args()
    started = time.monotonic()
    for path, names in build(args).items():
        print(f"{prog}: wrote {path} ({os.path.getsize(path) >> 20} MiB): {', '.join(names)}", flush=True)
    print(f"{prog}: done in {time.monotonic() - started:.1f}s", flush=True)
    return 0
