"""An in-memory stand-in for the few Kubernetes API calls the reconciler and the Actuator make.

Only for pure-logic unit tests: it keeps objects as dicts, applies JSON merge patches (RFC 7386,
``None`` deletes), keeps ``status`` apart like a status subresource, and answers 404/409 as
ApiException like the real API server. The integration tests under test/integration/extension
run the same code against a real kube-apiserver.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from kubernetes.client.exceptions import ApiException

Key = tuple[str, str, str]  # (plural, namespace, name); namespace "" for cluster-scoped objects


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _missing(what: str) -> ApiException:
    return ApiException(status=404, reason=f"{what} not found")


@dataclass
class FakeStore:
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, Key]] = field(default_factory=list)  # (verb, key) of every write, in order

    def get(self, key: Key) -> dict[str, Any]:
        if key not in self.objects:
            raise _missing("/".join(key))
        return copy.deepcopy(self.objects[key])

    def put(self, key: Key, obj: dict[str, Any]) -> None:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("name", key[2])
        if key[1]:
            meta.setdefault("namespace", key[1])
        meta["generation"] = meta.get("generation", 0) + 1
        self.objects[key] = obj


class FakeCustomObjects:
    def __init__(self, store: FakeStore) -> None:
        self.store = store

    def get_namespaced_custom_object(self, group: str, version: str, ns: str, plural: str, name: str) -> dict:
        return self.store.get((plural, ns, name))

    def get_cluster_custom_object(self, group: str, version: str, plural: str, name: str) -> dict:
        return self.store.get((plural, "", name))

    def list_namespaced_custom_object(self, group: str, version: str, ns: str, plural: str) -> dict:
        return {"items": [copy.deepcopy(o) for (p, n, _), o in sorted(self.store.objects.items())
                          if p == plural and n == ns]}

    def create_namespaced_custom_object(self, group: str, version: str, ns: str, plural: str, body: dict) -> dict:
        key = (plural, ns, body["metadata"]["name"])
        if key in self.store.objects:
            raise ApiException(status=409, reason="AlreadyExists")
        self.store.calls.append(("create", key))
        self.store.put(key, body)
        return self.store.get(key)

    def patch_namespaced_custom_object(self, group: str, version: str, ns: str, plural: str, name: str,
                                       body: dict) -> dict:
        key = (plural, ns, name)
        current = self.store.get(key)
        wanted_rv = (body.get("metadata") or {}).get("resourceVersion")
        if wanted_rv is not None and wanted_rv != (current.get("metadata") or {}).get("resourceVersion"):
            raise ApiException(status=409, reason="Conflict")
        self.store.calls.append(("patch", key))
        body = copy.deepcopy(body)
        (body.get("metadata") or {}).pop("resourceVersion", None)
        status = current.pop("status", None)
        patched = merge_patch(current, {k: v for k, v in body.items() if k != "status"})
        if patched.get("spec") != current.get("spec"):  # as the API server: spec changes bump generation
            patched["metadata"]["generation"] = current["metadata"].get("generation", 0) + 1
        if status is not None:
            patched["status"] = status
        self.store.objects[key] = patched
        return self.store.get(key)

    def patch_namespaced_custom_object_status(self, group: str, version: str, ns: str, plural: str, name: str,
                                              body: dict) -> dict:
        key = (plural, ns, name)
        current = self.store.get(key)
        self.store.calls.append(("patch-status", key))
        current["status"] = merge_patch(current.get("status"), body.get("status") or {})
        self.store.objects[key] = current
        return self.store.get(key)

    def delete_namespaced_custom_object(self, group: str, version: str, ns: str, plural: str, name: str) -> None:
        key = (plural, ns, name)
        self.store.get(key)
        self.store.calls.append(("delete", key))
        del self.store.objects[key]


class FakeCore:
    def __init__(self, store: FakeStore) -> None:
        self.store = store
        self.config_maps: dict[tuple[str, str], dict[str, str]] = {}
        self.config_map_reads: list[tuple[str, str]] = []  # (namespace, name) of every read, for counting

    def read_namespaced_config_map(self, name: str, ns: str) -> SimpleNamespace:
        self.config_map_reads.append((ns, name))
        if (ns, name) not in self.config_maps:
            raise _missing(f"configmap {ns}/{name}")
        return SimpleNamespace(data=dict(self.config_maps[(ns, name)]))

    def create_namespaced_secret(self, ns: str, body: Any) -> None:
        key = ("secrets", ns, body.metadata.name)
        if key in self.store.objects:
            raise ApiException(status=409, reason="AlreadyExists")
        self.store.calls.append(("create", key))
        self.store.put(key, {"metadata": {"name": body.metadata.name, "labels": dict(body.metadata.labels or {})},
                             "data": dict(body.data or {})})

    def patch_namespaced_secret(self, name: str, ns: str, body: dict) -> None:
        key = ("secrets", ns, name)
        self.store.calls.append(("patch", key))
        self.store.objects[key] = merge_patch(self.store.get(key), body)

    def delete_namespaced_secret(self, name: str, ns: str) -> None:
        key = ("secrets", ns, name)
        self.store.get(key)
        self.store.calls.append(("delete", key))
        del self.store.objects[key]

    def list_namespaced_secret(self, ns: str, label_selector: str = "") -> SimpleNamespace:
        items = [SimpleNamespace(metadata=SimpleNamespace(name=name))
                 for (plural, n, name), obj in sorted(self.store.objects.items())
                 if plural == "secrets" and n == ns
                 and (not label_selector or label_selector in (obj["metadata"].get("labels") or {}))]
        return SimpleNamespace(items=items)


class FakeApis:
    """What ``extension.gardener.kube.Apis`` offers, in memory."""

    def __init__(self) -> None:
        self.store = FakeStore()
        self.custom = FakeCustomObjects(self.store)
        self.core = FakeCore(self.store)

    def object(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self.store.objects.get((plural, namespace, name))
        return copy.deepcopy(obj) if obj is not None else None
