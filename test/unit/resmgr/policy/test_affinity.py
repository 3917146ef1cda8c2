"""Container affinity annotations (parsing, scoring) and how they steer topology-aware's pool choice;
the prefer-reserved-cpus annotation."""

from __future__ import annotations

import pytest
from unit.resmgr.policy_helpers import burstable, ctr, guaranteed, policy_from_yaml

from resmgr.model.expressions import Expression, container_view
from resmgr.policy.affinity import (
    AFFINITY_KEY,
    ANTI_AFFINITY_KEY,
    Affinity,
    AffinityError,
    AffinityScorer,
    container_affinities,
    parse_affinities,
    pool_scores,
)
from resmgr.topology import Topology

RESERVED_KEY = "prefer-reserved-cpus.cri-resource-manager.intel.com"
TA = """\
policy:
  Active: topology-aware
  ReservedResources:
    cpu: 750m
  topology-aware:
    PinCPU: true
{options}"""


def ta(topo: Topology, options: str = ""):
    return policy_from_yaml(TA.format(options=options), topo)


def parse(text: str, anti: bool = False):
    return parse_affinities(text, anti=anti, namespace="ns", pod_name="p")


def test_full_syntax_scope_match_weight_and_defaults():
    found = parse("""\
web:
- scope: {key: pod/namespace, operator: Equals, values: [shop]}
  match: {key: name, operator: In, values: [cache, db]}
  weight: 5
- match: {key: name, operator: Equals, values: [logger]}
""")
    first, second = found["web"]
    assert (first.scope.key, first.match.values, first.weight) == ("pod/namespace", ("cache", "db"), 5)
    # Without a scope: this pod (namespace and name); without a weight: 1.
    assert (second.scope.key, second.scope.values, second.weight) == (":pod/namespace:pod/name", ("ns:p",), 1)


def test_anti_affinity_negates_and_weights_are_clamped():
    found = parse("a:\n- match: {key: name, operator: Equals, values: [b]}\n  weight: 5000\n"
                  "- match: {key: name, operator: Equals, values: [c]}\n", anti=True)
    assert [a.weight for a in found["a"]] == [-1000, -1]
    # As upstream: an anti-affinity with a negative weight pulls.
    assert parse("a:\n- match: {key: name, operator: Exists}\n  weight: -3\n", anti=True)["a"][0].weight == 3


def test_shorthand_is_symmetric_within_the_pod():
    found = parse("c3: [c1]\nc4: [c2, c3]\n", anti=True)
    assert {name: (a[0].match.operator, a[0].match.values, a[0].weight) for name, a in found.items()} == {
        "c1": ("Equals", ("c3",), -1), "c2": ("Equals", ("c4",), -1),
        "c3": ("In", ("c1", "c4"), -1), "c4": ("In", ("c2", "c3"), -1)}
    assert found["c1"][0].match.key == "name"


@pytest.mark.parametrize("text,problem", [
    ("a: b", "expected a list"),
    ("a:\n- match: {key: name, operator: Sorta}\n", "operator"),
    ("a:\n- scope: {key: name, operator: Equals}\n  match: {operator: AlwaysTrue}\n", "values"),
    ("a:\n- weight: 2\n", "needs a match"),
    ("a:\n- match: {operator: AlwaysTrue}\n  weigth: 2\n", "weigth"),
    ("a:\n- match: {operator: AlwaysTrue}\n  weight: heavy\n", "integer"),
    ("[a, b]", "mapping"),
    ("a: [&x [x, x], *x]\n" + "b: " + "[" * 200 + "]" * 200, "invalid YAML"),
])
def test_invalid_annotations_say_why(text, problem):
    with pytest.raises(AffinityError) as err:
        parse(text)
    assert problem in str(err.value)


def test_implicit_colocation_only_without_explicit_affinities():
    plain = ctr("a", ns="team", pod="p")
    assert [a.weight for a in container_affinities(plain, colocate_pods=True, colocate_namespaces=True)] == [10, 10]
    annotated = ctr("a", ns="team", pod="p", annotations={AFFINITY_KEY: "a: [b]"})
    assert [a.weight for a in container_affinities(annotated, colocate_pods=True)] == [1]
    broken = ctr("a", pod="p", annotations={AFFINITY_KEY: "a: {nope"})
    assert container_affinities(broken) == ()  # logged and ignored


def test_pool_scores_are_damped_by_distance(topologies):
    p = ta(topologies["8numa-256"])
    node = next(n for n in p.pools if n.startswith("NUMA node"))
    pool = p.pools[node]
    scores = pool_scores({node: 8}, p.pools)
    assert scores[node] == 8
    assert scores[pool.parent.name] == pytest.approx(8 * 0.75)
    assert scores["root"] == pytest.approx(8 * 0.75 ** pool.depth)
    # As upstream, only the pools on the path to the root and below see a pool's weight: not its siblings.
    related = {pool.name, *(a.name for a in pool.ancestors)}
    assert all(s == 0 for n, s in scores.items() if n not in related)


def test_affinity_pulls_into_the_pool_of_the_target(topologies):
    p = ta(topologies["8numa-256"])
    p.allocate("db", burstable("db", 1000, pod="shop", name="db"))
    plain = burstable("w0", 1000, pod="shop", name="w0")
    p.allocate("w0", plain)
    assert p.grants["w0"].pool != p.grants["db"].pool  # spread without affinity
    note = {AFFINITY_KEY: "web: [db]"}
    p.allocate("web", burstable("web", 1000, pod="shop", name="web", annotations=note))
    assert p.grants["web"].pool == p.grants["db"].pool
    # The shorthand is symmetric: a later db sibling annotated the same way is pulled to web too.
    cross = {AFFINITY_KEY: "w2:\n- scope: {operator: AlwaysTrue}\n  match: {key: pod/name, operator: Equals, "
                           "values: [shop]}\n  weight: 3\n"}
    p.allocate("w2", burstable("w2", 500, pod="other", name="w2", annotations=cross))
    # Three shop containers pull w2 (db and web from one pool, w0 from another): the pool of two wins.
    assert p.grants["w2"].pool == p.grants["db"].pool


def test_anti_affinity_outweighs_affinity(topologies):
    p = ta(topologies["8numa-256"])
    p.allocate("noisy", burstable("noisy", 100, ns="team", pod="a", name="noisy"))
    pull = ("  - scope: {operator: AlwaysTrue}\n    match: {key: namespace, operator: Equals, values: [team]}\n"
            "    weight: 10\n")
    p.allocate("buddy", burstable("buddy", 100, ns="team", pod="b", name="buddy",
                                  annotations={AFFINITY_KEY: "buddy:\n" + pull}))
    home = p.grants["noisy"].pool
    assert p.grants["buddy"].pool == home
    push = ("quiet:\n- scope: {operator: AlwaysTrue}\n  match: {key: name, operator: Equals, values: [noisy]}\n"
            "  weight: 30\n")
    p.allocate("quiet", burstable("quiet", 100, ns="team", pod="c", name="quiet",
                                  annotations={AFFINITY_KEY: "quiet:\n" + pull, ANTI_AFFINITY_KEY: push}))
    # noisy's pool scores 10 + 10 - 30 < 0, and so do the pools above it.
    assert p.grants["quiet"].pool not in {home, *(a.name for a in p.pools[home].ancestors)}


def test_affinity_to_a_reserved_container_pulls_to_the_root(topologies):
    p = ta(topologies["8numa-256"])
    p.allocate("dns", burstable("dns", 100, ns="kube-system", pod="coredns", name="dns"))
    note = {AFFINITY_KEY: "app:\n- scope: {operator: AlwaysTrue}\n  match: {key: pod/name, operator: Equals, "
                          "values: [coredns]}\n"}
    p.allocate("app", burstable("app", 100, annotations=note, name="app"))
    assert p.grants["app"].pool == "root"


def test_affinity_does_not_override_capacity(topologies):
    """A pool that cannot hold the container is skipped however strong the pull (upstream's step 1)."""
    p = ta(topologies["2s-2n-16c-2t"])
    widest = max(len(p._shared[n]) for n in p.pools if n.startswith("NUMA node"))
    p.allocate("big", guaranteed("big", (widest - 2) * 1000, pod="x", name="big"))
    pool = p.grants["big"].pool
    assert len(p._shared[pool]) == 2  # two exclusive CPUs more would leave the pool no shared CPU
    note = {AFFINITY_KEY: "g:\n- scope: {operator: AlwaysTrue}\n  match: {key: name, operator: Equals, "
                          "values: [big]}\n  weight: 1000\n"}
    p.allocate("g", guaranteed("g", 2000, pod="y", name="g", annotations=note))
    assert p.grants["g"].pool != pool
    assert not p.grants["g"].exclusive & p.grants["big"].exclusive


def test_prefer_reserved_cpus_pod_and_container_forms(topologies):
    p = ta(topologies["8numa-256"], "    ReservedPoolNamespaces: [infra]\n")
    notes = {f"{RESERVED_KEY}/pod": "true", f"{RESERVED_KEY}/container.special": "false"}
    p.allocate("r", burstable("r", 100, pod="p", name="r", annotations=notes))
    p.allocate("s", burstable("s", 100, pod="p", name="special", annotations=notes))
    assert p.grants["r"].pool == "reserved" and p.placement("r")[0] == p.reserved
    assert p.grants["s"].pool != "reserved"
    # An explicit false lets a reserved-namespace container out; kube-system then uses the root pool.
    opt_out = {f"{RESERVED_KEY}/pod": "false"}
    p.allocate("i", burstable("i", 100, ns="infra", annotations=opt_out))
    assert p.grants["i"].pool not in ("reserved", "root")
    p.allocate("k", burstable("k", 100, ns="kube-system", annotations=opt_out))
    assert p.grants["k"].pool == "root" and not p.placement("k")[0] & p.reserved
    p.allocate("bad", burstable("bad", 100, annotations={f"{RESERVED_KEY}/pod": "yes"}))  # not a Go bool
    assert p.grants["bad"].pool != "reserved"


def test_affinity_state_survives_a_cache_restore(topologies):
    p = ta(topologies["8numa-256"])
    db = burstable("db", 1000, pod="shop", name="db")
    p.allocate("db", db)
    state = p.export_state()
    q = ta(topologies["8numa-256"])
    q.restore_state(state, {"db": db})
    q.allocate("web", burstable("web", 1000, pod="shop", name="web", annotations={AFFINITY_KEY: "web: [db]"}))
    assert q.grants["web"].pool == q.grants["db"].pool


def test_indexed_lookups_select_what_a_full_scan_selects():
    """The scorer's value indexes (Equals/In) stay in step as containers come and go."""
    scorer = AffinityScorer()
    containers = {f"c{i}": burstable(f"c{i}", 100, ns=f"ns{i % 3}", pod=f"p{i % 7}", name=f"n{i % 5}")
                  for i in range(40)}
    affinities = (
        Affinity(Expression("namespace", "Equals", ("ns1",)), Expression("", "AlwaysTrue"), 2),
        Affinity(Expression("", "AlwaysTrue"), Expression("name", "In", ("n1", "n3")), -1),
        Affinity(Expression("pod/name", "Matches", ("p[12]",)), Expression("namespace", "In", ("ns0", "ns2")), 5),
        Affinity(Expression(":pod/namespace:pod/name", "Equals", ("ns2:p5",)), Expression("name", "Equals", ("*",)), 7),
    )

    def scan(placed):
        out = {}
        for cid in placed:
            view = container_view(containers[cid])
            for a in affinities:
                if a.scope.matches(view) and a.match.matches(view):
                    out[cid] = out.get(cid, 0) + a.weight
        return out

    placed = {cid: None for cid in list(containers)[:30]}
    for step in range(4):
        assert scorer.container_weights(affinities, containers, placed, exclude=None) == scan(placed)
        for cid in list(placed)[step::5]:
            del placed[cid]
        for cid in list(containers)[30 + step * 2: 32 + step * 2]:
            placed[cid] = None
        replaced = next(iter(placed))
        containers[replaced] = burstable(replaced, 100, ns="ns1", pod="p1", name="n1")  # a new ContainerInfo
