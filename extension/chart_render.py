"""Rendering charts with the helm CLI (`helm template`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from extension.errors import ConfigurationError

# A Secret holds at most 1 MiB; leave room for metadata.
MAX_MANIFEST_BYTES = 1024 * 1024 - 16 * 1024


class RenderError(RuntimeError):
    """helm failed; the message carries helm's own error output."""


def find_helm(explicit: str | None = None) -> str:
    """helm from --helm, $HELM, PATH, or the dev cache; fail with a hint otherwise."""
    if explicit:
        if os.access(explicit, os.X_OK):
            return explicit
        raise RenderError(f"helm not found at {explicit} (--helm)")
    candidates = [explicit, os.environ.get("HELM"), shutil.which("helm"),
                  str(Path(os.environ.get("CRI_RESMGR_DEV_CACHE", Path.home() / ".cache/cri-resmgr-dev"))
                      / "bin/helm")]
    for cand in candidates:
        if cand and os.access(cand, os.X_OK):
            return cand
    raise RenderError("helm not found: pass --helm, set $HELM, put helm on PATH or run `make setup`")


def _helm_env() -> dict[str, str]:
    # helm wants writable config/cache dirs; the pod's root filesystem is read-only.
    base = Path(tempfile.gettempdir()) / "gardener-extension-cri-resmgr-helm"
    env = dict(os.environ)
    for var, sub in (("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config"), ("HELM_DATA_HOME", "data")):
        env.setdefault(var, str(base / sub))
    return env


def helm_template(helm: str, chart_dir: str | Path, release: str, namespace: str, values: dict[str, Any],
                  *, kube_version: str | None = None, timeout: float = 60) -> str:
    """Run `helm template` with ``values`` on stdin and return the manifest text."""
    cmd = [helm, "template", release, str(chart_dir), "--namespace", namespace, "--values", "-"]
    if kube_version:
        cmd += ["--kube-version", kube_version]
    try:
        proc = subprocess.run(cmd, input=json.dumps(values), capture_output=True, text=True,
                              timeout=timeout, env=_helm_env(), check=False)
    except subprocess.TimeoutExpired:
        raise RenderError(f"helm template {chart_dir} timed out after {timeout}s") from None
    except OSError as err:
        raise RenderError(f"cannot run helm ({helm}): {err}") from None
    if proc.returncode != 0:
        raise RenderError(f"helm template {chart_dir} failed: {proc.stderr.strip()}")
    return proc.stdout


def split_manifests(text: str) -> list[dict[str, Any]]:
    """Parse rendered YAML into objects, dropping empty documents."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as err:
        raise RenderError(f"helm rendered invalid YAML: {err}") from None
    for doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
            raise RenderError(f"helm rendered a document that is not a Kubernetes object: {str(doc)[:200]}")
    return docs


def check_size(text: str) -> None:
    size = len(text.encode())
    if size > MAX_MANIFEST_BYTES:
        raise ConfigurationError("configs", f"the rendered manifests are {size} bytes; they must fit into "
                                            f"one Secret ({MAX_MANIFEST_BYTES} bytes)")
