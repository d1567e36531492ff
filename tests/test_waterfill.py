"""Adaptive routing at flow level under load (``simulation.flow.adaptive: waterfill``,
fabricsim/engine/balance.py, fabricsim/flows/waterfill.py): the water-filling arithmetic against a
bisection of its definition; multipath max-min fair rates it reaches where the proportional split
cannot (single-path traffic beside adaptive traffic on a leaf's uplinks or behind a spine, a leaf
wired to some spines only); the proportional split kept, untouched, where it is already level (a
symmetric fabric); link bytes when the split changes during a run; determinism."""
from __future__ import annotations

import doctest

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fabricsim
from fabricsim.flows import waterfill
from fabricsim.flows.waterfill import water_fill

SIZE = 2 * 2**20
WIRE = 512 * 4178                       # wire bytes of a 2 MiB message (512 full packets)
LINK = {"rate": "400Gbps", "delay": "500ns"}


def fabric(leaves, hosts_per_leaf, spines, extra=(), skip=()):
    """Explicit leaf-spine, hosts h0.. leaf-major, ``extra`` hosts ``(name, switch)`` after them,
    one 400G link per leaf-spine pair except ``skip`` ((leaf, spine) pairs)."""
    n = leaves * hosts_per_leaf
    nodes = ([{"name": f"h{i}", "type": "host"} for i in range(n)]
             + [{"name": name, "type": "host"} for name, _sw in extra]
             + [{"name": f"leaf{i}", "type": "switch", "tier": 1} for i in range(leaves)]
             + [{"name": f"s{i}", "type": "switch", "tier": 2} for i in range(spines)])
    links = [{"a": f"h{i}", "b": f"leaf{i // hosts_per_leaf}", **LINK} for i in range(n)]
    links += [{"a": name, "b": sw, **LINK} for name, sw in extra]
    links += [{"a": f"leaf{a}", "b": f"s{s}", **LINK} for a in range(leaves) for s in range(spines)
              if (a, s) not in skip]
    return {"kind": "explicit", "nodes": nodes, "links": links, "buffer": {"size": "unbounded"}}


def run(tmp_path, topo, pairs, adaptive="waterfill", sizes=None, **flow):
    path = tmp_path / "m.csv"
    sizes = sizes or [SIZE] * len(pairs)
    path.write_text("id,src,dst,size_bytes,start_ps\n"
                    + "".join(f"{i},{s},{d},{b},0\n" for i, ((s, d), b) in enumerate(zip(pairs, sizes))))
    return fabricsim.run({"name": "wf", "topology": topo, "traffic": {"pattern": "csv", "path": str(path)},
                          "routing": {"policy": "adaptive"},
                          "simulation": {"engine": "flow", "flow": {"group": 0, "adaptive": adaptive, **flow}}})


def alone_ps():
    """Fluid time of a 2 MiB message alone at a 400G port's payload rate (4096 of 4178 bytes)."""
    return SIZE / (400e9 / 8e12 * 4096 / 4178)


def link_bytes(res, a, b):
    L = res.links
    return int(L[(L.src_name == a) & (L.dst_name == b)].tx_bytes.iloc[0])


# ---------------------------------------------------------------------------------------------
# the arithmetic

def test_module_doctests():
    from fabricsim.engine import balance
    for mod in (waterfill, balance):
        assert doctest.testmod(mod).failed == 0, mod.__name__


def _level_by_bisection(amount, a, b, c, d):
    def total(lam):
        return np.maximum(0.0, np.minimum(a * lam - b, np.where(np.isfinite(c), c * lam - d, np.inf))).sum()
    lo, hi = 0.0, 1e4
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if total(mid) < amount else (lo, mid)
    lam = (lo + hi) / 2
    return np.maximum(0.0, np.minimum(a * lam - b, np.where(np.isfinite(c), c * lam - d, np.inf)))


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.booleans())
def test_water_fill_levels_the_pipes_as_its_definition(seed, k, integral):
    """Every pipe at the level ``lam`` the shares add up at: ``t = max(0, min(lam a - b, lam c -
    d))``, found by bisection of that definition; shares add up to the amount exactly."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2, k)
    b = rng.uniform(0, 2, k) * (rng.random(k) < 0.6)
    c = np.where(rng.random(k) < 0.5, rng.uniform(0.3, 3, k), np.inf)
    d = rng.uniform(0, 2, k) * (rng.random(k) < 0.6)
    if integral:                          # ties: equal capacities and loads, crossing at a breakpoint
        a, b, d = np.ceil(a), np.round(b), np.round(d)
        c = np.where(np.isfinite(c), np.ceil(c), c)
    amount = float(rng.uniform(0.01, 5))
    t = water_fill(np.array([0, k]), np.array([amount]), a, b, c, d)
    assert t.sum() == pytest.approx(amount, rel=1e-12)
    np.testing.assert_allclose(t, _level_by_bisection(amount, a, b, c, d), atol=1e-9 * amount)


def test_a_share_at_rounding_level_is_zero():
    # 3 over three pipes, the third already at the level the other two reach (but for rounding):
    # it gets exactly 0, not the 1e-16 the level's rounding leaves (a max-min solver divides by
    # sums of such coefficients)
    t = water_fill(np.array([0, 3]), np.array([3.0]), np.ones(3), np.array([0.0, 0.0, 1.5 - 1e-15]))
    assert t[2] == 0.0 and t.sum() == 3.0


# ---------------------------------------------------------------------------------------------
# fabrics where the proportional split is wrong: the multipath max-min rates

def test_single_path_flow_on_an_uplink_leaves_five_flows_at_four_fifths(tmp_path):
    """leaf0 has four uplinks and five senders: h0-h3 (adaptive, to leaf1) and h8, whose only path
    is the uplink to s3 (h9 hangs off s3). Multipath max-min: all five at 4/5 of line rate (h8
    alone on s3's uplink at 0.8, the adaptive flows 0.2 there and 1.0 on the others). Proportional:
    each adaptive flow puts a quarter on s3's uplink, so it and h8 share it at 1/2."""
    topo = fabric(2, 4, 4, extra=[("h8", "leaf0"), ("h9", "s3")])
    pairs = [(8, 9), (0, 4), (1, 5), (2, 6), (3, 7)]
    for model, rate in (("waterfill", 0.8), ("proportional", 0.5)):
        m = run(tmp_path, topo, pairs, model).messages
        late = (m.fct_ps - m.ideal_fct_ps).to_numpy()       # the fluid time beyond the alone one
        np.testing.assert_allclose(late, alone_ps() * (1 / rate - 1), atol=3)
    res = run(tmp_path, topo, pairs)
    ups = [link_bytes(res, "leaf0", f"s{k}") for k in range(4)]
    assert max(ups) - min(ups) <= 2                          # level: 1.0 on every uplink


def test_a_spine_downlink_full_of_single_path_traffic_is_avoided(tmp_path):
    """tests/test_adaptive_routing.py's case: h8 hangs off s3 and sends to h4, filling s3's downlink
    to leaf1; h0-h2 send to h5-h7. leaf0 sees it through s3's pool (the packet engine's remote
    report) and sends nothing via s3: every message at line rate. Proportional: a quarter of each
    via s3, which then carries 1 + 3/4 of line rate's demand: all four at 4/7."""
    topo = fabric(2, 4, 4, extra=[("h8", "s3")])
    pairs = [(8, 4), (0, 5), (1, 6), (2, 7)]
    res = run(tmp_path, topo, pairs)
    m = res.messages
    np.testing.assert_allclose((m.fct_ps - m.ideal_fct_ps).to_numpy(), 0, atol=3)
    assert link_bytes(res, "leaf0", "s3") == 0
    m = run(tmp_path, topo, pairs, "proportional").messages
    np.testing.assert_allclose((m.fct_ps - m.ideal_fct_ps).to_numpy(), alone_ps() * (7 / 4 - 1), atol=3)


def test_a_leaf_wired_to_half_the_spines_pushes_the_others_to_the_rest(tmp_path):
    """leaf2 reaches s0 and s1 only and sends two flows to leaf1, filling s0's and s1's downlinks;
    leaf0's two flows to leaf1 then go via s2 and s3 alone: all at line rate (proportional: 2/3)."""
    topo = fabric(3, 4, 4, skip=[(2, 2), (2, 3)])
    pairs = [(8, 6), (9, 7), (0, 4), (1, 5)]
    res = run(tmp_path, topo, pairs)
    m = res.messages
    np.testing.assert_allclose((m.fct_ps - m.ideal_fct_ps).to_numpy(), 0, atol=3)
    assert link_bytes(res, "leaf0", "s0") == link_bytes(res, "leaf0", "s1") == 0
    m = run(tmp_path, topo, pairs, "proportional").messages
    np.testing.assert_allclose((m.fct_ps - m.ideal_fct_ps).to_numpy(), alone_ps() * 0.5, atol=3)


def test_link_bytes_follow_the_split_of_their_time(tmp_path):
    """The hot downlink with a 1 MiB background: while it runs leaf0 avoids s3, after it ends the
    split is even again. The links' bytes are each step's bytes under that step's split (written
    to the links before the split changes): s3's uplink carries a quarter of the second halves."""
    topo = fabric(2, 4, 4, extra=[("h8", "s3")])
    res = run(tmp_path, topo, [(8, 4), (0, 5), (1, 6), (2, 7)], sizes=[SIZE // 2] + [SIZE] * 3)
    assert res.summary["run"]["flow_waterfill_rounds"] == 2
    half = WIRE // 2
    assert abs(link_bytes(res, "leaf0", "s3") - 3 * half / 4) <= 2
    for k in range(3):
        assert abs(link_bytes(res, "leaf0", f"s{k}") - (half + 3 * half / 4)) <= 2
    # every switch passes on what it receives
    L = res.links
    for sw in ("leaf0", "leaf1", "s0", "s1", "s2", "s3"):
        assert abs(int(L[L.dst_name == sw].tx_bytes.sum()) - int(L[L.src_name == sw].tx_bytes.sum())) <= 8


# ---------------------------------------------------------------------------------------------
# where the proportional split is already level

PERMUTATION = {"pattern": "permutation", "message_size": "256KiB", "qps_per_message": 2}


@pytest.mark.parametrize("topology,traffic", [
    ({"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 4, "spines": 4, "links_per_spine": 2}, PERMUTATION),
    ({"kind": "cluster", "domain": "hgx8", "nodes": 4, "rails": 4, "spines": 2, "nic": {"ports": 2, "rate": "400Gbps"}},
     PERMUTATION),
    ({"preset": "leaf_spine_oversub_2to1"}, {"pattern": "incast", "senders": 24, "receiver": 0, "message_size": "64KiB"}),
    ({"preset": "gb300_2048_4x200g"}, {"pattern": "incast", "senders": 64, "receiver": 0, "message_size": "64KiB"}),
], ids=["leaf_spine", "cluster", "oversubscribed_incast", "gb300_2048"])
def test_a_symmetric_fabric_runs_exactly_as_proportional(tmp_path, topology, traffic):
    """Every link a slot of one candidate set, split by capacity, every next switch fed alike: the
    static check finds the proportional split level, the fixed point is never iterated, and the
    run is the proportional one bit for bit (oversubscription and skewed traffic included)."""
    out = {}
    for model in ("waterfill", "proportional"):
        out[model] = fabricsim.run({"name": "sym", "topology": topology, "traffic": traffic,
                                    "routing": {"policy": "adaptive"},
                                    "simulation": {"engine": "flow", "flow": {"adaptive": model}}})
    assert out["waterfill"].summary["run"]["flow_waterfill_rounds"] == 0
    assert out["waterfill"].messages.end_ps.tolist() == out["proportional"].messages.end_ps.tolist()
    assert out["waterfill"].links.tx_bytes.tolist() == out["proportional"].links.tx_bytes.tolist()


def test_traffic_from_a_single_path_host_makes_the_check_iterate(tmp_path):
    # a leaf-spine listed by hand is level; with a host on a spine it still is while that host is
    # silent (the check looks at the spreads traffic uses), and is not once it sends
    pairs = [(0, 5), (1, 6)]
    assert run(tmp_path, fabric(2, 4, 4), pairs).summary["run"]["flow_waterfill_rounds"] == 0
    topo = fabric(2, 4, 4, extra=[("h8", "s3")])
    assert run(tmp_path, topo, pairs).summary["run"]["flow_waterfill_rounds"] == 0
    assert run(tmp_path, topo, [(8, 4)] + pairs).summary["run"]["flow_waterfill_rounds"] == 1


def test_waterfill_runs_are_deterministic_and_the_sweep_compiles_to_the_same_numbers(tmp_path):
    topo = fabric(3, 4, 4, skip=[(2, 2), (2, 3)], extra=[("h12", "s1")])
    pairs = [(8, 6), (9, 7), (0, 4), (1, 5), (12, 0), (2, 10), (3, 11)]
    sizes = [SIZE, SIZE // 3, SIZE // 2, SIZE, SIZE // 5, SIZE, SIZE // 4]
    a = run(tmp_path, topo, pairs, sizes=sizes)
    b = run(tmp_path, topo, pairs, sizes=sizes)
    c = run(tmp_path, topo, pairs, sizes=sizes, solver="vectorised")     # the sweep not compiled
    assert a.summary["run"]["flow_waterfill_rounds"] >= 3
    assert a.messages.end_ps.tolist() == b.messages.end_ps.tolist()
    assert a.links.tx_bytes.tolist() == b.links.tx_bytes.tolist()
    np.testing.assert_allclose(a.messages.end_ps.astype(float), c.messages.end_ps.astype(float), rtol=1e-9, atol=2)


CLUSTER_FAILED = {"kind": "cluster", "domain": "none", "nodes": 8, "rails": 8, "spines": 4,
                  "nic": {"ports": 1, "rate": "400Gbps"}, "switch": {"buffer": {"size": "unbounded"}},
                  "failed": {"links": [["p0.leaf0", "p0.spine0"], ["p0.leaf3", "p0.spine2", 1]]}}


def test_traffic_after_an_idle_fabric_runs_as_if_alone(tmp_path):
    """A burst after a pause starts from the split the last one left, yet reaches the fixed point
    it reaches alone (the plan's patterns, chained by barriers, are timed as if alone): a 64-GPU
    cluster with failed links, one permutation twice."""
    rng = np.random.default_rng(3)
    dst = rng.permutation(64)
    while (dst == np.arange(64)).any():
        dst = rng.permutation(64)
    pairs = list(zip(range(64), dst.tolist()))
    path = tmp_path / "m.csv"
    rows = [(s_, d, 0) for s_, d in pairs] + [(s_, d, 10**9) for s_, d in pairs]
    path.write_text("id,src,dst,size_bytes,start_ps\n" + "".join(f"{i},{s_},{d},{SIZE},{t}\n" for i, (s_, d, t) in enumerate(rows)))
    both = fabricsim.run({"name": "wf", "topology": CLUSTER_FAILED, "traffic": {"pattern": "csv", "path": str(path)},
                          "routing": {"policy": "adaptive"}, "simulation": {"engine": "flow", "flow": {"group": 0}}})
    fct = both.messages.fct_ps.to_numpy().astype(float)
    assert both.summary["run"]["flow_waterfill_solves"] > 2
    np.testing.assert_allclose(fct[64:], fct[:64], rtol=0, atol=2)


def test_a_recomputation_reaching_the_iteration_cap_keeps_its_last_split_and_says_so(tmp_path, monkeypatch):
    from fabricsim.engine import balance
    monkeypatch.setattr(balance.AdaptiveBalance, "settle", lambda self, tolerance, sweeps=50: None)  # never moves
    topo = fabric(2, 4, 4, extra=[("h8", "s3")])
    res = run(tmp_path, topo, [(8, 4), (0, 5), (1, 6), (2, 7)], waterfill_iterations=3)
    r = res.summary["run"]
    assert (r["flow_waterfill_rounds"], r["flow_waterfill_solves"], r["flow_waterfill_unconverged"]) == (1, 3, 1)
    assert r["flow_waterfill_residual_max"] > 0.1
    assert any("waterfill_iterations (3)" in w for w in res.summary["warnings"])
    m = res.messages                      # the proportional split's rates (4/7), as it never moved
    np.testing.assert_allclose((m.fct_ps - m.ideal_fct_ps).to_numpy(), alone_ps() * (7 / 4 - 1), atol=3)


# ---------------------------------------------------------------------------------------------
# the entries and segments (unit level)

def _balance(topo, pairs, split="per_packet"):
    from fabricsim.api import prepare
    from fabricsim.engine.balance import AdaptiveBalance
    from fabricsim.engine.flow import FlowEngine
    from fabricsim.analysis.recorder import Recorder
    _l, sim = prepare({"topology": topo, "routing": {"policy": "adaptive"}, "nic": {"plane_split": split},
                       "traffic": {"pattern": "permutation", "message_size": "1KiB"},
                       "simulation": {"engine": "flow"}})
    eng = FlowEngine(sim, Recorder())
    sb = eng.spread
    src, dst = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    rows = sb.rows(src, dst, np.arange(len(pairs)), np.arange(len(pairs), dtype=np.uint64))
    return sb, AdaptiveBalance(sb, eng.cap, 1e-3, 30), rows, eng


def test_entries_registered_one_by_one_lead_to_the_same_next_entries():
    sb, bal, _rows, _e = _balance(fabric(2, 4, 4, extra=[("h8", "s3")]), [(8, 4), (0, 5), (1, 6)])
    bal.sync()
    from fabricsim.engine.balance import AdaptiveBalance
    one = AdaptiveBalance(sb, bal.cap, 1e-3, 30)
    leaf = next(k for k in sb.shared_spreads if len(sb.shared_spreads[k][0]) == 4)
    one._add([leaf])                     # its next entries not registered yet: found in a later batch
    assert len(one._keys) == 5           # the leaf and the four spines it leads to
    for e, key in enumerate(one._keys):
        want = [None if n in key[1] else (n, key[1]) for n in sb.shared_spreads[key][1].tolist()]
        assert [one._keys[n] if n >= 0 else None for n in one._e_next[e].tolist()] == want
        assert [bal._keys[n] if n >= 0 else None for n in bal._e_next[bal._key_id[key]].tolist()] == want


def test_proportional_shares_give_the_walks_coefficients_and_new_walks_take_the_moved_split():
    # h9 has a port on leaf0 and one on leaf1's neighbour leaf2: its walk enters leaf0's entry
    topo = fabric(3, 4, 4, extra=[("h12", "s3")])
    topo["nodes"].append({"name": "h13", "type": "host"})
    topo["links"] += [{"a": "h13", "b": "leaf0", **LINK}, {"a": "h13", "b": "leaf2", **LINK}]
    sb, bal, _rows, eng = _balance(topo, [(12, 4), (0, 5), (1, 6)])
    bal.sync()
    assert bal.needed
    bal._prepare()
    coef = bal.coefficients()                     # proportional: exactly the walks' coefficients
    np.testing.assert_allclose(coef, np.concatenate([sb.seg_coef[g] for g in bal._mid_seg]), rtol=1e-12)
    # every flow at line rate: the split moves off s3 (its downlink is full)
    import scipy.sparse as sp
    counts, segs, ws = _rows
    F = sp.csr_matrix((ws, segs, np.r_[0, np.cumsum(counts)]), shape=(len(counts), sb.segments))
    lens = [len(x) for x in sb.seg_links]
    Vm = sp.csr_matrix((np.concatenate(sb.seg_coef), np.concatenate(sb.seg_links), np.r_[0, np.cumsum(lens)]),
                       shape=(sb.segments, len(bal.cap)))
    y = F.T @ np.full(len(counts), bal.cap.max())
    assert bal.residual(y, Vm.T @ y) > 0.1
    bal.settle(1e-6)
    # a walk made now (h13's two ports) is written with the moved shares at leaf0
    before = len(bal._mid_seg)
    sb.rows(np.array([13]), np.array([7]), np.array([9]), np.array([9], dtype=np.uint64))
    proportional = sb.seg_coef[sb.mid_walks[-1][0]].copy()
    assert bal.sync() is True and len(bal._mid_seg) == before + 1
    assert np.abs(sb.seg_coef[sb.mid_walks[-1][0]] - proportional).max() > 0.05
    np.testing.assert_allclose(bal.coefficients(), np.concatenate([sb.seg_coef[g] for g in bal._mid_seg]),
                               rtol=1e-12)
