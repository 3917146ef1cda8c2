"""The CRI v1 messages of ``container-runtime-interface-api``, loadable without grpcio.

The package's ``__init__`` star-imports its gRPC stubs, which import grpcio (~20 MB of
resident memory). cri-resmgr needs only the messages, so before anything imports
``cri_api`` this registers the real package with its initialisation deferred: submodules
(``cri_api.v1.api_pb2``) import as usual, and the package's own ``__init__`` runs on the
first attribute lookup on ``cri_api`` itself (``from cri_api import RuntimeServiceStub``),
so code that wants the stubs gets exactly what it always got.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from types import ModuleType
from typing import Any

_lock = threading.RLock()


def _defer_package_init() -> None:
    with _lock:
        if "cri_api" in sys.modules:
            return  # already imported (stubs and all) or already deferred
        spec = importlib.util.find_spec("cri_api")
        if spec is None or spec.loader is None:
            raise ImportError("container-runtime-interface-api is not installed")
        package = importlib.util.module_from_spec(spec)
        state = {"done": False}

        def __getattr__(name: str) -> Any:
            if name.startswith("__") or state["done"]:
                raise AttributeError(f"module 'cri_api' has no attribute {name!r}")
            with _lock:
                if not state["done"]:
                    state["done"] = True
                    del package.__dict__["__getattr__"]
                    spec.loader.exec_module(package)  # type: ignore[union-attr]
            return getattr(package, name)

        package.__getattr__ = __getattr__  # type: ignore[attr-defined]
        sys.modules["cri_api"] = package


_defer_package_init()
api_pb2: ModuleType = importlib.import_module("cri_api.v1.api_pb2")

__all__ = ["api_pb2"]
