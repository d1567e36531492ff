"""MoE trace generator (fabricsim/traces/moe.py, ``fabricsim trace moe``): bytes after
de-duplication, node-limited routing, imbalance tuning, determinism, dependencies, replay, CLI."""
from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pytest

import fabricsim
from fabricsim.cli import main
from fabricsim.errors import ConfigError
from fabricsim.traces import check_trace, read_trace
from fabricsim.traces.moe import (MoeTraceConfig, generate_moe_trace, imbalance_of, load_moe_config,
                                  sample_routing)


def small(**kw) -> MoeTraceConfig:
    base = dict(model="custom", hidden_size=64, experts=16, top_k=4, ep_size=8, gpus=16, gpus_per_node=4,
                tokens_per_gpu=32, layers=2, microbatches=2, seed=3, popularity="zipf", zipf_s=1.0)
    base.update(kw)
    return MoeTraceConfig(**base)


def test_presets_fill_model_values():
    c = MoeTraceConfig(model="deepseek-v3", ep_size=64, gpus=64)
    assert (c.hidden_size, c.experts, c.top_k, c.max_nodes_per_token) == (7168, 256, 8, 4)
    assert (c.dispatch_bytes_per_token, c.combine_bytes_per_token, c.experts_per_gpu) == (7392, 14336, 4)
    assert MoeTraceConfig(model="deepseek-v3", ep_size=64, max_nodes_per_token=None).max_nodes_per_token is None
    g = MoeTraceConfig(model="gpt-oss-20b", ep_size=8)
    assert (g.experts, g.top_k, g.dispatch_bytes_per_token, g.combine_bytes_per_token, g.gpus) == (32, 4, 5760, 5760, 8)
    assert g.max_nodes_per_token is None


@pytest.mark.parametrize("kw, field", [
    (dict(ep_size=48), "ep_size"), (dict(gpus=100), "gpus"), (dict(model="nope"), "model"),
    (dict(popularity="imbalance"), "imbalance"), (dict(model="custom", experts=8), "hidden_size"),
    (dict(tokens_per_gpu=0), "tokens_per_gpu"), (dict(bogus=1), "bogus"),
])
def test_bad_values_name_the_field(kw, field):
    data = dict(model="deepseek-v3", ep_size=64)
    data.update(kw)
    with pytest.raises(ConfigError) as e:
        load_moe_config(data, "c.yaml")
    assert e.value.field == field and e.value.exit_code == 2
    assert "\n" not in str(e.value)


def test_dispatch_bytes_equal_deduplicated_copies():
    cfg = small(microbatches=1)
    gen = generate_moe_trace(cfg)
    expected_d = expected_c = 0
    for layer in range(cfg.layers):
        for group in range(cfg.groups):
            r = sample_routing(cfg, layer, 0, group)
            src = np.arange(r.shape[0]) // cfg.tokens_per_gpu
            for t in range(r.shape[0]):
                dests = {int(e) % cfg.ep_size for e in r[t]} - {int(src[t])}
                expected_d += len(dests) * cfg.dispatch_bytes_per_token
                expected_c += len(dests) * cfg.combine_bytes_per_token
    assert expected_d > 0
    assert gen.bytes_by_phase == {"dispatch": expected_d, "combine": expected_c}
    # some token had two experts on one GPU: de-duplication mattered
    r = sample_routing(cfg, 0, 0, 0)
    assert any(len({int(e) % cfg.ep_size for e in row}) < cfg.top_k for row in r)
    # messages stay inside their EP group, never to self
    for rec in gen.trace.records:
        assert rec.src // cfg.ep_size == rec.dst // cfg.ep_size and rec.src != rec.dst


def test_node_limited_routing_never_exceeds_m_nodes():
    cfg = MoeTraceConfig(model="deepseek-v3", ep_size=64, gpus=64, tokens_per_gpu=64, popularity="zipf",
                         zipf_s=1.2, max_nodes_per_token=3)
    r = sample_routing(cfg, 0, 0, 0)
    nodes = (r % cfg.ep_size) // cfg.gpus_per_node
    per_token = np.array([len(set(row)) for row in nodes.tolist()])
    assert per_token.max() <= 3 and per_token.max() == 3
    assert all(len(set(row)) == cfg.top_k for row in r.tolist())  # distinct experts
    free = MoeTraceConfig(model="deepseek-v3", ep_size=64, tokens_per_gpu=64, max_nodes_per_token=None)
    nodes = (sample_routing(free, 0, 0, 0) % 64) // 8
    assert max(len(set(row)) for row in nodes.tolist()) > 3


@pytest.mark.parametrize("target", [0.5, 2.0])
def test_measured_imbalance_matches_the_request(target):
    cfg = MoeTraceConfig(model="gpt-oss-20b", ep_size=16, tokens_per_gpu=4096, popularity="imbalance",
                         imbalance=target, seed=11)
    gen = generate_moe_trace(cfg)
    measured = gen.summary()["imbalance_mean"]
    assert abs(measured - target) <= 0.15 * target
    counts = np.bincount(sample_routing(cfg, 0, 0, 0).ravel(), minlength=cfg.experts)
    assert imbalance_of(counts) == pytest.approx(measured)


def test_same_seed_same_trace_other_seed_differs():
    a = generate_moe_trace(small()).trace.records
    b = generate_moe_trace(small()).trace.records
    c = generate_moe_trace(small(seed=4)).trace.records
    assert a == b
    assert a != c


def test_dependencies_acyclic_and_shaped():
    cfg = small()
    t = check_trace(generate_moe_trace(cfg).trace)
    by_id = {r.id: r for r in t.records}
    g = nx.DiGraph((d, r.id) for r in t.records for d in r.deps)
    assert nx.is_directed_acyclic_graph(g)
    for r in t.records:
        if r.phase == "combine":
            assert r.deps and r.gap_ps > 0
            assert all(by_id[d].phase == "dispatch" and by_id[d].dst == r.src and by_id[d].layer == r.layer
                       and by_id[d].microbatch == r.microbatch for d in r.deps)
            assert r.op == f"moe.l{r.layer}.mb{r.microbatch}.combine"
        elif (r.layer, r.microbatch) != (0, 0):
            assert r.deps and all(by_id[d].phase == "combine" and by_id[d].dst == r.src for d in r.deps)
        else:
            assert not r.deps


def test_small_trace_replays_to_completion(tmp_path):
    cfg = small(gpus=8, ep_size=8, tokens_per_gpu=8, layers=2, microbatches=1, flops_per_token=1e6)
    from fabricsim.traces import write_trace
    p = write_trace(generate_moe_trace(cfg).trace, tmp_path / "moe.parquet")
    sc = {"name": "moe", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 2},
          "traffic": {"pattern": "trace", "path": str(p)}, "routing": {"policy": "ecmp"},
          "simulation": {"seed": 1, "time_limit": "10ms"}}
    res = fabricsim.run(sc)
    m = res.messages
    assert len(m) == len(read_trace(p)) and m["completed"].all()


def test_cli_happy_path_and_bad_value(tmp_path, runner):
    out = tmp_path / "moe.parquet"
    res = runner.invoke(main, ["trace", "moe", "-o", str(out), "--preset", "deepseek-v3", "--gpus", "16",
                               "--ep-size", "16", "--tokens-per-gpu", "32", "--layers", "2", "--imbalance", "0.5",
                               "--seed", "2"])
    assert res.exit_code == 0, res.output
    assert "messages" in res.stdout and "imbalance" in res.stdout
    t = read_trace(out)
    assert {r.phase for r in t.records} == {"dispatch", "combine"}
    assert {r.op for r in t.records} >= {"moe.l0.mb0.dispatch", "moe.l1.mb0.combine"}
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: gpt-oss-20b\nep_size: 8\ntokens_per_gpu: 16\n")
    res = runner.invoke(main, ["trace", "moe", "-o", str(tmp_path / "m.csv"), "--config", str(cfg), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["gpus"] == 8
    bad = runner.invoke(main, ["trace", "moe", "-o", str(out), "--preset", "deepseek-v3", "--ep-size", "48"])
    assert bad.exit_code == 2
    assert bad.stderr.strip().splitlines() == [bad.stderr.strip()] and "--ep-size" in bad.stderr
    cfg.write_text("model: gpt-oss-20b\nep_size: 8\nlayers: 0\n")
    bad = runner.invoke(main, ["trace", "moe", "-o", str(out), "--config", str(cfg)])
    assert bad.exit_code == 2 and f"{cfg}:3: layers" in bad.stderr


# --------------------------------------------------------------------------- hierarchical / backward / overlap

def _node(cfg, gpu):
    return gpu // cfg.gpus_per_node


def _inter_node_bytes(cfg, records):
    return sum(r.size_bytes for r in records if _node(cfg, r.src) != _node(cfg, r.dst))


def test_hierarchical_scale_out_bytes_rail_aligned_and_below_flat():
    cfg = small(dispatch="hierarchical", microbatches=1, gpus=16, ep_size=16, gpus_per_node=4, experts=32)
    recs = generate_moe_trace(cfg).trace.records
    # independent count: distinct (token, destination node) pairs, destination node != the sender's node
    pairs = 0
    for layer in range(cfg.layers):
        for group in range(cfg.groups):
            r = sample_routing(cfg, layer, 0, group)
            for t in range(r.shape[0]):
                src = group * cfg.ep_size + t // cfg.tokens_per_gpu
                nodes = {_node(cfg, group * cfg.ep_size + int(e) % cfg.ep_size) for e in r[t]}
                pairs += len(nodes - {_node(cfg, src)})
    assert pairs > 0
    inter = [r for r in recs if _node(cfg, r.src) != _node(cfg, r.dst)]
    assert sum(r.size_bytes for r in inter if r.phase == "dispatch") == pairs * cfg.dispatch_bytes_per_token
    assert sum(r.size_bytes for r in inter if r.phase == "combine") == pairs * cfg.combine_bytes_per_token
    assert all(r.src % cfg.gpus_per_node == r.dst % cfg.gpus_per_node for r in inter)  # rail-aligned
    flat = generate_moe_trace(cfg.model_copy(update=dict(dispatch="flat"))).trace.records
    assert _inter_node_bytes(cfg, recs) < _inter_node_bytes(cfg, flat)
    # every token copy still reaches each destination GPU: intra-node bytes into each GPU >= flat's
    by_id = {r.id: r for r in recs}
    for r in recs:
        if r.phase == "dispatch" and _node(cfg, r.src) == _node(cfg, r.dst) and r.deps and r.layer == 0:
            # a forward over NVLink waits on the scale-out copies into the relay
            assert all(by_id[d].dst == r.src and _node(cfg, by_id[d].src) != _node(cfg, r.src) for d in r.deps)
    g = nx.DiGraph((d, r.id) for r in recs for d in r.deps)
    assert nx.is_directed_acyclic_graph(g)


def test_hierarchical_delivers_every_copy():
    # copies received per GPU for its experts: flat and hierarchical deliver the same (token, GPU) pairs
    cfg = small(dispatch="hierarchical", microbatches=1, layers=1)
    recs = generate_moe_trace(cfg).trace.records
    flat = generate_moe_trace(cfg.model_copy(update=dict(dispatch="flat"))).trace.records
    rx_flat, rx_hier = {}, {}
    for recs_, rx in ((flat, rx_flat), (recs, rx_hier)):
        for r in recs_:
            if r.phase == "dispatch":
                rx[r.dst] = rx.get(r.dst, 0) + r.size_bytes
    # each (token, expert GPU) copy arrives once, direct or relayed; relays also receive copies they forward
    assert set(rx_hier) == set(rx_flat) and all(rx_hier[d] >= rx_flat[d] for d in rx_flat)
    assert sum(rx_hier.values()) > sum(rx_flat.values())
    with pytest.raises(ConfigError) as e:
        load_moe_config(dict(model="custom", hidden_size=64, experts=12, top_k=2, ep_size=12, gpus_per_node=8,
                             dispatch="hierarchical"))
    assert e.value.field == "dispatch"


def test_forward_backward_doubles_and_chains():
    cfg = small()
    fwd = generate_moe_trace(cfg)
    fb = generate_moe_trace(cfg.model_copy(update=dict(passes="forward_backward")))
    assert len(fb.trace) == 2 * len(fwd.trace)
    assert sum(fb.bytes_by_phase.values()) == 2 * sum(fwd.bytes_by_phase.values())
    recs = check_trace(fb.trace).records
    g = nx.DiGraph((d, r.id) for r in recs for d in r.deps)
    assert nx.is_directed_acyclic_graph(g)
    by_id = {r.id: r for r in recs}
    last = cfg.layers - 1
    first_bwd = [r for r in recs if r.op == f"moe.l{last}.mb0.bwd.dispatch"]
    assert first_bwd and all(r.deps for r in first_bwd)
    assert all(by_id[d].op == f"moe.l{last}.mb0.combine" for r in first_bwd for d in r.deps)
    # backward layers run in reverse: layer 0's backward dispatch follows layer 1's backward combine
    assert all(by_id[d].op == "moe.l1.mb0.bwd.combine"
               for r in recs if r.op == "moe.l0.mb0.bwd.dispatch" for d in r.deps)
    # backward dispatch carries combine-sized gradients, backward combine dispatch-sized ones
    fb2 = generate_moe_trace(small(passes="forward_backward", combine_bytes_per_token=256))
    bwd_d = sum(r.size_bytes for r in fb2.trace.records if r.op.endswith("bwd.dispatch"))
    fwd_c = sum(r.size_bytes for r in fb2.trace.records if r.op.endswith(".combine") and ".bwd." not in r.op)
    assert bwd_d == fwd_c
    # next microbatch waits for the whole backward without overlap
    assert all(by_id[d].op == "moe.l0.mb0.bwd.combine"
               for r in recs if r.op == "moe.l0.mb1.dispatch" for d in r.deps)


def test_overlap_drops_previous_microbatch_combine_deps():
    cfg = small(microbatches=3, overlap="a2a_1f1b")
    recs = check_trace(generate_moe_trace(cfg).trace).records
    by_id = {r.id: r for r in recs}
    assert nx.is_directed_acyclic_graph(nx.DiGraph((d, r.id) for r in recs for d in r.deps))
    for r in recs:
        if r.phase != "dispatch":
            continue
        for d in r.deps:
            dep = by_id[d]
            if dep.microbatch == r.microbatch:  # its own previous layer
                assert dep.phase == "combine" and dep.layer == r.layer - 1 and dep.dst == r.src
            elif dep.microbatch == r.microbatch - 1:  # the previous microbatch's dispatch of the same layer
                assert dep.phase == "dispatch" and dep.layer == r.layer and dep.src == r.src
            else:  # two microbatches back: its combine of the same layer (at most two in flight)
                assert dep.microbatch == r.microbatch - 2 and dep.phase == "combine" and dep.layer == r.layer
    assert any(by_id[d].microbatch == 0 for r in recs if r.op == "moe.l1.mb1.dispatch" for d in r.deps)
    assert any(by_id[d].microbatch == 0 for r in recs if r.op == "moe.l0.mb2.dispatch" for d in r.deps)


def _replay_duration(tmp_path, cfg) -> int:
    from fabricsim.traces import write_trace
    p = write_trace(generate_moe_trace(cfg).trace, tmp_path / f"moe_{cfg.overlap}.parquet")
    sc = {"name": "moe", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 2},
          "traffic": {"pattern": "trace", "path": str(p)}, "routing": {"policy": "ecmp"},
          "simulation": {"seed": 1, "time_limit": "50ms"}}
    res = fabricsim.run(sc)
    assert res.messages["completed"].all()
    return res.summary["pattern"]["duration_ps"]


def test_overlap_shortens_replay(tmp_path):
    # expert compute of about 13 us per step: comparable to the all-to-all time
    cfg = small(gpus=8, ep_size=8, tokens_per_gpu=16, layers=2, microbatches=4, flops_per_token=1e8)
    none = _replay_duration(tmp_path, cfg)
    over = _replay_duration(tmp_path, cfg.model_copy(update=dict(overlap="a2a_1f1b")))
    assert over < 0.8 * none


def test_cli_dispatch_passes_overlap(tmp_path, runner):
    out = tmp_path / "moe.parquet"
    res = runner.invoke(main, ["trace", "moe", "-o", str(out), "--preset", "deepseek-v3", "--gpus", "16",
                               "--ep-size", "16", "--tokens-per-gpu", "16", "--dispatch", "hierarchical",
                               "--passes", "forward_backward", "--overlap", "a2a_1f1b", "--microbatches", "2",
                               "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert (d["dispatch"], d["passes"], d["overlap"]) == ("hierarchical", "forward_backward", "a2a_1f1b")
    assert any(".bwd." in r.op for r in read_trace(out).records)
    bad = runner.invoke(main, ["trace", "moe", "-o", str(out), "--dispatch", "ring"])
    assert bad.exit_code == 2 and "--dispatch" in bad.stderr
