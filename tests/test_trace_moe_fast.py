"""The fast paths of the MoE trace generator against simple references: the same experts, counts,
orders, dependencies and messages as the general code they replace (fabricsim/traces/moe.py)."""
from __future__ import annotations

import numpy as np
import pytest

from fabricsim.traces import moe
from fabricsim.traces.moe import (MoeTraceConfig, _Columns, _copies, _dest_gpus, _expert_node, _gumbel,
                                  _gumbel_of_bits, _hits, _non_records, _route, _route_uniform,
                                  _uniform_layout, generate_moe_trace, nodes_per_token, rank_receive_counts,
                                  sample_routing, send_order, send_order_index)


def _sets(r):
    return np.sort(r, axis=1)


def _words(rng, t, e):
    return rng.bit_generator.random_raw(t * e // 2).view(np.uint32).reshape(t, e)


def test_raw_words_are_the_float32_uniforms_of_generator_random():
    a, b = np.random.default_rng([3, 1, 4]), np.random.default_rng([3, 1, 4])
    for rows in (100, 4096, 7):
        u = a.random((rows, 256), dtype=np.float32)
        w = _words(b, rows, 256)
        assert np.array_equal((w >> 8).astype(np.float32) * np.float32(2 ** -24), u)
        kept = w.copy()
        _gumbel_of_bits(w)
        assert np.array_equal(w, kept)  # a new array: the words are left as they were
    # and the noise is the noise of _gumbel, value for value
    w = _words(np.random.default_rng(9), 512, 256)
    assert np.array_equal(_gumbel_of_bits(w), _gumbel(np.random.default_rng(9), (512, 256)))


def test_noise_of_a_value_does_not_depend_on_the_array_it_is_in():
    """The fast path computes the noise of a few values at a time; the general code of whole rows."""
    rng = np.random.default_rng(7)
    words = _words(rng, 64, 256)
    whole = _gumbel_of_bits(words).ravel()
    flat = words.ravel()
    for n in (1, 2, 3, 5, 8, 13, 16, 17, 31, 100):
        parts = np.concatenate([_gumbel_of_bits(flat[a:a + n].copy()) for a in range(0, 4000, n)])
        assert np.array_equal(parts, whole[:len(parts)]), n


def test_non_records_match_a_direct_prefix_maximum():
    v = np.arange(1 << 24, dtype=np.uint32)
    g = _gumbel_of_bits(v << np.uint32(8))
    before = np.concatenate([[-np.inf], np.maximum.accumulate(g)[:-1]])
    assert np.array_equal(np.flatnonzero(g < before), _non_records())
    # what the fast path relies on: outside the non-records the noise never decreases
    rec = np.ones(len(v), dtype=bool)
    rec[_non_records()] = False
    assert (np.diff(g[rec]) >= 0).all()


CONFIGS = [
    dict(model="deepseek-v3", ep_size=64),                                   # 8 nodes of 32, top-4 nodes, r = 2
    dict(model="deepseek-v3", ep_size=64, max_nodes_per_token=3),            # r = 2, 3 nodes
    dict(model="deepseek-v3", ep_size=256),                                  # 32 nodes of 8
    dict(model="gpt-oss-20b", ep_size=16),                                   # not node-limited
    dict(model="deepseek-v3", ep_size=32, gpus_per_node=72),                 # one node
    dict(model="custom", hidden_size=64, experts=24, top_k=3, ep_size=12, gpus_per_node=4,
         max_nodes_per_token=2),                                             # r = 1, widths not a power of 2
    dict(model="custom", hidden_size=64, experts=1024, top_k=8, ep_size=64), # keys wider than 32 bits
]


@pytest.mark.parametrize("kw", CONFIGS)
@pytest.mark.parametrize("levels", [0, 3, 40])
def test_route_uniform_takes_the_experts_route_takes(kw, levels):
    """Random words, and words of a few values only (ties everywhere: the re-routed tokens)."""
    cfg = MoeTraceConfig(**kw)
    node = _expert_node(cfg, 0)
    layout = _uniform_layout(cfg, node)
    assert layout is not None
    rng = np.random.default_rng(levels + cfg.experts)
    t = 2048
    if levels:
        bits = (rng.integers(0, levels, (t, cfg.experts)) * (2 ** 32 // levels)).astype(np.uint32)
    else:
        bits = _words(rng, t, cfg.experts)
    logw = np.full(cfg.experts, np.log(1.0 / cfg.experts))
    ref = _route(cfg, logw, _gumbel_of_bits(bits), node)
    got = _route_uniform(cfg, logw.astype(np.float32)[0], bits.copy(), node, layout)
    assert np.array_equal(_sets(got), _sets(ref))
    assert (np.diff(_sets(got), axis=1) > 0).all()  # distinct experts


def test_route_uniform_near_the_non_records():
    cfg = MoeTraceConfig(model="deepseek-v3", ep_size=64)
    node = _expert_node(cfg, 0)
    nr = _non_records()
    rng = np.random.default_rng(5)
    near = np.concatenate([nr - 1, nr, nr + 1]).astype(np.uint32)
    # every token has its best experts at or next to a non-record value
    bits = _words(rng, 2048, 256) >> np.uint32(1)  # below the band mostly
    bits[:, rng.choice(256, 24, replace=False)] = rng.choice(near, (2048, 24)) << np.uint32(8)
    ref = _route(cfg, np.full(256, np.log(1 / 256)), _gumbel_of_bits(bits), node)
    got = _route_uniform(cfg, np.float32(np.log(1 / 256)), bits.copy(), node, _uniform_layout(cfg, node))
    assert np.array_equal(_sets(got), _sets(ref))


@pytest.mark.parametrize("kw", [dict(model="deepseek-v3", ep_size=64, gpus=128, tokens_per_gpu=200),
                                dict(model="gpt-oss-20b", ep_size=16, tokens_per_gpu=333)])
def test_sample_routing_fast_and_general_paths_agree(kw, monkeypatch):
    cfg = MoeTraceConfig(**kw)
    fast = sample_routing(cfg, 0, 2, 1)
    monkeypatch.setattr(moe, "_uniform_layout", lambda cfg, node: None)
    general = sample_routing(cfg, 0, 2, 1)
    monkeypatch.setattr(moe, "CHUNK", 1000)  # chunk boundaries change nothing
    chunked = sample_routing(cfg, 0, 2, 1)
    assert np.array_equal(_sets(fast), _sets(general)) and np.array_equal(_sets(fast), _sets(chunked))


@pytest.mark.parametrize("copies", ["per_gpu", "per_expert"])
def test_counts_match_the_dense_token_gpu_matrix(copies):
    cfg = MoeTraceConfig(model="deepseek-v3", ep_size=32, gpus=64, tokens_per_gpu=50, copies=copies)
    for group in (0, 1):
        routing = sample_routing(cfg, 0, 0, group)
        h = _hits(cfg, routing)
        dests = _dest_gpus(cfg, routing)
        assert np.array_equal(_copies(cfg, routing, dests), h.reshape(cfg.ep_size, cfg.tokens_per_gpu, -1).sum(axis=1))
        assert np.array_equal(rank_receive_counts(cfg, routing, dests), h.sum(axis=0))
        node = _expert_node(cfg, group)[routing]
        assert np.array_equal(nodes_per_token(cfg, routing, group, dests), [len(set(r)) for r in node.tolist()])


@pytest.mark.parametrize("order", ["staggered", "random", "ascending"])
def test_send_order_index_is_the_documented_sort(order):
    cfg = MoeTraceConfig(model="deepseek-v3", ep_size=16, send_order=order, seed=4)
    rng = np.random.default_rng(1)
    legs = [(int(a), int(b), 1, int(j), False) for a, b, j in rng.integers(0, 16, (300, 3)) % [16, 16, 3]]
    g = cfg.ep_size
    key = np.random.default_rng([cfg.seed, 5381, 0, 1, 2, moe._LEGS["combine"]]).random((g, g))
    rank = {"random": lambda a, b: key[a, b], "ascending": lambda a, b: b,
            "staggered": lambda a, b: (b - a) % g}[order]
    ref = sorted(legs, key=lambda x: (x[0], x[3], rank(x[0], x[1])))
    assert send_order(cfg, legs, "combine", (0, 1, 2)) == ref
    a, b, j = (np.array([x[i] for x in legs]) for i in (0, 1, 3))
    assert [legs[i] for i in send_order_index(cfg, a, b, j, "combine", (0, 1, 2))] == ref


def test_columns_csr_is_the_concatenation_of_the_pieces():
    rng = np.random.default_rng(2)
    shared = [list(rng.integers(0, 100, n)) for n in (0, 1, 5, 9)]
    cols, expect = _Columns(), []
    for i in range(200):
        if i % 50 < 25:
            deps = tuple(shared[x] if x < 4 else (int(x),) for x in rng.integers(0, 6, rng.integers(1, 4)))
            cols.add(i, i + 1, 8, 0, 0, 0, deps, 3)
            expect.append([d for p in deps for d in p])
        else:
            m = 3
            slots = rng.integers(-1, 4, (m, _Columns.SLOTS))
            piece = [cols.piece(p) for p in shared]
            sl = np.where(slots >= 0, np.array(piece + [-1])[np.maximum(slots, 0)], -1)
            cols.add_block(np.arange(m), np.arange(m) + 1, 8, 0, 0, 0, 3, sl)
            for row in slots:
                expect.append([d for x in row if x >= 0 for d in shared[x]])
    t = cols.trace(["moe.l0.mb0.dispatch"], 0)
    _, ptr, dep = t.columns()
    assert len(t) == len(expect) == 400 and len(ptr) == 401
    assert [dep[ptr[i]:ptr[i + 1]].tolist() for i in range(400)] == expect


FLAT_CASES = [
    dict(model="deepseek-v3", ep_size=32, gpus=64, tokens_per_gpu=64, layers=2, microbatches=2, layer_gap_ps=700,
         passes="forward_backward"),
    dict(model="deepseek-v3", ep_size=16, gpus=32, tokens_per_gpu=32, microbatches=3, overlap="a2a_1f1b",
         send_order="random", connections="per_message"),
    dict(model="gpt-oss-20b", ep_size=8, gpus=16, tokens_per_gpu=64, copies="per_expert", send_order="ascending",
         popularity="zipf", zipf_s=1.1, layers=2),
]


@pytest.mark.parametrize("kw", FLAT_CASES)
def test_array_built_groups_equal_the_per_leg_loop(kw, monkeypatch):
    """_direct_group against the general per-leg loop of generate_moe_trace on the same plans."""
    cfg = MoeTraceConfig(**kw)
    fast = generate_moe_trace(cfg).trace
    monkeypatch.setattr(moe._Plan, "direct_only", property(lambda self: False))
    loop = generate_moe_trace(cfg).trace
    (cf, pf, df), (cl, pl, dl) = fast.columns(), loop.columns()
    assert len(fast) == len(loop) > 0
    for c in cf:
        assert np.array_equal(cf[c], cl[c]), c
    assert np.array_equal(pf, pl) and np.array_equal(df, dl)


def test_same_config_and_seed_give_the_same_trace_and_another_seed_another():
    cfg = MoeTraceConfig(model="deepseek-v3", ep_size=64, gpus=128, tokens_per_gpu=64, seed=3)
    a, b = generate_moe_trace(cfg).trace.columns(), generate_moe_trace(cfg).trace.columns()
    c = generate_moe_trace(cfg.model_copy(update=dict(seed=4))).trace.columns()
    assert all(np.array_equal(a[0][k], b[0][k]) for k in a[0]) and np.array_equal(a[2], b[2])
    assert not np.array_equal(a[0]["size_bytes"], c[0]["size_bytes"])


@pytest.mark.parametrize("kw", [dict(model="gpt-oss-20b", ep_size=16), dict(model="deepseek-v3", ep_size=64)])
def test_route_uniform_when_the_best_left_out_is_a_non_record(kw):
    """Tokens whose k-th and (k+1)-th experts straddle a non-record value nr: the k-th at nr + 1, one
    at nr, one at nr - 1 (whose noise is above nr's), the k - 1 best far above, the rest far below."""
    cfg = MoeTraceConfig(**kw)
    node = _expert_node(cfg, 0)
    nr = _non_records().astype(np.int64)
    rng = np.random.default_rng(11)
    t, e, k = len(nr), cfg.experts, cfg.top_k
    v = rng.integers(0, 1 << 20, (t, e))                    # far below
    cols = np.argsort(rng.random((t, e)), axis=1)[:, :k + 2]  # distinct experts per token
    rows = np.arange(t)[:, None]
    v[rows, cols[:, :k - 1]] = (1 << 24) - 1 - rng.integers(0, 1000, (t, k - 1))
    v[rows, cols[:, k - 1:]] = np.stack([nr + 1, nr, nr - 1], axis=1)
    bits = (v << 8).astype(np.uint32)
    lw = np.log(1.0 / e)
    ref = _route(cfg, np.full(e, lw), _gumbel_of_bits(bits), node)
    got = _route_uniform(cfg, np.float32(lw), bits.copy(), node, _uniform_layout(cfg, node))
    assert np.array_equal(_sets(got), _sets(ref))
