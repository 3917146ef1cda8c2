"""ManagedResource secrets: content-addressed names."""

from __future__ import annotations

from extension.gardener.managed_resources import data_checksum, reference_annotation_key, secret_name_for


def test_secret_naming_is_content_addressed():
    a = {"k": b"one"}
    assert secret_name_for("mr", a) == secret_name_for("mr", dict(a))
    assert secret_name_for("mr", a) != secret_name_for("mr", {"k": b"two"})
    assert secret_name_for("mr", a).startswith("managedresource-mr-") and len(data_checksum(a)) == 64
    assert reference_annotation_key("x").startswith("reference.resources.gardener.cloud/secret-")
