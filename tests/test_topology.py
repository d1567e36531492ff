"""Bundled topology files, ``fabricsim topo show``, bisection bandwidth and equal-cost next hops.

Expected numbers are worked out by hand in the comments (all links 400 Gbps).
"""
from __future__ import annotations

import json

import pytest

from fabricsim.cli import main
from fabricsim.config import LeafSpineConfig
from fabricsim.topology import build_leaf_spine, load_topology_file
from fabricsim.topology.paths import EqualCostPaths

from conftest import TOPOLOGIES

G400 = 400 * 10**9

# file -> (hosts, leaves, spines, host-leaf links, leaf-spine links, bisection bit/s, oversubscription)
EXPECTED = {
    # 4 leaves x 8 hosts, 8 spines: 32 + 32 links; either half has 16 hosts -> 16 x 400G = 6.4T,
    # and the 2 leaves of a half have 2 x 8 uplinks = 6.4T, so the fabric is non-blocking
    "leaf_spine_32x400g.yaml": (32, 4, 8, 32, 32, 16 * G400, 1.0),
    # 8 leaves x 16 hosts, 16 spines: 128 + 128 links; half = 64 hosts -> 25.6T (uplinks 4 x 16 = 64)
    "leaf_spine_128x400g.yaml": (128, 8, 16, 128, 128, 64 * G400, 1.0),
    # 4 leaves x 8 hosts, 4 spines: 32 + 16 links; half = 16 hosts (6.4T) but only 2 leaves x 4
    # uplinks = 8 x 400G = 3.2T cross the cut: half of the host-side bound
    "leaf_spine_oversub_2to1.yaml": (32, 4, 4, 32, 16, 8 * G400, 2.0),
    # 2 leaves x 2 hosts, 2 spines: 4 + 4 links; half = 2 hosts -> 800G (uplinks 2 x 400G)
    "small_explicit.yaml": (4, 2, 2, 4, 4, 2 * G400, None),
}


def test_every_bundled_topology_has_expectations():
    # NVLink/cluster presets (kind: nvl72_rack, hgx_node, cluster) are checked in test_topology_cluster.py
    import yaml
    flat = [p.name for p in TOPOLOGIES.glob("*.yaml")
            if yaml.safe_load(p.read_text()).get("kind", "leaf_spine") in ("leaf_spine", "explicit")]
    assert sorted(flat) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_topo_show_text(name, runner):
    hosts, leaves, spines, hl, ls, bisection, over = EXPECTED[name]
    res = runner.invoke(main, ["topo", "show", str(TOPOLOGIES / name)])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert f"nodes         {hosts + leaves + spines}  (host: {hosts}, leaf: {leaves}, spine: {spines})" in out
    assert f"links         {hl + ls}  (host-leaf: {hl}, leaf-spine: {ls})" in out
    assert f"bisection     {bisection / 1e12:g}Tbps" in out or f"bisection     {bisection / 1e9:g}Gbps" in out
    if over is not None:
        assert f"oversubscr.   {over:g}:1" in out


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_topo_show_json_counts_and_bisection(name, runner):
    hosts, leaves, spines, hl, ls, bisection, over = EXPECTED[name]
    res = runner.invoke(main, ["topo", "show", "--json", str(TOPOLOGIES / name)])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["nodes"] == hosts + leaves + spines
    assert d["hosts"] == hosts and d["switches"] == leaves + spines
    assert d["links"] == hl + ls
    assert d["nodes_per_tier"] == {"host": hosts, "leaf": leaves, "spine": spines}
    assert d["links_per_kind"] == {"host-leaf": hl, "leaf-spine": ls}
    assert d["link_rates_bps"] == [G400]
    assert d["bisection_bps"] == bisection
    assert d.get("oversubscription") == over


def test_oversubscribed_bisection_is_half_the_host_side_bound():
    t = load_topology_file(TOPOLOGIES / "leaf_spine_oversub_2to1.yaml")
    host_side = (t.num_hosts // 2) * G400
    assert t.bisection_bps() * 2 == host_side
    full = load_topology_file(TOPOLOGIES / "leaf_spine_32x400g.yaml")
    assert full.bisection_bps() == host_side


def test_topo_show_accepts_a_scenario(runner):
    from conftest import SCENARIOS
    res = runner.invoke(main, ["topo", "show", "--json", str(SCENARIOS / "leaf_spine_32_raw.yaml")])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["bisection_bps"] == 16 * G400


def test_links_per_spine_multiply_uplinks():
    t = build_leaf_spine(LeafSpineConfig(hosts_per_leaf=4, leaves=2, spines=1, links_per_spine=2,
                                         oversubscription=2))
    assert t.link_counts() == {"host-leaf": 8, "leaf-spine": 4}
    assert t.bisection_bps() == 2 * G400  # 2 parallel uplinks of leaf 0 to the single spine


# --- equal-cost next hops -----------------------------------------------------------------


@pytest.mark.parametrize("name, spines", [("leaf_spine_32x400g.yaml", 8), ("leaf_spine_128x400g.yaml", 16),
                                          ("leaf_spine_oversub_2to1.yaml", 4), ("small_explicit.yaml", 2)])
def test_next_hops(name, spines):
    t = load_topology_file(TOPOLOGIES / name)
    paths = EqualCostPaths(t)
    leaf_of = {h: t.edge_switch(h) for h in t.hosts}
    spine_ids = sorted(n for n in t.switches if t.tier_of(n) == 2)
    assert len(spine_ids) == spines
    src = 0
    leaf = leaf_of[src]
    local = next(h for h in t.hosts if h != src and leaf_of[h] == leaf)
    remote = next(h for h in t.hosts if leaf_of[h] != leaf)
    # at the source leaf: every spine leads to a remote host; a local host is reached directly
    assert paths.next_hops(leaf, remote) == spine_ids
    assert paths.next_hops(leaf, local) == [local]
    # at a spine: exactly one way down, to the destination's leaf
    for s in spine_ids:
        assert paths.next_hops(s, remote) == [leaf_of[remote]]
    # at the destination leaf: the host itself
    assert paths.next_hops(leaf_of[remote], remote) == [remote]
    # a full path is host, leaf, spine, leaf, host
    p = paths.one_path(src, remote)
    assert len(p) == 5 and p[0] == src and p[-1] == remote and p[2] in spine_ids
    assert paths.one_path(src, local) == [src, leaf, local]


def test_every_remote_destination_has_all_spines_as_next_hops():
    t = load_topology_file(TOPOLOGIES / "leaf_spine_32x400g.yaml")
    paths = EqualCostPaths(t)
    for leaf in (n for n in t.switches if t.tier_of(n) == 1):
        for h in t.hosts:
            expected = 1 if t.edge_switch(h) == leaf else 8
            assert len(paths.next_hops(leaf, h)) == expected


# --- explicit == leaf_spine ---------------------------------------------------------------


def test_explicit_matches_equivalent_leaf_spine():
    ex = load_topology_file(TOPOLOGIES / "small_explicit.yaml")
    ls = build_leaf_spine(LeafSpineConfig(hosts_per_leaf=2, leaves=2, spines=2))
    a, b = ex.describe(), ls.describe()
    for key in ("nodes", "links", "nodes_per_tier", "links_per_kind", "hosts", "switches", "link_rates_bps",
                "bisection_bps"):
        assert a[key] == b[key], key
    # same node numbering (hosts 0..3, then leaves, then spines) and the same adjacency
    def adjacency(t):
        return sorted((u, v) for u, v, _, _ in t.links())
    assert adjacency(ex) == adjacency(ls)
    # same delays and switch latency
    assert {d["delay_ps"] for *_, d in ex.links()} == {d["delay_ps"] for *_, d in ls.links()} == {500_000}
    assert {ex.graph.nodes[s]["switch_latency_ps"] for s in ex.switches} == {600_000}
    # and the same equal-cost choices everywhere
    pe, pl = EqualCostPaths(ex), EqualCostPaths(ls)
    for s in ex.switches:
        for h in ex.hosts:
            assert pe.next_hops(s, h) == pl.next_hops(s, h)


def test_explicit_tiers_default_to_hop_distance(write):
    p = write("t.yaml", "kind: explicit\nnodes:\n  - {name: a, type: host}\n  - {name: b, type: host}\n"
                        "  - {name: l0, type: switch}\n  - {name: l1, type: switch}\n  - {name: top, type: switch}\n"
                        "links:\n  - {a: a, b: l0, rate: 100Gbps}\n  - {a: b, b: l1, rate: 100Gbps}\n"
                        "  - {a: l0, b: top, rate: 200Gbps, count: 2}\n  - {a: l1, b: top, rate: 200Gbps}\n")
    t = load_topology_file(p)
    assert [t.tier_of(n) for n in t.switches] == [1, 1, 2]
    assert t.link_counts() == {"host-leaf": 2, "leaf-spine": 3}
    assert t.bisection_bps() == 100 * 10**9  # limited by the host link
