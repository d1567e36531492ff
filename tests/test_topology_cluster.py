"""NVLink domains and multi-plane clusters: preset counts worked out by hand, rail assignment,
NVLink chip/crossbar models, analytic bisection against max-flow, failures, radix and speed
checks, and malformed files through ``fabricsim topo show`` and ``fabricsim validate``.

Sizing rule (fabricsim/topology/cluster.py): radix k = 51.2T / port rate; a non-blocking leaf
has k/2 host ports and k/2 uplinks; a rail's GPUs fill leaves evenly; 2 tiers use the fewest
spines S dividing the leaf uplinks u with L * u / S <= k ports each.
"""
from __future__ import annotations

import functools
import json

import networkx as nx
import pytest
import yaml

from fabricsim.cli import main
from fabricsim.config.topology import ClusterConfig, HgxNodeConfig, NvlRackConfig
from fabricsim.errors import TopologyError
from fabricsim.topology import build_topology, load_topology_file
from fabricsim.topology.cluster import build_cluster
from fabricsim.topology.model import maxflow_cut

from conftest import TOPOLOGIES, parse_error_line

G = 10**9
T = 10**12

CLUSTER_KINDS = ("nvl72_rack", "hgx_node", "cluster")

# file -> (gpus, nvswitches, planes, leaves/plane, spines/plane, superspines/plane, links per kind,
#          bisection per plane, total bisection)
PRESETS = {
    # 72 GPUs x 18 chips; 36 x 7.2T across the rack
    "nvl72_rack.yaml": (72, 18, 0, 0, 0, 0, {"nvlink": 1296}, None, 36 * 7200 * G),
    # 576 GPUs / 4 rails = 144 per rail -> 2 leaves of 72 per rail -> 8 leaves, u = 72;
    # S = smallest divisor of 72 >= 8 * 72 / 256 = 2.25 -> 3 spines (24 links per pair)
    "su_576.yaml": (576, 144, 4, 8, 3, 0, {"nvlink": 576 * 18, "host-leaf": 576 * 4, "leaf-spine": 4 * 8 * 72},
                    288 * 200 * G, 4 * 288 * 200 * G),
    # 2048 -> 29 racks (28 full + 32 GPUs); 512 per rail -> 4 leaves of 128 -> 16; S = 16 * 128 / 256 = 8
    "gb300_2048_4x200g.yaml": (2048, 29 * 18, 4, 16, 8, 0,
                               {"nvlink": 2048 * 18, "host-leaf": 2048 * 4, "leaf-spine": 4 * 16 * 128},
                               1024 * 200 * G, 4 * 1024 * 200 * G),
    # 4096 -> 57 racks; 1024 per rail -> 8 leaves -> 32; S = 32 * 128 / 256 = 16
    "gb300_4096_4x200g.yaml": (4096, 57 * 18, 4, 32, 16, 0,
                               {"nvlink": 4096 * 18, "host-leaf": 4096 * 4, "leaf-spine": 4 * 32 * 128},
                               2048 * 200 * G, 4 * 2048 * 200 * G),
    # 8192 -> 114 racks (113 full + 56 GPUs); 2048 per rail -> 16 leaves -> 64; S = 64 * 128 / 256 = 32
    "gb300_8192_4x200g.yaml": (8192, 114 * 18, 4, 64, 32, 0,
                               {"nvlink": 8192 * 18, "host-leaf": 8192 * 4, "leaf-spine": 4 * 64 * 128},
                               4096 * 200 * G, 4 * 4096 * 200 * G),
    # k = 128 at 400G: 2048 per rail -> 32 leaves of 64 -> 128 (= k: still 2 tiers); S = 128 * 64 / 128 = 64
    "gb300_8192_2x400g.yaml": (8192, 114 * 18, 2, 128, 64, 0,
                               {"nvlink": 8192 * 18, "host-leaf": 8192 * 2, "leaf-spine": 2 * 128 * 64},
                               4096 * 400 * G, 2 * 4096 * 400 * G),
    # 256 nodes x 4 chips; 8 rails x 256 -> 4 leaves of 64 -> 32; S = 32 * 64 / 128 = 16
    "hgx8_dsv3_2048_400g.yaml": (2048, 256 * 4, 1, 32, 16, 0,
                                 {"nvlink": 2048 * 4, "host-leaf": 2048, "leaf-spine": 32 * 64},
                                 1024 * 400 * G, 1024 * 400 * G),
    # 16384 at 400G > k^2/2 = 8192 -> 3 tiers: 256 leaves, pods of 64 -> 4 pods x 64 spines,
    # 64 groups x 2 super-spines
    "hgx8_16384_400g_3tier.yaml": (16384, 2048 * 2, 1, 256, 256, 128,
                                   {"nvlink": 16384 * 2, "host-leaf": 16384, "leaf-spine": 256 * 64,
                                    "spine-superspine": 256 * 64},
                                   8192 * 400 * G, 8192 * 400 * G),
    # 4 nodes, 4 rails -> 4 leaves of 8 per plane, 2 spines (given)
    "cluster_small_draw.yaml": (32, 8, 2, 4, 2, 0, {"nvlink": 64, "host-leaf": 64, "leaf-spine": 64},
                                16 * 400 * G, 32 * 400 * G),
}


@functools.lru_cache(maxsize=None)
def preset(name):
    return load_topology_file(TOPOLOGIES / name)


def test_every_cluster_preset_has_expectations():
    names = [p.name for p in TOPOLOGIES.glob("*.yaml")
             if yaml.safe_load(p.read_text()).get("kind") in CLUSTER_KINDS]
    assert sorted(names) == sorted(PRESETS)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_counts_per_tier_and_bisection(name):
    gpus, nvs, planes, leaves, spines, supers, links, per_plane, total = PRESETS[name]
    t = preset(name)
    d = t.describe()
    expect = {"host": gpus, "nvswitch": nvs}
    for key, n in (("leaf", leaves), ("spine", spines), ("superspine", supers)):
        if n:
            expect[key] = n * planes
    assert d["nodes_per_tier"] == expect
    assert d["hosts"] == gpus and t.hosts == list(range(gpus))
    assert d["links_per_kind"] == links
    assert d["links"] == sum(links.values())
    assert d["bisection_bps"] == total
    assert d.get("planes", 0) == planes
    for row in d.get("per_plane", []):
        assert (row["leaves"], row["spines"], row["superspines"]) == (leaves, spines, supers)
        assert row["bisection_bps"] == per_plane
    # every node of a plane says so, and per plane the counts add up
    for p in range(planes):
        tiers = [t.tier_of(n) for n in t.switches if t.graph.nodes[n].get("plane") == p]
        assert (tiers.count(1), tiers.count(2), tiers.count(3)) == (leaves, spines, supers)


def test_non_blocking_bisection_is_half_the_endpoints_at_port_rate():
    for name, (gpus, _, planes, *_, per_plane, total) in PRESETS.items():
        if planes:
            rate = preset(name).describe()["per_plane"][0]
            t = preset(name)
            port = {d["rate_bps"] for *_, d in t.graph.edges(0, keys=True, data=True) if d["kind"] == "host-leaf"}
            assert per_plane == gpus // 2 * port.pop(), name
            assert rate["hosts_per_leaf"] == rate["uplinks_per_leaf"], name


def test_dgx_superpod_b300_table_is_reproduced():
    # [V] DGX SuperPOD B300: SU/nodes/GPUs/leaf/spine 1/64/512/16/8 ... 16/1024/8192/256/128 (2 planes)
    for nodes, leaves, spines in ((64, 16, 8), (128, 32, 16), (256, 64, 32), (512, 128, 64), (1024, 256, 128)):
        t = build_cluster(ClusterConfig(domain="none", nodes=nodes, nic={"ports": 2, "rate": "400Gbps"}))
        counts = t.tier_counts()
        assert (counts["leaf"], counts["spine"]) == (leaves, spines), nodes
        assert t.meta["tiers"] == 2


# --- node and edge attributes ---------------------------------------------------------------


def test_gpu_attributes_and_names():
    t = preset("su_576.yaml")
    g = t.graph
    for h in (0, 5, 71, 72, 575):
        d = g.nodes[h]
        rack, i = divmod(h, 72)
        assert d["type"] == "host" and d["tier"] == 0
        assert d["name"] == f"r{rack}.g{i}"
        assert (d["rack"], d["tray"], d["local_rank"]) == (rack, i // 4, i % 4)
        assert d["ports"] == 4
    chips = [n for n in t.switches if g.nodes[n].get("domain") == "nvlink"]
    assert g.nodes[chips[0]]["name"] == "r0.nvs0" and g.nodes[chips[-1]]["name"] == "r7.nvs17"
    for n in chips:
        assert g.nodes[n]["tier"] == 1 and g.nodes[n]["switch_latency_ps"] == 300_000
        assert "buffer_bytes" in g.nodes[n] and g.nodes[n]["buffer_mode"] == "per_port"
    eth = [n for n in t.switches if g.nodes[n].get("domain") == "ethernet"]
    assert {g.nodes[n]["name"] for n in eth if g.nodes[n]["tier"] == 2} == {f"p{p}.spine{j}" for p in range(4)
                                                                          for j in range(3)}
    assert all(g.nodes[n]["switch_latency_ps"] == 600_000 for n in eth)


def test_rail_assignment_local_rank_i_on_rail_i():
    for name, rails in (("gb300_2048_4x200g.yaml", 4), ("hgx8_dsv3_2048_400g.yaml", 8)):
        t = preset(name)
        g = t.graph
        planes = t.meta["planes"]
        for h in t.hosts:
            ups = [(v, d) for _, v, d in g.edges(h, data=True) if d["kind"] == "host-leaf"]
            assert sorted(d["plane"] for _, d in ups) == list(range(planes))
            for leaf, d in ups:
                nd = g.nodes[leaf]
                assert nd["plane"] == d["plane"] and nd["tier"] == 1 and nd["domain"] == "ethernet"
                assert nd["rail"] == g.nodes[h]["local_rank"] % rails == g.nodes[h]["rail"]
        # a leaf only holds GPUs of its rail, and they come from many racks/nodes
        leaf = next(n for n in t.switches if t.graph.nodes[n].get("name") == "p0.leaf1")
        hosts = [n for n in g.neighbors(leaf) if n < t.num_hosts]
        assert {g.nodes[x]["local_rank"] % rails for x in hosts} == {1}
        assert len({g.nodes[x]["rack"] for x in hosts}) > 1


def test_nvl72_switch_chips_and_crossbar():
    t = build_cluster(NvlRackConfig())
    g = t.graph
    for h in t.hosts:
        edges = list(g.edges(h, data=True))
        assert len(edges) == 18
        assert all(d["kind"] == "nvlink" and d["rate_bps"] == 400 * G for *_, d in edges)
        assert len({v for _, v, _ in edges}) == 18
    for s in t.switches:
        assert g.degree(s) == 72 and all(n in t.hosts for n in g.neighbors(s))  # chips connect only to GPUs
    x = build_cluster(NvlRackConfig(nvlink={"model": "crossbar"}))
    assert len(x.switches) == 1 and x.graph.nodes[x.switches[0]]["name"] == "r0.nvx"
    for h in x.hosts:
        (e,) = x.graph.edges(h, data=True)
        assert e[2]["rate_bps"] == 7200 * G and e[2]["kind"] == "nvlink"
    # same capacity: every GPU's NVLink total, and the same bisection (exact max-flow)
    assert {t.host_rate_bps(h) for h in t.hosts} == {x.host_rate_bps(h) for h in x.hosts} == {7200 * G}
    half = list(range(36))
    for topo in (t, x):
        assert maxflow_cut(topo.graph, None, half, list(range(36, 72))) == 36 * 7200 * G == topo.bisection_bps()


def test_nvl36_and_hgx_node_with_scale_out():
    t = build_cluster(NvlRackConfig(domain_size=36, scale_out={"nic": {"ports": 2, "rate": "400Gbps"}}))
    c = t.tier_counts()
    assert c["host"] == 36 and c["nvswitch"] == 18
    # 36 / 4 rails = 9 per rail -> 1 leaf each -> 4 leaves per plane, u = 9 -> 1 spine (9 links each)
    assert c["leaf"] == 8 and c["spine"] == 2
    assert t.meta["per_plane"][0]["bisection_bps"] == 18 * 400 * G
    assert t.bisection_bps() == 18 * 7200 * G + 2 * 18 * 400 * G  # one rack: NVLink plus both planes
    h = build_cluster(HgxNodeConfig())
    assert h.tier_counts() == {"host": 8, "nvswitch": 2}
    assert {h.host_rate_bps(x) for x in h.hosts} == {7200 * G}


# --- bisection: analytic == max-flow ---------------------------------------------------------


def _plane_maxflow(t, p):
    """Max-flow between the halves of plane p's hosts ordered by (leaf, id), over that plane only."""
    g = t.graph
    leaf = {h: next(v for _, v, d in g.edges(h, data=True) if d.get("plane") == p) for h in t.hosts}
    order = sorted(t.hosts, key=lambda h: (leaf[h], h))
    nodes = order + [n for n in t.switches if g.nodes[n].get("plane") == p]
    half = len(order) // 2
    return maxflow_cut(g, nodes, order[:half], order[half:])


SMALL = [
    dict(domain="nvl36", racks=2, nic={"ports": 2, "rate": "400Gbps"}),
    dict(domain="hgx8", nodes=6, nic={"ports": 1, "rate": "400Gbps"}, switch={"capacity": "3.2Tbps"}),
    dict(domain="hgx8", nodes=8, nic={"ports": 1, "rate": "400Gbps"}, switch={"capacity": "3.2Tbps"},
         oversubscription=3),
    dict(domain="none", nodes=5, nic={"ports": 2, "rate": "200Gbps"}, switch={"capacity": "2.4Tbps"},
         oversubscription=2, rails=4),
    # 3 tiers: k = 8 at 400G -> 4 down / 4 up; 16 per rail... forced and automatic
    dict(domain="hgx8", nodes=8, nic={"ports": 1, "rate": "400Gbps"}, switch={"capacity": "3.2Tbps"}, tiers=3),
    dict(domain="none", nodes=12, nic={"ports": 1, "rate": "400Gbps"}, switch={"capacity": "3.2Tbps"}, rails=2),
    dict(domain="none", nodes=12, nic={"ports": 1, "rate": "400Gbps"}, switch={"capacity": "3.2Tbps"}, rails=2,
         oversubscription=3),
]


@pytest.mark.parametrize("i", range(len(SMALL)))
def test_analytic_bisection_matches_max_flow(i):
    t = build_cluster(ClusterConfig(**SMALL[i]))
    for row in t.meta["per_plane"]:
        assert row["bisection_bps"] == _plane_maxflow(t, row["plane"]), (SMALL[i], row)


def test_three_tier_sizes():
    # k = 8 (3.2T / 400G): leaf 4 down + 4 up; 96 GPUs on 2 rails -> 48 per rail -> 12 leaves per
    # rail -> 24 leaves > k = 8 -> 3 tiers; pods of k/2 = 4 leaves (2 rail groups) -> 6 pods x 4
    # spines (4 down, 4 up); spine s of each pod -> a group of C super-spines, C the smallest
    # divisor of 4 with 6 x 4 / C <= 8 ports -> C = 4 (6 ports used each): 4 x 4 = 16 super-spines
    t = build_cluster(ClusterConfig(**SMALL[5]))
    assert t.meta["tiers"] == 3
    row = t.meta["per_plane"][0]
    assert (row["leaves"], row["spines"], row["superspines"]) == (24, 24, 16)
    assert t.link_counts()["spine-superspine"] == 24 * 4
    assert {t.graph.degree(n) for n in t.switches if t.tier_of(n) == 3} == {6}
    # every super-spine has at most k ports
    for n in t.switches:
        assert sum(1 for _ in t.graph.edges(n)) <= 8


# --- failures --------------------------------------------------------------------------------


def _small(**kw):
    # 72 GPUs / 4 rails = 18 per rail -> 4 leaves of 18 per plane, 18 uplinks -> 3 spines x 6 links
    base = dict(domain="nvl36", racks=2, nic={"ports": 4, "rate": "200Gbps"}, spines=3)
    base.update(kw)
    return build_cluster(ClusterConfig(**base))


def test_failed_switch_and_links_are_removed():
    intact = _small()
    names = {intact.name_of(n) for n in intact.switches}
    t = _small(failed={"switches": ["p1.spine0"], "links": [["p0.leaf0", "p0.spine2"], ["r0.g0", "r0.nvs2"]]})
    assert names - {t.name_of(n) for n in t.switches} == {"p1.spine0"}
    ids = {t.name_of(n): n for n in t.graph.nodes}
    assert not t.graph.has_edge(ids["p0.leaf0"], ids["p0.spine2"])
    assert _links(t, "p0.leaf0", "p0.spine1") == 6
    assert not t.graph.has_edge(0, ids["r0.nvs2"]) and t.graph.degree(0) == 17 + 4
    spine = next(n for n in intact.switches if intact.name_of(n) == "p1.spine0")
    removed = intact.graph.degree(spine) + _links(intact, "p0.leaf0", "p0.spine2") + 1
    assert removed == 4 * 6 + 6 + 1
    assert t.graph.number_of_edges() == intact.graph.number_of_edges() - removed
    # the touched planes get an exact max-flow; the others keep the analytic value
    rows = t.meta["per_plane"]
    assert rows[0].get("degraded") and rows[1].get("degraded") and not rows[2].get("degraded")
    assert rows[2]["bisection_bps"] == intact.meta["per_plane"][2]["bisection_bps"] == 36 * 200 * G
    assert rows[1]["bisection_bps"] == _plane_maxflow(t, 1) < 36 * 200 * G
    assert rows[1]["bisection_bps"] == 2 * 12 * 200 * G  # 2 of 3 spines left: 2/3 of the uplinks


def _links(t, a, b):
    ids = {t.name_of(n): n for n in t.graph.nodes}
    return t.graph.number_of_edges(ids[a], ids[b])


def test_failed_link_count_removes_some_parallel_links():
    intact = _small(spines=2)  # 18 uplinks over 2 spines -> 9 parallel links per pair
    assert _links(intact, "p0.leaf0", "p0.spine1") == 9
    t = _small(spines=2, failed={"links": [["p0.spine1", "p0.leaf0", 2]]})
    assert _links(t, "p0.leaf0", "p0.spine1") == 7


def test_failed_plane_leaves_three_of_four_ports_and_a_connected_graph():
    t = build_cluster(ClusterConfig(racks=2, failed={"planes": [1]}))
    g = t.graph
    assert not any(g.nodes[n].get("plane") == 1 for n in t.switches)
    for h in t.hosts:
        planes = sorted(d["plane"] for *_, d in g.edges(h, data=True) if d["kind"] == "host-leaf")
        assert planes == [0, 2, 3]
    assert nx.is_connected(g)
    intact = build_cluster(ClusterConfig(racks=2))
    assert t.bisection_bps() * 4 == intact.bisection_bps() * 3
    assert t.meta["per_plane"][1]["failed"] is True
    # two planes of 2 x 400G: one failure halves the cross-rack capacity
    two = dict(racks=2, nic={"ports": 2, "rate": "400Gbps"})
    assert build_cluster(ClusterConfig(**two, failed={"planes": [0]})).bisection_bps() * 2 == \
        build_cluster(ClusterConfig(**two)).bisection_bps()


def test_failures_that_disconnect_are_rejected():
    with pytest.raises(TopologyError, match="disconnected|no link left") as e:
        build_cluster(ClusterConfig(domain="none", nodes=2, nic={"ports": 1, "rate": "400Gbps"},
                                    failed={"planes": [0]}))
    assert e.value.field == "topology.failed"
    chips = [f"r0.nvs{k}" for k in range(18)]
    with pytest.raises(TopologyError, match="no link left"):
        build_cluster(NvlRackConfig(failed={"switches": chips}))
    # the same chips failed in a rack with scale-out: GPUs still reach each other through the leaves
    t = build_cluster(NvlRackConfig(failed={"switches": chips}, scale_out={"nic": {"ports": 2, "rate": "400Gbps"}}))
    assert "nvswitch" not in t.tier_counts()
    assert t.meta["nvlink_bisection_bps"] == 0


@pytest.mark.parametrize("failed, fld, says", [
    ({"switches": ["p1.spin0"]}, "topology.failed.switches[0]", ("unknown switch 'p1.spin0'", "did you mean 'p1.spine0'")),
    ({"switches": ["r0.g1"]}, "topology.failed.switches[0]", ("unknown switch",)),
    ({"links": [["p0.leaf0", "p0.leaf1"]]}, "topology.failed.links[0]", ("0 links between",)),
    ({"links": [["p0.leaf0", "p0.spine1", 7]]}, "topology.failed.links[0]", ("6 links between",)),
    ({"links": [["p0.leaf0", "p9.spine0"]]}, "topology.failed.links[0][1]", ("unknown node 'p9.spine0'",)),
    ({"planes": [4]}, "topology.failed.planes[0]", ("got 4", "0..3")),
])
def test_bad_failure_names(failed, fld, says):
    with pytest.raises(TopologyError) as e:
        _small(failed=failed)
    assert e.value.field == fld
    for s in says:
        assert s in e.value.message


# --- radix and speed checks ------------------------------------------------------------------


@pytest.mark.parametrize("kw, fld, says", [
    # 8192 GPUs x 1 x 800G: k = 64 -> 2 tiers reach 64 leaves; needs 256
    (dict(gpus=8192, nic={"ports": 1, "rate": "800Gbps"}, tiers=2), "topology.tiers", ("2 tiers of 64-port",)),
    (dict(racks=8, spines=2), "topology.spines", ("2 spines would need", "radix 256")),
    (dict(racks=8, spines=5), "topology.spines", ("divisor of the 72 uplinks",)),
    (dict(racks=2, oversubscription=0.003), "topology.oversubscription", ("uplinks",)),
    (dict(racks=2, nic={"ports": 4, "rate": "300Gbps"}), "topology.nic.rate", ("not a port speed",)),
    (dict(racks=2, switch={"port_rate": "400Gbps"}), "topology.nic.rate", ("does not match", "400Gbps")),
    (dict(racks=2, rails=3), "topology.rails", ("divisor of the 4",)),
    (dict(domain="none", nodes=16, nic={"ports": 1, "rate": "400Gbps"}, switch={"capacity": "3.2Tbps"},
          tiers=3, pod_leaves=8), "topology.pod_leaves", ("radix 8",)),
    (dict(domain="none", nodes=200, nic={"ports": 1, "rate": "400Gbps"}, switch={"capacity": "3.2Tbps"}),
     "topology.tiers", ("pods",)),
    (dict(gpus=102), "topology.gpus", ("whole trays",)),
    (dict(racks=3, gpus=100 * 4), "topology.racks", ("fill 6 racks",)),
])
def test_radix_and_speed_violations(kw, fld, says):
    with pytest.raises(TopologyError) as e:
        build_cluster(ClusterConfig(**kw))
    assert e.value.field == fld, e.value
    for s in says:
        assert s in e.value.message, e.value.message


def test_switch_ports_never_exceed_radix():
    for name in ("su_576.yaml", "gb300_2048_4x200g.yaml", "hgx8_16384_400g_3tier.yaml"):
        t = preset(name)
        k = t.meta["radix"]
        eth = [n for n in t.switches if t.graph.nodes[n].get("domain") == "ethernet"]
        assert max(t.graph.degree(n) for n in eth) <= k


# --- through the command line ----------------------------------------------------------------


def test_topo_show_text_lists_tiers_and_planes(runner):
    res = runner.invoke(main, ["topo", "show", str(TOPOLOGIES / "su_576.yaml")])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "nodes         764  (host: 576, nvswitch: 144, leaf: 32, spine: 12)" in out
    assert "links         14976  (nvlink: 10368, host-leaf: 2304, leaf-spine: 2304)" in out
    assert "bisection     230.4Tbps" in out
    assert out.count("leaves 8, spines 3; bisection 57.6Tbps") == 4
    res = runner.invoke(main, ["topo", "show", "--json", str(TOPOLOGIES / "nvl72_rack.yaml")])
    d = json.loads(res.stdout)
    assert d["nodes_per_tier"] == {"host": 72, "nvswitch": 18} and d["bisection_bps"] == 259.2 * T


def test_topo_show_draw(runner, tmp_path):
    out = tmp_path / "t.png"
    res = runner.invoke(main, ["topo", "show", str(TOPOLOGIES / "cluster_small_draw.yaml"), "--draw", str(out)])
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    res = runner.invoke(main, ["topo", "show", str(TOPOLOGIES / "su_576.yaml"), "--draw", str(tmp_path / "big.png")])
    assert res.exit_code == 2
    assert "--draw" in res.stderr and "too many to draw" in res.stderr
    assert not (tmp_path / "big.png").exists()


SCENARIO = """\
name: c
topology:
  kind: cluster
  domain: nvl36
  racks: 2
  nic: {ports: 2, rate: 400Gbps}
{extra}traffic:
  pattern: permutation
  message_size: 64KiB
simulation:
  seed: 1
"""

# (id, topology lines added, expected field, says, line)
BAD = [
    # k = 8 at 400G: 20 leaves per plane > 8 spine ports
    ("radix_exceeded_tiers", "  tiers: 2\n  switch: {capacity: 3.2Tbps}\n", "topology.tiers", "2 tiers of 8-port", 7),
    # k = 16: 12 leaves x 6 uplinks on one spine = 72 ports > 16
    ("radix_exceeded_spine", "  spines: 1\n  switch: {capacity: 6.4Tbps}\n", "topology.spines",
     "1 spines would need 72 ports each, radix 16", 7),
    ("mismatched_speed", "  switch: {port_rate: 800Gbps}\n", "topology.nic.rate", "does not match", 6),
    ("unsupported_speed", "  switch: {speeds: [200Gbps, 800Gbps]}\n", "topology.nic.rate", "not a port speed", 6),
    ("disconnected", "  failed: {planes: [0, 1]}\n", "topology.failed", "disconnected", 7),
    ("unknown_switch", "  failed: {switches: [p0.spine7]}\n", "topology.failed.switches[0]", "unknown switch", 7),
    ("unknown_field", "  planes: 4\n", "topology.planes", "unknown field", 7),
    ("unknown_domain", "  nvlink: {model: mesh}\n", "topology.nvlink.model", "'switches'", 7),
]


@pytest.mark.parametrize("case", BAD, ids=[b[0] for b in BAD])
def test_malformed_cluster_scenarios_exit_2(case, runner, write):
    _, extra, fld, says, line = case
    p = write("scenario.yaml", SCENARIO.replace("{extra}", extra))
    res = runner.invoke(main, ["validate", str(p)])
    assert res.exit_code == 2, res.output
    err = parse_error_line(res.stderr, p)
    assert err["field"] == fld and says in err["msg"], err
    assert err["line"] == line
    res = runner.invoke(main, ["topo", "show", str(p)])
    assert res.exit_code == 2 and parse_error_line(res.stderr, p)["field"] == fld


FILE_BAD = [
    ("radix_exceeded", "kind: cluster\ndomain: none\nnodes: 1024\nnic: {ports: 1, rate: 800Gbps}\ntiers: 2\n",
     "tiers", "2 tiers of 64-port", 5),
    ("mismatched_speed", "kind: cluster\nracks: 2\nnic: {ports: 4, rate: 200Gbps}\nswitch:\n  port_rate: 400Gbps\n",
     "nic.rate", "does not match", 3),
    ("unknown_kind", "kind: nvl144_rack\n", "kind", "allowed", 1),
    ("unknown_node_type", "kind: explicit\nnodes:\n  - {name: a, type: gpu}\n  - {name: s, type: switch}\n"
                          "links:\n  - {a: a, b: s, rate: 400Gbps}\n", "nodes[0].type", "'host'", 3),
    ("disconnected", "kind: nvl72_rack\ndomain_size: 36\nfailed:\n  switches: [" +
     ", ".join(f"r0.nvs{k}" for k in range(18)) + "]\n", "failed", "no link left", 3),
    ("scale_out_field", "kind: hgx_node\nscale_out:\n  nic: {ports: 2, rate: 250Gbps}\n",
     "scale_out.nic.rate", "not a port speed", 3),
]


@pytest.mark.parametrize("case", FILE_BAD, ids=[b[0] for b in FILE_BAD])
def test_malformed_topology_files_exit_2(case, runner, write):
    _, text, fld, says, line = case
    p = write("topo.yaml", text)
    res = runner.invoke(main, ["topo", "show", str(p)])
    assert res.exit_code == 2, res.output
    err = parse_error_line(res.stderr, p)
    assert err["field"] == fld and says in err["msg"], err
    assert err["line"] == line
    # and through a scenario that points at the file: the error names the topology file
    s = write("scenario.yaml", f"name: s\ntopology:\n  kind: file\n  path: {p}\n")
    res = runner.invoke(main, ["validate", str(s)])
    assert res.exit_code == 2
    assert parse_error_line(res.stderr, p)["field"] == fld


def test_scenario_with_cluster_preset_validates(runner, write):
    s = write("scenario.yaml", f"name: s\ntopology:\n  kind: file\n  path: {TOPOLOGIES / 'su_576.yaml'}\n"
                               "traffic:\n  pattern: permutation\n  message_size: 64KiB\n")
    res = runner.invoke(main, ["validate", str(s)])
    assert res.exit_code == 0, res.output
    assert "576 hosts" in res.stdout


def test_build_topology_dispatches_inline_configs():
    t = build_topology(ClusterConfig(domain="hgx8", nodes=2, nic={"ports": 1, "rate": "400Gbps"}))
    assert t.name == "cluster" and t.num_hosts == 16 and t.meta["builder"] == "cluster"
