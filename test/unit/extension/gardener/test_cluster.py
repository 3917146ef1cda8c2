"""What the extension reads from the Cluster resource."""

from __future__ import annotations


def test_cluster_digest_follows_what_matters():
    from fixtures.seed_api import default_shoot

    from extension.gardener.cluster import cluster_info_from

    base = {"metadata": {"name": "ns"}, "spec": {"shoot": default_shoot("ns")}}
    info = cluster_info_from(base)
    assert info.kubernetes_version == "1.31.1" and info.worker_pools == ("worker",) and not info.hibernated
    hibernated = {"metadata": {"name": "ns"}, "spec": {"shoot": default_shoot("ns", hibernated=True)}}
    assert cluster_info_from(hibernated).hibernated
    assert cluster_info_from(hibernated).digest != info.digest
    assert cluster_info_from(dict(base)).digest == info.digest


# Go's strconv.ParseBool: these are true, the rest (its false values and its errors) is false.
GO_TRUE = ["1", "t", "T", "TRUE", "true", "True"]
GO_NOT_TRUE = ["0", "f", "F", "FALSE", "false", "False", "", "yes", "tRuE", " true", "true ", "on", "2"]


def test_force_deletion_is_read_as_gos_parse_bool():
    from extension.gardener.cluster import cluster_info_from

    def force(value: str | None) -> bool:
        annotations = {} if value is None else {"confirmation.gardener.cloud/force-deletion": value}
        return cluster_info_from({"metadata": {"name": "ns"}, "spec": {"shoot": {
            "metadata": {"name": "s", "annotations": annotations}}}}).force_deletion

    assert [v for v in GO_TRUE if not force(v)] == []
    assert [v for v in GO_NOT_TRUE if force(v)] == []
    assert force(None) is False


def test_the_shoots_ca_rotation_is_read_and_changes_the_digest():
    from fixtures.seed_api import default_shoot

    from extension.gardener.cluster import cluster_info_from

    shoot = default_shoot("ns")
    plain = cluster_info_from({"metadata": {"name": "ns"}, "spec": {"shoot": shoot}})
    assert (plain.ca_rotation_phase, plain.ca_rotation_started) == ("", "")
    shoot["status"] = {**(shoot.get("status") or {}), "credentials": {"rotation": {"certificateAuthorities": {
        "phase": "Preparing", "lastInitiationTime": "2026-03-01T10:00:00Z"}}}}
    rotating = cluster_info_from({"metadata": {"name": "ns"}, "spec": {"shoot": shoot}})
    assert (rotating.ca_rotation_phase, rotating.ca_rotation_started) == ("Preparing", "2026-03-01T10:00:00Z")
    # --ignore-operation-annotation reconciles on digest changes: each phase of a rotation must be one.
    assert rotating.digest != plain.digest
