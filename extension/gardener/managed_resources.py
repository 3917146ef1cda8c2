"""ManagedResources and their immutable secrets, the way Gardener's helpers write them.

Secret names carry a content hash (managedresource-<name>-<hash>), secrets are
immutable and labelled garbage-collectable, and the ManagedResource carries
reference annotations so gardener-resource-manager's GC keeps the live one.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from extension import constants as c
from extension.gardener.kube import Apis, is_conflict, is_not_found

log = logging.getLogger("extension.managed_resources")


def data_checksum(data: dict[str, bytes]) -> str:
    """sha256 over the sorted keys and values, as Gardener's ComputeSecretChecksum does."""
    h = hashlib.sha256()
    for key in sorted(data):
        h.update(key.encode())
        h.update(data[key])
    return h.hexdigest()


def secret_name_for(mr_name: str, data: dict[str, bytes]) -> str:
    return f"{c.SECRET_PREFIX}{mr_name}-{data_checksum(data)[:8]}"


def reference_annotation_key(secret_name: str) -> str:
    return f"{c.REFERENCE_ANNOTATION_PREFIX}secret-{hashlib.sha256(secret_name.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class ManagedResourceSpec:
    name: str
    namespace: str
    data: dict[str, bytes]
    resource_class: str | None = None
    labels: dict[str, str] | None = None
    inject_labels: dict[str, str] | None = None
    keep_objects: bool = False
    annotations: dict[str, str] | None = None  # ours, beside the secret reference annotations


def for_shoot(namespace: str, name: str, data: dict[str, bytes],
              annotations: dict[str, str] | None = None) -> ManagedResourceSpec:
    """Class unset (the shoot's resource manager), our origin, no-cleanup injected."""
    return ManagedResourceSpec(name=name, namespace=namespace, data=data, resource_class=None,
                               labels={c.ORIGIN_LABEL: c.ORIGIN_VALUE},
                               inject_labels={c.SHOOT_NO_CLEANUP_LABEL: "true"}, annotations=annotations)


def for_seed(namespace: str, name: str, data: dict[str, bytes]) -> ManagedResourceSpec:
    return ManagedResourceSpec(name=name, namespace=namespace, data=data,
                               resource_class=c.SEED_RESOURCE_CLASS,
                               labels={c.ORIGIN_LABEL: c.ORIGIN_VALUE})


def get(apis: Apis, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return apis.custom.get_namespaced_custom_object(
            c.RESOURCES_GROUP, c.RESOURCES_VERSION, namespace, c.MANAGED_RESOURCES_PLURAL, name)
    except Exception as err:
        if is_not_found(err):
            return None
        raise


def _ensure_secret(apis: Apis, spec: ManagedResourceSpec, secret_name: str) -> None:
    body = client.V1Secret(
        metadata=client.V1ObjectMeta(
            name=secret_name, namespace=spec.namespace,
            labels={c.GARBAGE_COLLECTABLE_LABEL: "true", **(spec.labels or {})}),
        type="Opaque", immutable=True,
        data={k: _b64(v) for k, v in spec.data.items()})
    try:
        apis.core.create_namespaced_secret(spec.namespace, body)
        log.info("created secret", extra={"namespace": spec.namespace, "secret": secret_name})
    except Exception as err:
        if not is_conflict(err):
            raise
        # Same name means same content: the hash is in the name.


def _b64(value: bytes) -> str:
    import base64

    return base64.b64encode(value).decode()


def deploy(apis: Apis, spec: ManagedResourceSpec) -> str:
    """Create or update the ManagedResource to point at a secret with ``spec.data``; returns the secret name.

    Older secrets the ManagedResource referenced are labelled garbage-collectable.
    """
    secret_name = secret_name_for(spec.name, spec.data)
    _ensure_secret(apis, spec, secret_name)
    current = get(apis, spec.namespace, spec.name)
    mr_spec: dict[str, Any] = {
        "secretRefs": [{"name": secret_name}],
        "keepObjects": spec.keep_objects,
    }
    if spec.resource_class:
        mr_spec["class"] = spec.resource_class
    if spec.inject_labels:
        mr_spec["injectLabels"] = dict(spec.inject_labels)
    annotations = {**(spec.annotations or {}), reference_annotation_key(secret_name): secret_name}
    if current is None:
        body = {
            "apiVersion": f"{c.RESOURCES_GROUP}/{c.RESOURCES_VERSION}",
            "kind": "ManagedResource",
            "metadata": {"name": spec.name, "namespace": spec.namespace,
                         "labels": dict(spec.labels or {}), "annotations": annotations},
            "spec": mr_spec,
        }
        try:
            apis.custom.create_namespaced_custom_object(
                c.RESOURCES_GROUP, c.RESOURCES_VERSION, spec.namespace, c.MANAGED_RESOURCES_PLURAL, body)
            log.info("created managed resource", extra={"namespace": spec.namespace, "resource": spec.name})
            return secret_name
        except Exception as err:
            if not is_conflict(err):
                raise
            current = get(apis, spec.namespace, spec.name) or {}
    old_refs = [r.get("name") for r in ((current.get("spec") or {}).get("secretRefs") or [])]
    old_annotations = (current.get("metadata") or {}).get("annotations") or {}
    # Merge patch: drop reference annotations of secrets no longer used; unset class when it must be unset.
    patch_annotations: dict[str, Any] = {
        k: None for k in old_annotations if k.startswith(c.REFERENCE_ANNOTATION_PREFIX)}
    patch_annotations.update(annotations)
    patch_spec = dict(mr_spec)
    if not spec.resource_class:
        patch_spec["class"] = None
    if not spec.inject_labels:
        patch_spec["injectLabels"] = None
    apis.custom.patch_namespaced_custom_object(
        c.RESOURCES_GROUP, c.RESOURCES_VERSION, spec.namespace, c.MANAGED_RESOURCES_PLURAL, spec.name,
        {"metadata": {"labels": dict(spec.labels or {}), "annotations": patch_annotations}, "spec": patch_spec})
    for old in old_refs:
        if old and old != secret_name:
            mark_garbage_collectable(apis, spec.namespace, old)
    return secret_name


def mark_garbage_collectable(apis: Apis, namespace: str, secret_name: str) -> None:
    try:
        apis.core.patch_namespaced_secret(
            secret_name, namespace, {"metadata": {"labels": {c.GARBAGE_COLLECTABLE_LABEL: "true"}}})
        log.info("marked old secret garbage-collectable", extra={"namespace": namespace, "secret": secret_name})
    except Exception as err:
        if not is_not_found(err):
            raise


def set_keep_objects(apis: Apis, namespace: str, name: str, keep: bool) -> None:
    try:
        apis.custom.patch_namespaced_custom_object(
            c.RESOURCES_GROUP, c.RESOURCES_VERSION, namespace, c.MANAGED_RESOURCES_PLURAL, name,
            {"spec": {"keepObjects": keep}})
    except Exception as err:
        if not is_not_found(err):
            raise


def delete(apis: Apis, namespace: str, name: str) -> None:
    """Delete the ManagedResource and every secret it references (secrets first, as Gardener does)."""
    current = get(apis, namespace, name)
    secrets = [r.get("name") for r in (((current or {}).get("spec") or {}).get("secretRefs") or [])]
    # Secrets of this ManagedResource that are no longer referenced still carry our name prefix.
    prefix = f"{c.SECRET_PREFIX}{name}-"
    for s in apis.core.list_namespaced_secret(namespace, label_selector=c.GARBAGE_COLLECTABLE_LABEL).items:
        if s.metadata.name.startswith(prefix) and s.metadata.name not in secrets:
            secrets.append(s.metadata.name)
    for secret in secrets:
        try:
            apis.core.delete_namespaced_secret(secret, namespace)
        except Exception as err:
            if not is_not_found(err):
                raise
    if current is not None:
        try:
            apis.custom.delete_namespaced_custom_object(
                c.RESOURCES_GROUP, c.RESOURCES_VERSION, namespace, c.MANAGED_RESOURCES_PLURAL, name)
            log.info("deleted managed resource", extra={"namespace": namespace, "resource": name})
        except Exception as err:
            if not is_not_found(err):
                raise


def exists(apis: Apis, namespace: str, name: str) -> bool:
    return get(apis, namespace, name) is not None
