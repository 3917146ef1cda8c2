"""Which Extensions a base-config change triggers (the decision only; the real-API test is in
test/integration/extension/test_base_config_propagation.py)."""

from __future__ import annotations

from extension import base_configs

RECORD = base_configs.RECONCILED_ANNOTATION


def ext(record: str | None = "old", *, op: str | None = None, state: str = "Succeeded", type_: str = "Reconcile",
        deleting: bool = False) -> dict:
    ann = {}
    if record is not None:
        ann[RECORD] = record
    if op:
        ann["gardener.cloud/operation"] = op
    meta = {"namespace": "shoot--a--b", "name": "cri-resmgr", "annotations": ann}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"type": "cri-resmgr-extension"},
            "status": {"lastOperation": {"type": type_, "state": state}}}


def test_digest_ignores_key_order_and_sees_values():
    assert base_configs.digest({"a": "1", "b": "2"}) == base_configs.digest({"b": "2", "a": "1"})
    assert base_configs.digest({"a": "1"}) != base_configs.digest({"a": "2"})
    assert base_configs.digest(None) == base_configs.digest({})


def test_outdated_only_when_the_record_differs_and_nothing_is_in_flight():
    assert base_configs.outdated_reason(ext("old"), "new") == "base configs changed (old -> new)"
    assert base_configs.outdated_reason(ext("old", state="Error"), "new") is not None
    assert base_configs.outdated_reason(ext("new"), "new") is None
    assert base_configs.outdated_reason(ext(None), "new") is None  # never reconciled by this operator
    assert base_configs.outdated_reason(ext("old"), None) is None  # no base configs (or ConfigMap gone)
    assert base_configs.outdated_reason(ext("old", state="Processing"), "new") is None
    for op in ("reconcile", "migrate", "restore", "wait-for-state"):
        assert base_configs.outdated_reason(ext("old", op=op), "new") is None
    assert base_configs.outdated_reason(ext("old", deleting=True), "new") is None
    assert base_configs.outdated_reason(ext("old", type_="Migrate"), "new") is None  # migrated away


def test_cached_digest_is_reused_until_it_ages():
    reads = []

    class Core:
        def read_namespaced_config_map(self, name, namespace):
            reads.append((namespace, name))
            return type("CM", (), {"data": {"default": str(len(reads))}})()

    now = [0.0]
    d = base_configs.BaseConfigsDigest(type("Apis", (), {"core": Core()})(), "garden", max_age=5,
                                       clock=lambda: now[0])
    first = d.cached()
    now[0] = 4.9
    assert d.cached() == first and len(reads) == 1
    now[0] = 5.0
    assert d.cached() != first and len(reads) == 2
    fresh = d.fresh()  # a reconcile's read also refreshes what the checks compare with
    assert d.cached() == fresh and len(reads) == 3
    assert base_configs.BaseConfigsDigest(None, None).fresh() is None  # type: ignore[arg-type]
