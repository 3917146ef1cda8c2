"""Fixtures for the extension operator tests: one operator process per module, namespaces per test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from extension_operator_process import Operator, SeedClient  # noqa: E402

from devland.procs import free_port  # noqa: E402


@pytest.fixture(scope="module")
def seed(seed_api) -> SeedClient:
    return SeedClient(seed_api)


@pytest.fixture(scope="module")
def base_configs_namespace(seed_api, seed: SeedClient) -> str:
    """Where the operator's base configs ConfigMap lives (the extension's own namespace)."""
    ns = seed.new_namespace("ext-garden")
    seed.create_configs_configmap(ns, {
        "fallback": "policy:\n  Active: none\n",
        "default": "policy:\n  Active: topology-aware\n  ReservedResources:\n    CPU: 750m\n",
    })
    return ns


@pytest.fixture(scope="module")
def operator(seed_api, tools, seed: SeedClient, base_configs_namespace: str, tmp_path_factory, request):
    """An operator watching the namespaces of this module (prefix derived from the module name)."""
    prefix = "t" + request.module.__name__.rsplit(".", 1)[-1].replace("_", "")[-10:]
    liveness_port, metrics_port = free_port(), free_port()
    op = Operator(seed_api, tools, tmp_path_factory.mktemp("operator"), f"{prefix}-*",
                  configmap_namespace=base_configs_namespace,
                  extra_args=["--heartbeat-namespace", base_configs_namespace,
                              "--liveness-endpoint", f"http://127.0.0.1:{liveness_port}/healthz",
                              "--metrics-bind-address", f"127.0.0.1:{metrics_port}"])
    op.liveness_url = f"http://127.0.0.1:{liveness_port}/healthz"  # type: ignore[attr-defined]
    op.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"  # type: ignore[attr-defined]
    op.prefix = prefix  # type: ignore[attr-defined]
    op.start()
    yield op
    op.stop()
