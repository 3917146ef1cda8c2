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
