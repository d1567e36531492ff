"""The dependency-aware lower bound (fabricsim/analysis/bound.py): ``pattern.ideal_duration_ps``
and the per-operation ``ideal_time_ps`` are lower bounds for traces with dependencies, and tight
where they should be."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fabricsim
from fabricsim.api import prepare
from fabricsim.analysis.bound import LowerBound
from fabricsim.analysis.ideal import IdealModel
from fabricsim.traces import write_trace
from fabricsim.traces.collectives import all_to_all, compose, ring_all_gather, ring_all_reduce, ring_reduce_scatter
from fabricsim.traces.moe import MoeTraceConfig, generate_moe_trace
from fabricsim.traces.schema import Trace, TraceRecord, check_trace

RING16 = [0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15]   # every step crosses leaves


def fabric(hosts_per_leaf=4, leaves=4, spines=4):
    return {"kind": "leaf_spine", "hosts_per_leaf": hosts_per_leaf, "leaves": leaves, "spines": spines}


def run_trace(trace, folder, topology=None, routing="adaptive", **sim):
    path = write_trace(trace, Path(folder) / "t.parquet")
    sc = {"name": "bound", "topology": topology or fabric(), "traffic": {"pattern": "trace", "path": str(path)},
          "routing": {"policy": routing}, "simulation": {"seed": 1, "time_limit": "50ms", **sim}}
    return fabricsim.run(sc)


def records(rows):
    """TraceRecords from (id, src, dst, size, deps, gap, start) tuples, op = "op<id // 10>"."""
    return check_trace(Trace([TraceRecord(i, s, d, n, f"op{i // 10}", "other", deps=tuple(deps), gap_ps=gap,
                                          start_ps=start) for i, s, d, n, deps, gap, start in rows], "<test>"))


def test_docstring_examples():
    import doctest

    import fabricsim.analysis.bound as bound
    import fabricsim.analysis.ideal as ideal
    for mod in (bound, ideal):
        assert doctest.testmod(mod).failed == 0, mod.__name__


def test_a_chain_on_an_idle_fabric_is_exactly_its_critical_path(tmp_path):
    """Three dependent messages on disjoint hosts never meet: the run takes exactly the sum of
    their ideal FCTs and gaps, and so does the bound (the former figure, from the run's own
    release times, gave the same number for any delay between the steps)."""
    tr = records([(0, 0, 5, 73 * 4096, (), 0, 0), (1, 6, 11, 17 * 4096, (0,), 2_000_000, 0),
                  (2, 12, 1, 1000, (1,), 500_000, 0)])
    r = run_trace(tr, tmp_path)
    p, m = r.summary["pattern"], r.messages
    expected = int(m["ideal_fct_ps"].sum()) + 2_000_000 + 500_000
    assert p["duration_ps"] == expected
    assert p["ideal_duration_ps"] == expected


def test_short_last_packets_overtaking_on_other_paths_stay_above_the_bound(tmp_path):
    """Found by the property test: with spray and 2 queue pairs a 9830 B chunk (two full packets
    and two short ones) finishes before its single-path ideal FCT (slowdown < 1), the short packets
    overtaking the full ones between the first and the last link; a critical path of ideal FCTs
    then exceeded the run. The bound's shortest FCT covers any path."""
    tr = compose([ring_all_reduce([0, 1, 2, 3, 4], 49152, op="a")])
    with tempfile.TemporaryDirectory() as folder:
        path = write_trace(tr, Path(folder) / "t.parquet")
        sc = {"name": "mp", "topology": fabric(3, 2, 2),
              "traffic": {"pattern": "trace", "path": str(path), "qps_per_message": 2},
              "routing": {"policy": "spray"}, "simulation": {"seed": 3}}
        r = fabricsim.run(sc)
        loaded, sim = prepare(sc)
    assert r.messages["slowdown"].min() < 1.0
    p = r.summary["pattern"]
    assert p["ideal_duration_ps"] <= p["duration_ps"]
    assert p["ideal_duration_ps"] < int(r.messages["ideal_fct_ps"].max()) * 8    # 8 steps of a chunk
    lb = LowerBound(IdealModel(sim), sim.messages)
    ideal = r.messages.set_index("message_id")["ideal_fct_ps"].astype("int64")
    assert (lb.shortest_fct_ps <= ideal.loc[lb.ids].to_numpy()).all()
    assert (lb.shortest_fct_ps > 0.97 * ideal.loc[lb.ids].to_numpy()).all()


def test_shortest_fct_is_the_ideal_fct_for_full_packets(tmp_path):
    """Messages of whole MTU packets on equal-rate hops: no path can beat the single-path train."""
    tr = records([(i, i, (i + 5) % 16, n * 4096, (), 0, 0) for i, n in enumerate((1, 2, 17, 256))])
    r = run_trace(tr, tmp_path)
    loaded, sim = prepare(r.scenario)
    lb = LowerBound(IdealModel(sim), sim.messages)
    assert list(lb.shortest_fct_ps) == list(r.messages["ideal_fct_ps"].astype("int64"))


def test_port_load_carries_the_dependents_tail(tmp_path):
    """Host 0 sends two 1 MiB messages at once; each has a dependent elsewhere 3 us later. The
    critical path is one message + gap + dependent; the bound adds the second message's bytes on
    host 0's port before the tails: close to what the run takes."""
    S = 2**20
    tr = records([(0, 0, 5, S, (), 0, 0), (1, 0, 9, S, (), 0, 0),
                  (2, 6, 10, S, (0,), 3_000_000, 0), (3, 11, 14, S, (1,), 3_000_000, 0)])
    r = run_trace(tr, tmp_path)
    loaded, sim = prepare(r.scenario)
    b = LowerBound(IdealModel(sim), sim.messages).of(int(r.summary["pattern"]["first_release_ps"]))
    assert b.port_ps > 1.3 * b.critical_path_ps
    assert r.summary["pattern"]["ideal_duration_ps"] == b.duration_ps == b.port_ps
    assert 0.95 < r.summary["effective_bandwidth"]["completion_time_ratio"] <= 1.0


def test_release_heads_on_the_receiving_side(tmp_path):
    """Four senders start one after another into host 0 after a first message: the receiving
    port must carry every byte released after each start, after the first packet's way there."""
    S = 512 * 1024
    tr = records([(0, 1, 0, S, (), 0, 0)] + [(i, 4 * i, 0, S, (0,), 0, 0) for i in (1, 2, 3)])
    r = run_trace(tr, tmp_path)
    loaded, sim = prepare(r.scenario)
    b = LowerBound(IdealModel(sim), sim.messages).of(0)
    # after message 0, three messages of S into one 400G port
    assert b.port_ps > b.critical_path_ps
    assert r.summary["pattern"]["duration_ps"] >= r.summary["pattern"]["ideal_duration_ps"] == b.duration_ps
    assert r.summary["effective_bandwidth"]["completion_time_ratio"] > 0.9


def test_ring_all_reduce_ecmp_vs_adaptive_completion_ratios_follow_goodput(tmp_path):
    """16-rank ring all-reduce (8 MiB) whose every step crosses leaves: ECMP collides, adaptive
    routing does not. The bound depends on the trace and the fabric only, not on the routing, so
    the two completion ratios stand as their durations do, exactly as the goodput fractions
    (same bytes, same capacity): the ratio of ratios equals the ratio of goodputs to rounding.
    The former figure (each run's own release times) gave about 1.0 for both."""
    tr = compose([ring_all_reduce(RING16, 8 * 2**20)])
    res = {p: run_trace(tr, tmp_path, routing=p) for p in ("ecmp", "adaptive")}
    eb = {p: r.summary["effective_bandwidth"] for p, r in res.items()}
    ideal = {p: r.summary["pattern"]["ideal_duration_ps"] for p, r in res.items()}
    assert ideal["ecmp"] == ideal["adaptive"]
    cr = {p: e["completion_time_ratio"] for p, e in eb.items()}
    gp = {p: e["goodput_fraction"] for p, e in eb.items()}
    assert cr["ecmp"] / cr["adaptive"] == pytest.approx(gp["ecmp"] / gp["adaptive"], rel=1e-6)
    assert cr["ecmp"] < 0.75 * cr["adaptive"]
    assert cr["adaptive"] <= 1.0
    # the bound is a critical path here: 2 (n - 1) steps of a 512 KiB chunk
    chunk = res["adaptive"].messages["ideal_fct_ps"].min()
    assert ideal["adaptive"] >= 30 * chunk


# ----------------------------------------------------------------------------- property test
SIZES = [1000, 8192, 65536, 200_000]


@st.composite
def dag(draw, hosts):
    n = draw(st.integers(2, 9))
    rows = []
    for i in range(n):
        s = draw(st.integers(0, hosts - 1))
        d = draw(st.integers(0, hosts - 2))
        d = d + 1 if d >= s else d
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        rows.append((i, s, d, draw(st.sampled_from(SIZES)), deps,
                     draw(st.sampled_from([0, 0, 1_000_000])), draw(st.sampled_from([0, 0, 3_000_000]))))
    return records(rows)


@st.composite
def collective(draw, hosts):
    ranks = draw(st.permutations(range(hosts)))[:draw(st.integers(3, min(5, hosts)))]
    gen = draw(st.sampled_from([ring_all_reduce, ring_all_gather, ring_reduce_scatter, all_to_all]))
    size = draw(st.sampled_from([48 * 1024, 160 * 1024]))
    first = gen(ranks, size, op="a", gap_ps=draw(st.sampled_from([0, 1_000_000])))
    parts = [first]
    if draw(st.booleans()):     # a second one waiting for the first, on other ranks' order
        from fabricsim.traces.collectives import last_messages
        parts.append(ring_all_reduce(list(reversed(ranks)), size, op="b", start_id=len(first),
                                     deps=last_messages(first)))
    return compose(parts)


@st.composite
def moe(draw, hosts):
    cfg = MoeTraceConfig(model="gpt-oss-20b", ep_size=4, gpus=4, gpus_per_node=2,
                         tokens_per_gpu=draw(st.sampled_from([8, 24])), layers=draw(st.integers(1, 2)),
                         seed=draw(st.integers(0, 50)))
    return generate_moe_trace(cfg).trace


@st.composite
def cases(draw):
    hpl = draw(st.integers(2, 3))
    topo = fabric(hpl, 2, draw(st.integers(1, 2)))
    hosts = 2 * hpl
    trace = draw(st.one_of(dag(hosts), collective(hosts), moe(hosts)))
    return topo, trace, draw(st.sampled_from(["ecmp", "spray", "adaptive", "flowlet"])), \
        draw(st.sampled_from([1, 1, 2])), draw(st.sampled_from([1, 2]))


@settings(max_examples=120, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(cases())
def test_the_bound_holds_on_random_dependent_traces(case):
    topo, trace, routing, cell, qps = case
    with tempfile.TemporaryDirectory() as folder:
        path = write_trace(trace, Path(folder) / "t.parquet")
        r = fabricsim.run({"name": "prop", "topology": topo,
                           "traffic": {"pattern": "trace", "path": str(path), "qps_per_message": qps},
                           "routing": {"policy": routing}, "simulation": {"seed": 3, "cell_packets": cell}})
    p = r.summary["pattern"]
    assert r.summary["messages"]["incomplete"] == 0
    assert p["ideal_duration_ps"] is not None and 0 < p["ideal_duration_ps"] <= p["duration_ps"], (case, p)
    c = r.collectives
    assert (c["ideal_time_ps"].astype("int64") <= c["time_ps"].astype("int64")).all(), c
    assert (c["ideal_time_ps"].astype("int64") > 0).all()


@pytest.mark.parametrize("domain,split,pxn,ports", [
    ("hgx8", "per_packet", True, 1), ("hgx8", "per_flow", False, 2), ("nvl36", "per_packet", True, 2),
])
def test_the_bound_holds_with_nvlink_pxn_and_several_ports(tmp_path, domain, split, pxn, ports):
    """A ring all-reduce mixing NVLink steps (NVLink framing) and scale-out steps (PXN-relayed,
    or over k of n NIC ports), then an all-to-all waiting for it."""
    per = 8 if domain == "hgx8" else 36
    ranks = [0, per + 1, 2, per + 3, 4, 5]
    first = ring_all_reduce(ranks, 192 * 1024, op="ar")
    from fabricsim.traces.collectives import last_messages
    tr = compose([first, all_to_all(ranks, 96 * 1024, op="a2a", start_id=len(first), deps=last_messages(first))])
    size = {"nodes": 2} if domain == "hgx8" else {"racks": 2}
    topo = {"kind": "cluster", "domain": domain, **size, "nic": {"ports": ports, "rate": "400Gbps"}}
    path = write_trace(tr, tmp_path / "t.parquet")
    r = fabricsim.run({"name": "pxn", "topology": topo, "traffic": {"pattern": "trace", "path": str(path)},
                       "routing": {"policy": "adaptive"},
                       "nic": {"plane_split": split, "pxn": pxn, "pxn_chunk": "64KiB"}, "simulation": {"seed": 2}})
    p = r.summary["pattern"]
    assert r.summary["messages"]["incomplete"] == 0
    assert 0 < p["ideal_duration_ps"] <= p["duration_ps"]
    assert r.summary["effective_bandwidth"]["completion_time_ratio"] > 0.3
    c = r.collectives.set_index("op")
    assert (c["ideal_time_ps"] <= c["time_ps"]).all() and (c["ideal_time_ps"] > 0).all()


#: two hosts on one leaf that differ only in their links: 2 x 400G against 1 x 400G
UNEVEN = {"kind": "explicit",
          "nodes": [{"name": f"h{i}", "type": "host"} for i in range(4)]
          + [{"name": "l0", "type": "switch"}, {"name": "l1", "type": "switch"}, {"name": "s0", "type": "switch"}],
          "links": [{"a": "h0", "b": "l0", "rate": "400Gbps"}, {"a": "h0", "b": "l0", "rate": "400Gbps"},
                    {"a": "h1", "b": "l0", "rate": "400Gbps"}, {"a": "h2", "b": "l1", "rate": "400Gbps"},
                    {"a": "h3", "b": "l1", "rate": "200Gbps"},
                    {"a": "l0", "b": "s0", "rate": "800Gbps"}, {"a": "l1", "b": "s0", "rate": "800Gbps"}]}


#: topologies whose host and pair classes the tests below check (rails, failures, parallel and uneven links)
CLASS_TOPOLOGIES = [
    {"kind": "cluster", "domain": "nvl72", "racks": 4, "nic": {"ports": 4, "rate": "200Gbps"}},
    {"kind": "cluster", "domain": "nvl72", "racks": 4, "nic": {"ports": 4, "rate": "200Gbps"},
     "failed": {"switches": ["p1.spine0", "r1.nvs3"], "links": [["p0.leaf0", "p0.spine1"], ["r2.g0", "p2.leaf0"]]}},
    {"kind": "cluster", "domain": "hgx8", "nodes": 8, "rails": 4, "spines": 2, "nic": {"ports": 2, "rate": "400Gbps"}},
    {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 4, "spines": 4, "links_per_spine": 2},
    UNEVEN,
]
CLASS_IDS = ["nvl72", "nvl72_failed", "hgx8", "leaf_spine", "uneven_links"]


@pytest.mark.parametrize("topology", CLASS_TOPOLOGIES, ids=CLASS_IDS)
def test_host_classes_from_the_link_table_equal_the_graph_walk(topology):
    # IdealModel reads host classes off the run's LinkTable (one sort) when the input has one;
    # the walk over the graph (per host and neighbour) must give the same numbering and signatures
    import numpy as np
    _l, sim = prepare({"topology": topology, "simulation": {"engine": "flow"}})
    fast = IdealModel(sim)
    walk = IdealModel(sim)
    walk._link_table = None
    assert np.array_equal(fast.host_classes(), walk.host_classes())
    assert fast._hc_sig == walk._hc_sig and fast._n_hc == walk._n_hc
    if topology is UNEVEN:                    # h0's two parallel links count twice
        assert [len(fwd) for _s, fwd, _b in fast._hc_sig[int(fast.host_classes()[0])]] == [2]


@pytest.mark.parametrize("topology", CLASS_TOPOLOGIES, ids=CLASS_IDS)
def test_pairs_of_one_class_have_the_figures_of_its_representative(topology):
    # pair classes join pairs whose ends face each other alike (GPUs of different racks on one
    # rail, for traffic between racks); every figure the references and the bound read off a
    # class's representative must be the pair's own, both ways
    import numpy as np
    _l, sim = prepare({"topology": topology, "simulation": {"engine": "flow"}})
    model = IdealModel(sim)
    bound = LowerBound(model, [])
    g = sim.topology.graph
    H = sim.topology.num_hosts
    rng = np.random.default_rng(5)
    src = rng.integers(0, H, 400)
    dst = (src + rng.integers(1, H, 400)) % H
    cls = model.pair_classes(src, dst)
    back = model.pair_classes(dst, src)
    fine = {(int(model.host_classes()[a]), int(model.host_classes()[b])) for a, b in zip(src, dst)}
    if topology.get("kind") == "cluster":
        assert len(set(cls.tolist())) < len(fine)                       # classes were joined
    for a, b, c, cb in zip(src.tolist(), dst.tolist(), cls.tolist(), back.tolist()):
        ra, rb = model.representative(c)
        assert model.pair_class(a, b) == c
        assert model.framing(a, b) == model.framing(ra, rb)
        assert model.ports(a, b) == model.ports(ra, rb)          # the same first-hop switches too
        assert model.ports(b, a) == model.ports(rb, ra)
        assert model.hops(a, b) == model.hops(ra, rb)
        assert model.fastest_hops(a, b) == model.fastest_hops(ra, rb)
        assert model.base_rtt(a, b) == model.base_rtt(ra, rb)
        assert model.train(a, b, 100_000, 2) == model._train(a, b, 100_000, 2)
        # the bound's sending and receiving sides, off the representatives, are the pair's own
        first, n_out, out_rate = model.ports(a, b)
        reach = tuple(sorted((sum(len(g.get_edge_data(x, b)) for x in bound._settle(
            frozenset((s,)), b, sim.paths.attachments(b))) for s in first for _ in g.get_edge_data(a, s)), reverse=True))
        assert bound._sending(c)[2:] == (model.fastest_hops(a, b), n_out, out_rate, bound._fastest_port(a, first), reach)
        assert bound._receiving(cb) == (model.ports(b, a)[1], model.ports(b, a)[2],
                                        bound._fastest_port(b, model.ports(b, a)[0]))
    if topology is UNEVEN:
        # h0 (2 links) and h1 (1 link) on one leaf: never one class
        assert model.pair_class(0, 2) != model.pair_class(1, 2)
        assert model.pair_class(2, 0) != model.pair_class(3, 0)
    if topology.get("domain") == "nvl72" and "failed" not in topology:
        # between racks on one rail: one class for every rack pair
        assert model.pair_class(1, 72) == model.pair_class(1, 144) == model.pair_class(73, 216)
        assert model.pair_class(1, 72) != model.pair_class(1, 2)           # within rack 0: NVLink


def test_the_bound_of_a_set_counts_only_the_dependencies_inside_it():
    """A chain 0 -> 1 -> 2 -> 3 (gaps 1 us) and a message 4 on its own: the bound of {1, 2, 4}
    starts 1 at t0 (its dependency on 0 lies outside the set, satisfied), keeps 1 -> 2, and ignores
    3 (a dependent outside the set). It equals the bound of the same three messages with the edge
    to 0 removed, computed on their own."""
    from fabricsim.flows import MessageTable
    S = 256 * 1024
    rows = [(0, 0, 5, S, (), 1_000_000, 0), (1, 5, 9, S, (0,), 1_000_000, 0),
            (2, 9, 14, S, (1,), 1_000_000, 0), (3, 14, 2, S, (2,), 1_000_000, 0), (4, 3, 7, S, (), 0, 0)]
    _loaded, sim = prepare({"name": "set", "topology": fabric(), "traffic": {"pattern": "permutation"}})
    model = IdealModel(sim)

    def table(rs):
        return MessageTable.from_columns(
            id=[r[0] for r in rs], src=[r[1] for r in rs], dst=[r[2] for r in rs], size_bytes=[r[3] for r in rs],
            deps=[r[4] for r in rs], gap_ps=[r[5] for r in rs], start_ps=[r[6] for r in rs])

    whole = LowerBound(model, table(rows))
    part = whole.of(0, [1, 2, 4])
    alone = LowerBound(model, table([(1, 5, 9, S, (), 1_000_000, 0), rows[2], rows[4]])).of(0)
    assert (part.duration_ps, part.critical_path_ps, part.port_ps) == \
        (alone.duration_ps, alone.critical_path_ps, alone.port_ps)
    assert part.message_ids.tolist() == [1, 2, 4]
    assert part.earliest_start_ps.tolist() == alone.earliest_start_ps.tolist()
    assert part.earliest_finish_ps.tolist() == alone.earliest_finish_ps.tolist()
    # 2 waits for 1 (plus its gap): the chain inside the set is kept
    assert part.earliest_start_ps[1] == part.earliest_finish_ps[0] + 1_000_000
    assert part.critical_path_ps > whole.of(0, [1]).critical_path_ps
