"""fabricsim plan: the step model's invariants, identical groups simulated once, outputs, bad plans.

Every plan here is small (a custom 4-layer MoE on the 32-GPU cluster_small_draw preset, or a few
NVL72 racks) so the file runs in seconds; the DeepSeek-V3 GB300 plan is benchmarks/bench_plan.py.
"""
from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
from click.testing import CliRunner

from fabricsim.cli import main
from fabricsim.errors import ConfigError
from fabricsim.plan import comm, runner
from fabricsim.plan.layout import Layout
from fabricsim.plan.model import ModelConfig
from fabricsim.plan.spec import COMM_TYPES, load_plan
from fabricsim.plan.step import breakdown

from conftest import parse_error_line

SMALL = {
    "name": "small",
    "model": {"preset": "custom", "layers": 4, "hidden_size": 1024, "experts": 16, "top_k": 2, "heads": 8,
              "vocab_size": 32000},
    "parallelism": {"tp": 2, "pp": 2, "ep": 4},
    "batch": {"global_batch": 64, "micro_batch": 1, "seq_len": 2048},
    "clusters": [{"topology": "cluster_small_draw", "gpus": [16, 32]}],
    "fabric": {"routing": "ecmp"},
    "compute": {"peak_tflops": 989, "mfu": 0.4},
    "seed": 3,
}


def plan(**changes):
    d = copy.deepcopy(SMALL)
    for k, v in changes.items():
        d[k] = v
    spec, src = load_plan(d)
    return spec, runner.run_plan(spec, src)


@pytest.fixture(scope="module")
def small():
    return plan()


# ---------------------------------------------------------------- invariants

def test_step_is_compute_plus_exposed_communication(small):
    _, res = small
    for r in res.rows:
        exposed = sum(r[f"{t}_exposed_s"] for t in COMM_TYPES)
        assert r["exposed_comm_s"] == pytest.approx(exposed, rel=1e-12)
        assert r["comm_s"] == pytest.approx(sum(r[f"{t}_s"] for t in COMM_TYPES), rel=1e-12)
        assert r["step_s"] == pytest.approx(r["compute_s"] + r["exposed_comm_s"], rel=1e-12)
        assert r["compute_s"] == pytest.approx(r["compute_busy_s"] + r["bubble_s"], rel=1e-12)
        assert r["tokens_per_s_per_gpu"] == pytest.approx(r["tokens_per_step"] / r["step_s"] / r["gpus"])
        # no overlap: everything is exposed, and every type this plan has took time on the fabric
        for t in COMM_TYPES:
            assert r[f"{t}_exposed_s"] == r[f"{t}_s"] > 0
        # expert all-to-all bytes per GPU as simulated: fewer than top_k copies of each of the T tokens
        # (some experts are on the sender's own GPU), forward and backward, 2 x hidden bytes per copy
        mdl, T = SMALL["model"], SMALL["batch"]["seq_len"] // SMALL["parallelism"]["tp"]
        layers_per_stage = mdl["layers"] // SMALL["parallelism"]["pp"]
        most = r["microbatches"] * layers_per_stage * 2 * T * mdl["top_k"] * 2 * mdl["hidden_size"]
        assert most / 2 < r["ep_dispatch_bytes_per_gpu"] < most


def test_doubling_dp_at_fixed_global_batch_halves_compute_per_gpu(small):
    _, res = small
    a, b = sorted(res.rows, key=lambda r: r["gpus"])
    assert (a["dp"], b["dp"]) == (4, 8)
    assert b["microbatches"] * 2 == a["microbatches"]
    assert b["compute_busy_s"] == pytest.approx(a["compute_busy_s"] / 2, rel=1e-12)
    # the expert all-to-all per GPU halves too (half the microbatches, the same groups)
    assert b["ep_dispatch_s"] == pytest.approx(a["ep_dispatch_s"] / 2, rel=1e-9)
    assert b["scaling_efficiency"] == pytest.approx(b["tokens_per_s_per_gpu"] / a["tokens_per_s_per_gpu"])
    assert a["scaling_efficiency"] == 1.0
    for r in (a, b):     # what the fabric costs: the efficiency with no exposed communication, minus the real one
        assert r["perfect_fabric_scaling_efficiency"] - r["scaling_efficiency"] == pytest.approx(
            (r["tokens_per_step"] / r["compute_s"] - r["tokens_per_step"] / r["step_s"]) / r["gpus"]
            / a["tokens_per_s_per_gpu"])
        assert r["fabric_efficiency"] == pytest.approx(r["compute_s"] / r["step_s"]) and r["fabric_efficiency"] < 1


@pytest.mark.parametrize("pp", [1, 2])
@pytest.mark.parametrize("peak_tflops", [100, 1e6])   # compute longer than communication, then shorter
def test_perfect_overlap_exposes_max_of_zero_and_comm_minus_compute(peak_tflops, pp):
    _, res = plan(overlap={"model": "fraction", "fraction": 1.0},
                  compute={"peak_tflops": peak_tflops, "mfu": 0.4}, parallelism=dict(SMALL["parallelism"], pp=pp))
    for r in res.rows:
        # communication hides behind the busy compute (not the pipeline bubble: no work to overlap)
        want = max(0.0, r["comm_s"] - r["compute_busy_s"])
        assert r["exposed_comm_s"] == pytest.approx(want, rel=1e-9, abs=1e-15)
        if pp == 1:
            assert r["bubble_s"] == 0 and r["compute_s"] == r["compute_busy_s"]
    regimes = {r["comm_s"] > r["compute_busy_s"] for r in res.rows}
    assert regimes == ({False} if peak_tflops == 100 else {True})


def test_breakdown_shares_the_compute_between_types():
    class Half:
        def fraction_of(self, kind, m):
            return 0.5
    r = breakdown(busy_s=1.0, pp=2, vpp=1, microbatches=4, comm_s={"tp": 4.0, "pp_p2p": 0.0}, overlap=Half())
    assert r["bubble_s"] == 0.25
    assert r["tp_exposed_s"] == pytest.approx(3.0)      # 2 s may hide, only 1 s of compute to hide behind
    r = breakdown(busy_s=10.0, pp=1, vpp=1, microbatches=4, comm_s={"tp": 4.0}, overlap=Half())
    assert r["tp_exposed_s"] == pytest.approx(2.0)


def test_a2a_1f1b_hides_all_but_one_microbatch_of_expert_traffic():
    _, res = plan(overlap={"model": "a2a_1f1b"})
    for r in res.rows:
        m = r["microbatches"]
        assert r["ep_dispatch_exposed_s"] == pytest.approx(r["ep_dispatch_s"] / m, rel=1e-9)
        assert r["dp_reduce_scatter_exposed_s"] == r["dp_reduce_scatter_s"]


# ---------------------------------------------------------------- identical groups

def test_identical_groups_are_simulated_once(small, monkeypatch):
    import fabricsim.api as api
    calls = []
    real = api.run

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)
    monkeypatch.setattr(api, "run", counting)
    spec, res = plan()
    assert res.simulations == len(res.patterns)
    assert len(calls) == res.runs == 1           # every distinct pattern of the topology in one engine run
    # every simulated pattern has a key of its own, and some stand for several groups
    assert len({p["signature"] for p in res.patterns}) == len(res.patterns)
    n_patterns = sum(len({id(p) for p in it.patterns}) for items in res.items.values() for it in items
                     if it.type != "ep_combine")          # ep_combine shares ep_dispatch's patterns
    assert res.simulations < n_patterns
    assert any(p["reused"] > 0 for p in res.patterns)


def test_groups_at_the_same_relative_place_share_a_key():
    spec, src = load_plan(dict(copy.deepcopy(SMALL), clusters=[{"topology": "su_576", "gpus": 32}]))
    cases, built = runner.check(spec, src)
    sim = runner.PatternSimulator(spec, next(iter(built.values())), src)
    a2a = lambda gpus: comm.Pattern("a2a", gpus=tuple(gpus), tokens_per_gpu=8)
    assert sim.signature(a2a(range(0, 8))) == sim.signature(a2a(range(72, 80)))      # rack 0 and rack 1
    assert sim.signature(a2a(range(0, 8))) == sim.signature(a2a(range(8, 16)))       # same rails, same rack
    assert sim.signature(a2a(range(0, 8))) != sim.signature(a2a(range(68, 76)))      # straddles two racks
    msgs = lambda pairs, size=100: comm.Pattern("messages", tuple((s, d, size) for s, d in pairs))
    assert sim.signature(msgs([(0, 72)])) == sim.signature(msgs([(72, 144)]))
    assert sim.signature(msgs([(0, 72)])) != sim.signature(msgs([(0, 72)], 200))
    assert sim.signature(msgs([(0, 1)])) != sim.signature(msgs([(0, 72)]))


def test_a_group_straddling_two_racks_costs_more_than_one_inside_a_rack():
    spec, src = load_plan(dict(copy.deepcopy(SMALL), clusters=[{"topology": "su_576", "gpus": 32}]))
    _, built = runner.check(spec, src)
    sim = runner.PatternSimulator(spec, next(iter(built.values())), src)
    inside = sim.times(comm.Pattern("a2a", gpus=tuple(range(0, 4)), tokens_per_gpu=256), "ep_dispatch")
    across = sim.times(comm.Pattern("a2a", gpus=(70, 71, 72, 73), tokens_per_gpu=256), "ep_dispatch")
    assert across["dispatch"] > inside["dispatch"] > 0
    assert sim.simulations == 2


# ---------------------------------------------------------------- derivation, model, layout

def test_layout_groups_partition_the_ranks():
    lay = Layout(gpus=48, tp=2, cp=1, dp=6, pp=4, ep=3, vpp=1, microbatches=1)
    for groups in (lambda p: lay.tp_groups(p), lay.dp_groups, lay.ep_groups, lay.expert_dp_groups):
        seen = sorted(g for p in range(4) for grp in groups(p) for g in grp)
        assert seen == list(range(48))
    assert all(d - s == 12 for s, d in lay.pp_pairs(0))


def test_data_parallel_bytes_follow_the_parameter_counts():
    spec, _ = load_plan(copy.deepcopy(SMALL))
    lay = Layout.of(spec, 32, "<t>", "clusters[0].gpus")
    items = {(it.type, it.part): it for it in comm.derive(spec, lay)}
    m = spec.model
    rs = items[("dp_reduce_scatter", "dense")]
    shard = m.dense_params() / (lay.tp * lay.pp) * m.gradient_bytes
    n = lay.dp
    assert rs.group_size == n
    assert rs.bytes_per_gpu == pytest.approx(shard * (n - 1) / n, rel=1e-3)   # a ring sends (n-1)/n of it
    ag = items[("dp_all_gather", "expert")]
    assert ag.group_size == lay.dp // lay.ep
    expert_shard = m.routed_expert_params() / (lay.ep * lay.tp * lay.pp) * m.param_bytes
    assert ag.bytes_per_gpu == pytest.approx(expert_shard * (ag.group_size - 1) / ag.group_size, rel=1e-3)
    assert items[("pp_p2p", "")].repeat == 2 * lay.microbatches
    assert items[("pp_p2p", "")].bytes_per_gpu == 2 * lay.microbatches * (
        spec.batch.seq_len // lay.tp * m.hidden_size * m.activation_bytes)
    assert items[("tp", "")].repeat == lay.microbatches * 2 * 4 * 2 * (lay.tp - 1)


def test_model_facts_come_from_the_trace_presets(monkeypatch):
    from fabricsim.traces import moe
    m = ModelConfig(preset="deepseek-v3")
    assert (m.hidden_size, m.experts, m.top_k, m.expert_ffn_size) == (7168, 256, 8, 2048)
    assert round(m.total_params() / 1e9) == 671
    assert m.dispatch_bytes_per_token == moe.PRESETS["deepseek-v3"]["dispatch_bytes_per_token"]
    monkeypatch.setitem(moe.PRESETS, "deepseek-v3", dict(moe.PRESETS["deepseek-v3"], hidden_size=100))
    assert ModelConfig(preset="deepseek-v3").hidden_size == 100      # one source of truth: not a copy
    g = ModelConfig(preset="gpt-oss-20b")
    assert 20e9 < g.total_params() < 22e9


# ---------------------------------------------------------------- calibration

def test_calibration_recovers_the_rate_that_gave_the_measurement(small):
    spec, res = small
    at16 = next(r for r in res.rows if r["gpus"] == 16)
    _, cal = plan(compute={"peak_tflops": 989, "mfu": 0.4,
                           "calibrate": {"gpus": 16, "tokens_per_s_per_gpu": at16["tokens_per_s_per_gpu"]}})
    assert cal.rows[0]["flops_per_s_per_gpu"] == pytest.approx(989e12 * 0.4, rel=1e-6)
    assert cal.rows[1]["step_s"] == pytest.approx(res.rows[1]["step_s"], rel=1e-6)
    assert cal.assumptions["flops_source"].startswith("calibrated")


def test_calibration_above_what_the_fabric_allows_is_refused():
    with pytest.raises(ConfigError) as e:
        plan(compute={"calibrate": {"gpus": 16, "tokens_per_s_per_gpu": 1e12}})
    assert e.value.field == "compute.calibrate.tokens_per_s_per_gpu"


# ---------------------------------------------------------------- CLI, outputs, bad plans

def _write(tmp_path, data, name="p.yaml"):
    import yaml
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    return p


def test_cli_writes_every_table_with_units_assumptions_and_seed(tmp_path):
    p = _write(tmp_path, dict(copy.deepcopy(SMALL), outputs={"formats": ["csv", "parquet", "json"]},
                              token_budget=1e11))
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["plan", str(p), "-o", str(out), "--seed", "7"])
    assert res.exit_code == 0, res.output
    assert "tok/s/GPU" in res.stdout
    df = pd.read_csv(out / "plan.csv")
    assert list(df["gpus"]) == [16, 32]
    for col in ("step_s", "compute_s", "compute_busy_s", "bubble_s", "exposed_comm_s", "tokens_per_s_per_gpu",
                "scaling_efficiency", "time_to_budget_s", "seed", "routing", "overlap_model",
                "flops_per_s_per_gpu", "dp_bucket_bytes", "dispatch_bytes_per_token"):
        assert col in df.columns, col
    for t in COMM_TYPES:
        assert {f"{t}_s", f"{t}_exposed_s", f"{t}_bytes_per_gpu"} <= set(df.columns)
    assert (df["seed"] == 7).all()
    assert df["time_to_budget_s"].iloc[0] == pytest.approx(1e11 / df["tokens_per_s"].iloc[0])
    pq = pd.read_parquet(out / "plan.parquet")
    assert list(pq.columns) == list(df.columns)
    doc = json.loads((out / "plan.json").read_text())
    assert doc["assumptions"]["seed"] == 7 and doc["assumptions"]["not_modelled"]
    assert len(doc["rows"]) == 2 and doc["simulations"] == len(doc["patterns"])
    pats = pd.read_csv(out / "patterns.csv")
    assert {"signature", "type", "messages", "total_bytes", "time_s", "reused"} <= set(pats.columns)
    assert (out / "scaling.png").stat().st_size > 0


BAD = [
    ({"bogus": 1}, "bogus"),
    ({"clusters": [{"topology": "gb300_2048_4x20g"}]}, "clusters[0].topology"),
    ({"clusters": [{"topology": "cluster_small_draw", "gpus": [16, 30]}]}, "clusters[0].gpus[1]"),
    ({"clusters": [{"topology": "cluster_small_draw", "gpus": 64}]}, "clusters[0].gpus"),
    ({"clusters": [{"topology": {"kind": "cluster", "domain": "hgx8", "nodes": 0}}]}, "clusters[0].topology.nodes"),
    ({"parallelism": {"tp": 2, "pp": 2, "ep": 3}}, "parallelism.ep"),
    ({"batch": {"global_batch": 6, "seq_len": 2048}}, "batch.global_batch"),
    ({"fabric": {"routing": "ecmpp"}}, "fabric.routing"),
    ({"fabric": {"routing": "pinned"}}, "fabric.routing"),          # no flow-level model
    ({"fabric": {"time_limit": "soon"}}, "fabric.time_limit"),
    ({"overlap": {"model": "fraction"}}, "overlap.fraction"),
    ({"comm": {"moe": {"popularity": "zipfy"}}}, "comm.moe.popularity"),
    ({"compute": {"calibrate": {"gpus": 24, "tokens_per_s_per_gpu": 10}}}, "compute.calibrate.gpus"),
    ({"model": {"preset": "custom"}}, "model.layers"),
]


@pytest.mark.parametrize("change,field", BAD, ids=[f for _, f in BAD])
def test_bad_plan_exit_2_one_line_naming_file_and_field_nothing_written(tmp_path, change, field):
    p = _write(tmp_path, dict(copy.deepcopy(SMALL), **change))
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["plan", str(p), "-o", str(out)])
    assert res.exit_code == 2, res.output
    err = parse_error_line(res.stderr, p)
    assert err["field"] == field, res.stderr
    assert err["line"] is not None, res.stderr      # the line of the field (or of its section) in the file
    assert not out.exists()


def test_missing_plan_file_is_exit_2(tmp_path):
    res = CliRunner().invoke(main, ["plan", str(tmp_path / "nope.yaml"), "-o", str(tmp_path / "o")])
    assert res.exit_code == 2 and "file not found" in res.stderr
    assert not (tmp_path / "o").exists()


def test_example_plans_load(tmp_path):
    from pathlib import Path
    plans = sorted((Path(__file__).parent.parent / "plans").glob("*.yaml"))
    assert plans
    for p in plans:
        spec, _ = load_plan(p)
        assert spec.clusters


def test_patterns_batched_in_one_run_time_as_when_run_alone():
    """Patterns chained by barriers in one engine run get the times they get alone (adaptive routing:
    ECMP's hash draws depend on the run's queue-pair numbering, docs/planning.md "Limits")."""
    spec, src = load_plan(dict(copy.deepcopy(SMALL), clusters=[{"topology": "su_576", "gpus": 32}],
                               fabric={"routing": "adaptive"}))
    _, built = runner.check(spec, src)
    b = next(iter(built.values()))
    pats = [comm.Pattern("a2a", gpus=(70, 71, 72, 73), tokens_per_gpu=256),
            comm.Pattern("messages", tuple((g, g + 73, 1 << 20) for g in range(8))),    # across rails: spines
            comm.Pattern("a2a", gpus=(0, 1, 2, 3), tokens_per_gpu=256)]
    together = runner.PatternSimulator(spec, b, src)
    for p in pats:
        together.register(p, "x")
    together.flush()
    assert together.runs == 1 and together.simulations == 3
    for p in pats:
        alone = runner.PatternSimulator(spec, b, src)
        t = alone.times(p, "x")
        for leg in ("all", "dispatch", "combine"):
            assert together.times(p, "x")[leg] == pytest.approx(t[leg], rel=1e-9), leg
    assert together.runs == 1                     # asking again simulates nothing


# ---------------------------------------------------------------- placement

RACKS = dict(copy.deepcopy(SMALL), model=dict(SMALL["model"], experts=32, top_k=4),
             parallelism={"tp": 1, "pp": 1, "ep": 32}, batch={"global_batch": 128, "seq_len": 512},
             clusters=[{"topology": "su_576", "gpus": 128}], fabric={"routing": "adaptive"})


def test_gpus_per_domain_keeps_ep_groups_inside_racks():
    spec, src = load_plan(copy.deepcopy(RACKS))
    cases, built = runner.check(spec, src)
    topo = next(iter(built.values())).topology
    rack = lambda g: topo.graph.nodes[g]["rack"]
    straddle = [g for g in cases[0].layout.ep_groups(0) if len({rack(x) for x in g}) > 1]
    assert straddle                                 # contiguous: GPUs 64..95 span racks 0 and 1
    spec2, _ = load_plan(dict(copy.deepcopy(RACKS), placement={"gpus_per_domain": 64}))
    cases2, _ = runner.check(spec2, src)
    lay = cases2[0].layout
    assert all(len({rack(x) for x in g}) == 1 for g in lay.ep_groups(0))
    assert sorted(lay.gpu_of) == list(range(64)) + list(range(72, 136))
    # and the step sees it: the straddling group's all-to-all crosses the scale-out fabric
    _, a = plan(**{k: v for k, v in RACKS.items() if k not in ("name",)})
    _, b = plan(**{k: v for k, v in RACKS.items() if k not in ("name",)}, placement={"gpus_per_domain": 64})
    assert b.rows[0]["ep_dispatch_s"] < a.rows[0]["ep_dispatch_s"]
    assert "64 GPUs of each NVLink domain" in b.assumptions["placement"]


@pytest.mark.parametrize("change,field", [
    ({"clusters": [{"topology": "su_576", "gpus": 576}], "batch": {"global_batch": 576, "seq_len": 512}},
     "clusters[0].gpus"),
    ({"clusters": [{"topology": "leaf_spine_32x400g"}], "parallelism": {"ep": 8},
      "batch": {"global_batch": 32, "seq_len": 512}}, "placement.gpus_per_domain"),
])
def test_placement_that_does_not_fit_is_refused(change, field):
    with pytest.raises(ConfigError) as e:
        load_and_check = dict(copy.deepcopy(RACKS), placement={"gpus_per_domain": 64}, **change)
        spec, src = load_plan(load_and_check)
        runner.check(spec, src)
    assert e.value.field == field


def test_topology_file_is_found_beside_the_plan(tmp_path, monkeypatch):
    from pathlib import Path
    import shutil
    from fabricsim.topology.catalog import preset_path
    (tmp_path / "plans").mkdir()
    shutil.copy(preset_path("cluster_small_draw"), tmp_path / "plans" / "mine.yaml")
    p = _write(tmp_path / "plans", dict(copy.deepcopy(SMALL), clusters=[
        {"topology": {"kind": "file", "path": "mine.yaml"}, "gpus": 16}]))
    monkeypatch.chdir(tmp_path)                   # not the plan's folder
    spec, src = load_plan(p)
    cases, _ = runner.check(spec, src)
    assert cases[0].topology == "mine" and cases[0].gpus == 16


def test_ep_across_domains_routes_by_the_gpus_used_per_domain():
    """An EP group of 128 on 64 GPUs per rack spans two "nodes" of 64 for node-limited routing and
    hierarchical dispatch (not 72, the rack's size, which would mix the two racks' GPUs)."""
    d = dict(copy.deepcopy(RACKS), model={"preset": "deepseek-v3"}, parallelism={"ep": 128},
             placement={"gpus_per_domain": 64}, clusters=[{"topology": "su_576", "gpus": 256}],
             batch={"global_batch": 256, "seq_len": 64}, comm={"moe": {"dispatch": "hierarchical"}})
    spec, src = load_plan(d)
    cases, built = runner.check(spec, src)
    topo = next(iter(built.values())).topology
    cfg = runner.moe_config(spec, 128, 64, runner._group_domain(spec, topo, 128), src)
    assert cfg.gpus_per_node == 64 and cfg.dispatch == "hierarchical"
    racks = [{topo.graph.nodes[g]["rack"] for g in grp[i * 64:(i + 1) * 64]} for grp in cases[0].layout.ep_groups(0)
             for i in range(2)]
    assert all(len(r) == 1 for r in racks)        # each half of a group is one rack
    spec, src = load_plan(dict(d, placement={}))
    assert runner._group_domain(spec, topo, 128) == 72


def test_three_tier_keys_tell_pods_apart():
    """Two pairs whose leaves are the same distance apart, one inside a pod and one across two pods
    (traffic through the super-spines), are different patterns."""
    spec, src = load_plan(dict(copy.deepcopy(SMALL), clusters=[{"topology": "hgx8_16384_400g_3tier", "gpus": 16}]))
    _, built = runner.check(spec, src)
    sim = runner.PatternSimulator(spec, next(iter(built.values())), src)
    g = sim.built.topology.graph
    first = {}
    for h in range(sim.built.topology.num_hosts):
        leaf = sim._gpu(h)[2][0]
        first.setdefault(leaf, h)
    leaves = sorted(first)
    pod = {lf: g.nodes[lf]["pod"] for lf in leaves}
    d = 8
    inside = next(lf for lf in leaves if lf + d in pod and pod[lf] == pod[lf + d])
    across = next(lf for lf in leaves if lf + d in pod and pod[lf] != pod[lf + d])
    msgs = lambda a, b: comm.Pattern("messages", ((first[a], first[b], 1000),))
    assert sim.signature(msgs(inside, inside + d)) != sim.signature(msgs(across, across + d))


def test_interrupted_plan_writes_nothing_and_exits_130(tmp_path, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(runner.PatternSimulator, "flush", interrupted)
    p = _write(tmp_path, copy.deepcopy(SMALL))
    res = CliRunner().invoke(main, ["plan", str(p), "-o", str(tmp_path / "out")])
    assert res.exit_code == 130 and "nothing written" in res.stderr
    assert not (tmp_path / "out").exists()


def test_virtual_stages_shrink_the_bubble_and_add_the_wrap_boundary():
    spec, _ = load_plan(copy.deepcopy(SMALL))
    spec2, _ = load_plan(dict(copy.deepcopy(SMALL), parallelism=dict(SMALL["parallelism"], vpp=2)))
    lay, lay2 = (Layout.of(s, 32, "<t>", "clusters[0].gpus") for s in (spec, spec2))
    p1 = next(it for it in comm.derive(spec, lay) if it.type == "pp_p2p")
    p2 = next(it for it in comm.derive(spec2, lay2) if it.type == "pp_p2p")
    assert p2.repeat == 2 * p1.repeat
    assert len(p1.patterns) == lay.pp - 1 and len(p2.patterns) == lay.pp     # last stage -> first stage too
    class NoOverlap:
        def fraction_of(self, kind, m):
            return 0.0
    b1 = breakdown(1.0, lay.pp, 1, lay.microbatches, {}, NoOverlap())
    b2 = breakdown(1.0, lay.pp, 2, lay.microbatches, {}, NoOverlap())
    assert b2["bubble_s"] == pytest.approx(b1["bubble_s"] / 2)


def test_ep_concurrency_stage_simulates_a_stage_s_groups_together():
    d = copy.deepcopy(RACKS)
    _, alone = plan(**{k: v for k, v in d.items() if k != "name"})
    _, together = plan(**{k: v for k, v in d.items() if k != "name"}, comm={"ep_concurrency": "stage"})
    a2a = [p for p in together.patterns if p["pattern"] == "a2a"]
    assert len(a2a) == 1 and a2a[0]["gpus"] == 128            # the stage's 4 EP groups of 32 in one pattern
    assert len([p for p in alone.patterns if p["pattern"] == "a2a"]) > 1
    # the groups use disjoint NVLink ports and one straddles two racks alone: together they take about the
    # time the slowest takes alone (each group with its own routing draw). A leg's span is per group: over
    # the whole pattern, the in-rack groups' early combines would stretch the combine span over the
    # straddling group's dispatch (1.8x)
    for leg in ("ep_dispatch_s", "ep_combine_s"):
        assert together.rows[0][leg] == pytest.approx(alone.rows[0][leg], rel=0.1)
    assert together.rows[0]["ep_dispatch_bytes_per_gpu"] > 0


def test_expert_legs_add_up_to_the_pattern_s_span(small):
    _, res = small
    for p in res.patterns:
        if p["pattern"] == "a2a":
            # never more than the layer's span (legs of different GPUs overlap here: the spans sum to more)
            assert p["dispatch_s"] + p["combine_s"] <= p["time_s"] * (1 + 1e-9)
            assert p["dispatch_s"] > 0 and p["combine_s"] > 0


def test_domain_stride_fragments_the_job_across_racks():
    spec, src = load_plan(dict(copy.deepcopy(RACKS), placement={"domain_stride": 2}))
    cases, built = runner.check(spec, src)
    topo = next(iter(built.values())).topology
    lay = cases[0].layout
    racks = sorted({topo.graph.nodes[g]["rack"] for g in lay.gpu_of})
    assert racks == [0, 2] and len(lay.gpu_of) == 128           # racks 0 and 2: 72 + 56 GPUs
    assert "one NVLink domain in 2" in runner.assumptions_of(spec, 1.0, 1.0, "x")["placement"]
    with pytest.raises(ConfigError) as e:                      # 8 racks, every 3rd: 3 racks < 256 GPUs
        spec, src = load_plan(dict(copy.deepcopy(RACKS), placement={"domain_stride": 3},
                                   clusters=[{"topology": "su_576", "gpus": 256}],
                                   batch={"global_batch": 256, "seq_len": 512}))
        runner.check(spec, src)
    assert e.value.field == "clusters[0].gpus"


def test_each_pipeline_stage_holds_its_own_dense_parameters():
    """Found in review: dense parameters were spread evenly over stages, so the first stage's
    data-parallel bytes (embedding, dense layers) were 2.7x too small for DeepSeek-V3 at PP 16."""
    from fabricsim.plan.model import ModelConfig
    m = ModelConfig(preset="deepseek-v3")
    stages = m.stage_dense_params(16)
    assert sum(stages) == m.dense_params()
    assert stages[0] == max(stages) and stages[0] > 2.5 * m.dense_params() / 16
    # identical MoE layers only: the middle stages are equal, and the first and last each carry
    # one vocabulary x hidden matrix more (input embedding, output head)
    u = ModelConfig(preset="deepseek-v3", dense_layers=0, mtp_modules=0, layers=64)
    s = u.stage_dense_params(8)
    vh = u.vocab_size * u.hidden_size
    assert len(set(s[1:-1])) == 1 and s[0] - s[1] == vh and s[-1] - s[1] == vh
