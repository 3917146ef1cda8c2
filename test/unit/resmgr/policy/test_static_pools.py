"""The static-pools policy: CMK pools from the config, a pools file or CMK's directory tree; pool choice by
STP_* env and cmk isolate command lines; exclusive cores; CMK env; node resources; cache restore."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cri_api.v1 import api_pb2
from unit.resmgr.policy_helpers import ctr, policy_from_yaml

from resmgr.config import ConfigError
from resmgr.model.resources import ContainerInfo, policy_command, policy_env
from resmgr.policy.base import ContainerEdits, RestoreError
from resmgr.policy.static_pools import cmk_args_from_command, read_conf_dir, read_conf_file
from resmgr.topology import Topology

# 2s-2n-16c-2t: socket 0 has cores 0-31 (+64-95), socket 1 cores 32-63 (+96-127).
POOLS = """policy:
  Active: static-pools
  static-pools:
    LabelNode: {label}
    pools:
      exclusive:
        exclusive: true
        cpuLists:
        - {{Cpuset: "8,72", Socket: 0}}
        - {{Cpuset: "9,73", Socket: 0}}
        - {{Cpuset: "40,104", Socket: 1}}
      shared:
        cpuLists:
        - {{Cpuset: "10-15", Socket: 0}}
        - {{Cpuset: "41-47", Socket: 1}}
      infra:
        cpuLists:
        - {{Cpuset: "0-7", Socket: 0}}
"""


def stp(cid: str, *, env: dict[str, str] | None = None, cores: int = 0, command: list[str] | None = None
        ) -> ContainerInfo:
    annotations = {}
    if cores:
        annotations["intel.com/resources"] = json.dumps(
            {"containers": {cid: {"requests": {"cmk.intel.com/exclusive-cores": str(cores)},
                                  "limits": {"cmk.intel.com/exclusive-cores": str(cores)}}}})
    c = ctr(cid, annotations=annotations)
    c.extended_resources = {"cmk.intel.com/exclusive-cores": cores} if cores else {}  # as read from annotations
    c.env = env or {}
    c.command = command or []
    return c


@pytest.fixture
def topo(all_topologies: dict[str, Topology]) -> Topology:
    return all_topologies["2s-2n-16c-2t"]


def test_pools_by_env_and_exclusive_cores(topo: Topology) -> None:
    p = policy_from_yaml(POOLS.format(label="false"), topo)
    p.allocate("plain", stp("plain"))  # no STP_POOL: the shared pool, its least used list
    p.allocate("plain2", stp("plain2"))
    assert {p.placement("plain")[0], p.placement("plain2")[0]} == {frozenset(range(10, 16)), frozenset(range(41, 48))}
    p.allocate("ex", stp("ex", env={"STP_POOL": "exclusive"}, cores=2))
    assert p.placement("ex")[0] == {8, 72, 9, 73} and p.grants["ex"].kind == "exclusive"
    p.allocate("ex1", stp("ex1", env={"STP_POOL": "exclusive", "STP_SOCKET_ID": "0"}, cores=1))
    assert "ex1" not in p.grants  # socket 0 has no free list left: left alone
    p.allocate("ex2", stp("ex2", env={"STP_POOL": "exclusive"}, cores=1))
    assert p.placement("ex2")[0] == {40, 104}
    p.allocate("none", stp("none", env={"STP_POOL": "exclusive"}))
    assert "none" not in p.grants  # exclusive pool without exclusive-cores
    p.allocate("ghost", stp("ghost", env={"STP_POOL": "gpu"}))
    assert "ghost" not in p.grants and p.placement("ghost") == (None, None)
    p.allocate("infra", stp("infra", env={"STP_POOL": "infra", "STP_SOCKET_ID": "1"}))  # infra ignores sockets
    assert p.placement("infra")[0] == frozenset(range(8))
    p.release("ex")
    p.allocate("ex3", stp("ex3", env={"STP_POOL": "exclusive", "STP_SOCKET_ID": "0"}, cores=1))
    assert p.placement("ex3")[0] == {8, 72}
    edits = p.create_edits("ex3")
    assert edits is not None and edits.command is None
    assert edits.env == {"CMK_CPUS_ASSIGNED": "8,72", "CMK_CPUS_INFRA": "0-7", "CMK_CPUS_SHARED": "10-15,41-47"}
    assert p.node_resources() == {"capacity": {"cmk.intel.com/exclusive-cores": "3"}, "labels": {}, "taints": []}
    assert p.pool_cpus()["infra"] == frozenset(range(8)) and p.pool_cpus()["exclusive"] == {8, 9, 40, 72, 73, 104}


def test_no_affinity_gets_env_but_no_cpuset(topo: Topology) -> None:
    p = policy_from_yaml(POOLS.format(label="true"), topo)
    p.allocate("na", stp("na", env={"STP_POOL": "exclusive", "STP_NO_AFFINITY": ""}, cores=1))
    assert p.placement("na") == (None, None)
    assert p.create_edits("na").env["CMK_CPUS_ASSIGNED"] == "8,72"
    assert p.exclusive_sets() == {"na": frozenset({8, 72})}  # still its own
    assert p.node_resources()["labels"] == {"cmk.intel.com/cmk-node": "true"}


@pytest.mark.parametrize(("command", "pool", "socket", "rest"), [
    (["/opt/bin/cmk", "isolate", "--conf-dir=/etc/cmk", "--pool=infra", "sleep", "10000"], "infra", -1,
     ["sleep", "10000"]),
    (["sh", "-c", "/opt/bin/cmk isolate --conf-dir=/etc/cmk --pool=exclusive --socket-id 1 sleep 1"], "exclusive", 1,
     ["sleep", "1"]),
    (["cmk", "isolate", "--pool", "shared", "--no-affinity", "--", "app", "--flag"], "shared", -1, ["app", "--flag"]),
])
def test_cmk_isolate_command_lines(command: list[str], pool: str, socket: int, rest: list[str]) -> None:
    assert policy_command(command) == command  # kept for the policy
    req = cmk_args_from_command(command)
    assert req is not None and (req.pool, req.socket, list(req.command)) == (pool, socket, rest)


def test_cmk_isolate_selects_and_is_dropped(topo: Topology) -> None:
    assert cmk_args_from_command(["cmk", "isolate", "sleep", "1"]) is None  # no pool: not a CMK command line
    assert policy_command(["sh", "-c", "echo $SECRET"]) == []  # other command lines are not kept
    p = policy_from_yaml(POOLS.format(label="false"), topo)
    cmd = ["sh", "-c", "cmk isolate --pool=exclusive --socket-id=1 sleep 10000"]
    p.allocate("c", stp("c", cores=1, command=cmd))
    assert p.placement("c")[0] == {40, 104}
    assert p.create_edits("c").command == ["sleep", "10000"]
    # STP_POOL wins over the command line.
    p.allocate("d", stp("d", env={"STP_POOL": "infra"}, command=cmd))
    assert p.placement("d")[0] == frozenset(range(8))


def write_cmk_tree(root: Path) -> Path:
    for pool, exclusive, lists in (("exclusive", "1", {"0": ["8,72", "9,73"]}), ("infra", "0", {"0": ["0-7"]})):
        (root / "pools" / pool).mkdir(parents=True)
        (root / "pools" / pool / "exclusive").write_text(exclusive)
        for socket, names in lists.items():
            for name in names:
                (root / "pools" / pool / socket / name).mkdir(parents=True)
    return root


def test_pools_from_file_and_cmk_directory(topo: Topology, tmp_path: Path) -> None:
    tree = write_cmk_tree(tmp_path / "cmk")
    assert read_conf_dir(str(tree)) == {
        "exclusive": {"exclusive": True,
                      "cpuLists": [{"Cpuset": "8,72", "Socket": 0}, {"Cpuset": "9,73", "Socket": 0}]},
        "infra": {"exclusive": False, "cpuLists": [{"Cpuset": "0-7", "Socket": 0}]}}
    base = "policy:\n  Active: static-pools\n  static-pools:\n"
    p = policy_from_yaml(base + f"    ConfDirPath: {tree}\n", topo)
    assert sorted(p.pools) == ["exclusive", "infra"]
    pools_file = tmp_path / "pools.conf"
    pools_file.write_text("pools:\n  shared:\n    cpuLists:\n    - Cpuset: 0-3\n      Socket: 0\n")
    p = policy_from_yaml(base + f"    ConfDirPath: {tree}\n    ConfFilePath: {pools_file}\n", topo)
    assert sorted(p.pools) == ["shared"]  # the file wins over the directory
    p = policy_from_yaml(POOLS.format(label="false").replace("    LabelNode", f"    ConfFilePath: {pools_file}\n"
                                                                            "    LabelNode"), topo)
    assert sorted(p.pools) == ["exclusive", "infra", "shared"]  # the config's pools win over both
    with pytest.raises(ConfigError, match="no pools configured.*missing"):
        policy_from_yaml(base + f"    ConfDirPath: {tmp_path / 'missing'}\n", topo)
    # Upstream reads the file with a lenient decoder: an unknown field is left out (and logged), a wrong type refuses.
    pools_file.write_text("pools:\n  shared:\n    cpuLists:\n    - Cpuset: 0-3\n      Sockets: 1\n")
    assert read_conf_file(str(pools_file)) == {"shared": {"cpuLists": [{"Cpuset": "0-3"}]}}
    pools_file.write_text("pools:\n  shared:\n    cpuLists:\n    - Cpuset: 0-3\n      Socket: one\n")
    with pytest.raises(ConfigError, match="Socket"):
        policy_from_yaml(base + f"    ConfFilePath: {pools_file}\n    ConfDirPath: {tmp_path / 'none'}\n", topo)


@pytest.mark.parametrize(("pools", "error"), [
    ("exclusive: {exclusive: true, cpuLists: [{Cpuset: '1-2'}, {Cpuset: '2-3'}]}", "overlap on 2"),
    ("exclusive: {exclusive: true, cpuLists: [{Cpuset: '1'}]}\n      shared: {cpuLists: [{Cpuset: '0-1'}]}",
     "shares CPUs 1 with pool shared"),
    ("shared: {cpuLists: [{Cpuset: '0-200'}]}", "not online"),
    ("shared: {cpuLists: [{Cpuset: 'x'}]}", "Cpuset"),
])
def test_bad_pools(topo: Topology, pools: str, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        policy_from_yaml(f"policy:\n  Active: static-pools\n  static-pools:\n    pools:\n      {pools}\n", topo)


def test_restore(topo: Topology) -> None:
    p = policy_from_yaml(POOLS.format(label="false"), topo)
    p.allocate("ex", stp("ex", env={"STP_POOL": "exclusive"}, cores=2))
    p.allocate("sh", stp("sh"))
    p.allocate("na", stp("na", env={"STP_POOL": "infra", "STP_NO_AFFINITY": "1"}))
    state = json.loads(json.dumps(p.export_state()))
    q = policy_from_yaml(POOLS.format(label="false"), topo)
    q.restore_state(state, dict(p.containers))
    assert q.placements() == p.placements()
    q.allocate("ex2", stp("ex2", env={"STP_POOL": "exclusive"}, cores=1))
    assert q.placement("ex2")[0] == {40, 104}  # the restored lists stay taken
    q.release("ex")
    q.allocate("ex3", stp("ex3", env={"STP_POOL": "exclusive"}, cores=2))
    assert q.placement("ex3")[0] == {8, 72, 9, 73}
    changed = policy_from_yaml(POOLS.format(label="false").replace('"9,73"', '"9"'), topo)
    with pytest.raises(RestoreError, match="not in pool exclusive"):
        changed.restore_state(state, dict(p.containers))
    with pytest.raises(RestoreError):
        policy_from_yaml(POOLS.format(label="false"), topo).restore_state({"grants": state["grants"]},
                                                                          dict(p.containers))


UPSTREAM = Path(__file__).resolve().parents[4] / "test" / "data" / "upstream"
SAMPLE_POOLS = UPSTREAM / "static-pools-policy.conf.example"


def upstream_examples(tmp_path: Path) -> dict[str, str]:
    """Every upstream static-pools example as a config that activates it; where it points at a pools file or a
    CMK directory, those are upstream's sample pools file and a CMK tree in ``tmp_path``."""
    tree = write_cmk_tree(tmp_path / "cmk")
    examples = {}
    for path in sorted(UPSTREAM.glob("static-pools-md-*.cfg")):
        text = path.read_text().replace('"/path/to/conf.yaml"', str(SAMPLE_POOLS)).replace('"/etc/cmk"', str(tree))
        if "Active:" not in text:
            text = text.replace("policy:\n", "policy:\n  Active: static-pools\n", 1) if "policy:" in text else \
                text + "policy:\n  Active: static-pools\n"
        if "ConfFilePath" not in text and "ConfFileDir" not in text and "    pools:" not in text:
            text = text.replace("  static-pools:\n", f"  static-pools:\n    ConfDirPath: {tree}\n") \
                if "  static-pools:\n" in text else text + f"  static-pools:\n    ConfDirPath: {tree}\n"
        examples[path.name] = text
    maps = [doc for doc in yaml.safe_load_all((UPSTREAM / "cri-resmgr-configmap.configmaps.yaml").read_text()) if doc]
    for cm in maps:
        section = yaml.safe_load(cm["data"]["policy"])
        if "static-pools" in section:
            section["Active"] = "static-pools"
            examples[cm["metadata"]["name"]] = yaml.safe_dump({"policy": section})
    return examples


def test_upstream_examples_apply(topo: Topology, tmp_path: Path) -> None:
    examples = upstream_examples(tmp_path)
    assert len(examples) >= 6
    for name, text in examples.items():
        p = policy_from_yaml(text, topo)
        assert p.pools, name
        for i, pool in enumerate(sorted(p.pools)):
            c = stp(f"c{i}", env={"STP_POOL": pool}, cores=1)
            p.allocate(c.id, c)
            if p.pools[pool].lists:
                assert p.placement(c.id)[0] <= p.pools[pool].cpus, name
        restored = policy_from_yaml(text, topo)
        restored.restore_state(p.export_state(), dict(p.containers))
        assert restored.placements() == p.placements(), name
    sample = policy_from_yaml(f"policy:\n  Active: static-pools\n  static-pools:\n    ConfFilePath: {SAMPLE_POOLS}\n",
                              topo)
    assert sample.node_resources()["capacity"] == {"cmk.intel.com/exclusive-cores": "6"}



def test_cmk_env_joins_the_configured_cpu_lists(topo: Topology) -> None:
    """Upstream writes CMK_CPUS_* as the pool's (or the chosen) CPU lists' Cpuset strings joined with
    commas, as configured, not as a canonical cpulist."""
    p = policy_from_yaml("""policy:
  Active: static-pools
  static-pools:
    pools:
      exclusive:
        exclusive: true
        cpuLists:
        - {Cpuset: "0,1", Socket: 0}
        - {Cpuset: "2,3", Socket: 0}
      shared:
        cpuLists:
        - {Cpuset: "4-6,7", Socket: 0}
      infra:
        cpuLists:
        - {Cpuset: "8,9", Socket: 0}
        - {Cpuset: "10-11", Socket: 0}
""", topo)
    p.allocate("ex", stp("ex", env={"STP_POOL": "exclusive"}, cores=2))
    assert p.create_edits("ex").env == {"CMK_CPUS_ASSIGNED": "0,1,2,3", "CMK_CPUS_SHARED": "4-6,7",
                                        "CMK_CPUS_INFRA": "8,9,10-11"}
    assert p.placement("ex")[0] == {0, 1, 2, 3}
    p.allocate("sh", stp("sh"))
    assert p.create_edits("sh").env["CMK_CPUS_ASSIGNED"] == "4-6,7"
    # upstream's sample pools file
    sample = policy_from_yaml(f"policy:\n  Active: static-pools\n  static-pools:\n    ConfFilePath: {SAMPLE_POOLS}\n",
                              topo)
    sample.allocate("ex", stp("ex", env={"STP_POOL": "exclusive", "STP_SOCKET_ID": "2"}, cores=2))
    assert sample.create_edits("ex").env == {"CMK_CPUS_ASSIGNED": "16,17,18,19", "CMK_CPUS_SHARED": "12,13,14,15",
                                             "CMK_CPUS_INFRA": "0,1,2,3,4,5,6,7,20,21,22,23,28,29,30,31"}


def test_only_cmk_env_and_command_are_kept_and_edits_apply() -> None:
    envs = [api_pb2.KeyValue(key=k, value=v) for k, v in
            (("STP_POOL", "infra"), ("DB_PASSWORD", "secret"), ("CMK_NUM_CORES", "2"), ("PATH", "/bin"))]
    assert policy_env(envs) == {"STP_POOL": "infra", "CMK_NUM_CORES": "2"}
    config = api_pb2.ContainerConfig(envs=envs, command=["sh", "-c"], args=["cmk isolate --pool=infra app"])
    ContainerEdits(env={"CMK_CPUS_ASSIGNED": "0-7", "STP_POOL": "x"}, command=["app"]).apply(config)
    assert [(e.key, e.value) for e in config.envs] == [
        ("DB_PASSWORD", "secret"), ("CMK_NUM_CORES", "2"), ("PATH", "/bin"), ("CMK_CPUS_ASSIGNED", "0-7"),
        ("STP_POOL", "x")]
    assert list(config.command) == ["app"] and list(config.args) == []
