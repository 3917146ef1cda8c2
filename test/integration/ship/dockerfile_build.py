"""Running hacks/build-dockerfile-images.py from the ship tests, on a frozen copy of the build context."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "hacks" / "build-dockerfile-images.py"


def stage_context(dest: Path) -> Path:
    """The script's own staging (the Dockerfile and what it copies) into ``dest``; returns ``dest``."""
    spec = importlib.util.spec_from_file_location("build_dockerfile_images", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(SCRIPT.parent))  # the script imports hacks/shipped_images.py by name
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    module.stage_context(REPO / "Dockerfile", REPO, dest)
    return dest


def build_dockerfile_images(context: Path, out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["python3", str(SCRIPT), "--output-dir", str(out), "--context", str(context),
                           "--dockerfile", str(context / "Dockerfile"), *args],
                          capture_output=True, text=True, timeout=2400)
