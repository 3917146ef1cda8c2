"""The annotation budget: a 16 MiB annotated create does not stay 16 MiB in the resource manager."""

from __future__ import annotations

import sys
from pathlib import Path

from unit.resmgr.rm_driver import Driver

from resmgr.configplane.adjustments import Expression, container_view
from resmgr.manager.cache import CACHE_FILE
from resmgr.model.annotation_budget import MAX_KEYS, TOTAL_BYTES, TRUNCATED, VALUE_BYTES, within_budget
from resmgr.topology import Topology

BALLOON = "balloon.balloons.cri-resource-manager.intel.com/container.c"
MIB = 1 << 20


def kept_bytes(table: dict[str, str]) -> int:
    return sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in table.items())


def test_small_tables_are_kept_as_they_are() -> None:
    table = {"a": "1", "kubectl.kubernetes.io/last-applied-configuration": "x" * 900}
    assert within_budget(table) == table


def test_long_values_keep_a_prefix_and_policy_keys_stay_whole() -> None:
    table = {"big": "y" * (VALUE_BYTES * 4), BALLOON: "z" * (VALUE_BYTES * 4), "small": "s"}
    kept = within_budget(table)
    assert kept["big"] == "y" * VALUE_BYTES + TRUNCATED
    assert kept[BALLOON] == table[BALLOON] and kept["small"] == "s"


def test_past_the_budget_keys_stay_and_values_go() -> None:
    table = {f"k{i:05d}": "v" * 1000 for i in range(2 * MAX_KEYS)}
    kept = within_budget(table)
    assert len(kept) == MAX_KEYS
    assert sum(len(v) for v in kept.values()) <= TOTAL_BYTES
    assert kept["k00000"] == "v" * 1000 and kept[sorted(kept)[-1]] == ""


def test_a_16_mib_annotated_create_does_not_keep_16_mib(topologies: dict[str, Topology], tmp_path: Path) -> None:
    d = Driver(topologies["2s-2n-16c-2t"], tmp_path, "policy:\n  Active: static\n  ReservedResources:\n    cpu: 2\n")
    huge = {f"a{i}": "x" * 990 for i in range(2 * MAX_KEYS)}  # more keys than kept
    huge.update({f"big{i}": "y" * MIB for i in range(15)})  # and 15 MiB in long values
    huge["0one"] = "o" * MIB
    pod = d.run_pod("p", annotations=huge)
    cid = d.create(pod, "c", annotations={**huge, BALLOON: "b"})
    c = d.rm.containers[cid]
    total = kept_bytes(c.annotations) + kept_bytes(c.pod_annotations) + kept_bytes(d.rm.pods[pod].annotations)
    assert total < 3 * 128 * 1024, f"{total} bytes of annotations kept"
    assert c.annotations[BALLOON] == "b"
    assert (tmp_path / CACHE_FILE).stat().st_size < 512 * 1024
    # Adjustment scopes still see the keys and the values' beginnings.
    view = container_view(c, d.rm.pods[pod])
    assert Expression("pod/annotations/0one", "Exists").matches(view)
    assert Expression("annotations/0one", "Matches", ("ooo*",)).matches(view)
    assert Expression("annotations/a0", "Equals", ("x" * 990,)).matches(view)
