"""fabricsim plan, ``fabric.packet_slice``: a sample of the patterns again with the packet engine.

Small plans only (a 3-GPU ring on a one-spine leaf-spine, the custom 4-layer MoE at 16 GPUs): each
packet run takes about a second.
"""
from __future__ import annotations

import copy
import math

import pandas as pd
import pytest
from click.testing import CliRunner

from fabricsim.cli import main
from fabricsim.errors import ConfigError
from fabricsim.plan import comm, runner
from fabricsim.plan.spec import COMM_TYPES, load_plan
from fabricsim.units import PS_PER_S, serialisation_ps

from conftest import parse_error_line
from test_plan import SMALL, _write
from test_plan_background import RATE, RING3

S16 = dict(copy.deepcopy(SMALL), clusters=[{"topology": "cluster_small_draw", "gpus": 16}])


def plan_of(d):
    spec, src = load_plan(copy.deepcopy(d))
    return spec, runner.run_plan(spec, src)


def test_packet_engine_times_one_message_as_theory_and_the_flow_engine_do():
    spec, src = load_plan(copy.deepcopy(RING3))
    _, built = runner.check(spec, src)
    sim = runner.PatternSimulator(spec, next(iter(built.values())), src)
    size = 4 << 20
    key = sim.register(comm.Pattern("messages", ((0, 2, size),)), "x")
    sim.flush()
    got = sim.packet_check(key)
    simc = sim.built.scenario.simulation
    # every MTU payload carries a header; 3 links of 500 ns and 2 switches of 600 ns on the way
    wire = serialisation_ps(size * (simc.mtu + simc.header) // simc.mtu, RATE) / PS_PER_S + 3 * 500e-9 + 2 * 600e-9
    assert got["packet"]["all"] == pytest.approx(wire, rel=0.02)
    assert got["flow"]["all"] == pytest.approx(sim.cache[key]["all"], rel=1e-9)    # one pattern: the same run
    assert got["ratio"]["all"] == pytest.approx(got["packet"]["all"] / got["flow"]["all"], rel=1e-12)
    row = sim.cache[key]["row"]
    assert row["packet_s"] == got["packet"]["all"] and row["packet_engine_wall_s"] > 0


def test_packet_slice_samples_the_slowest_pattern_of_each_type():
    _, res = plan_of(dict(S16, fabric={"routing": "adaptive", "packet_slice": {"types": ["pp_p2p",
                                                                                       "ep_dispatch"]}}))
    pats = pd.DataFrame(res.patterns)
    sampled = pats[pats["packet_s"].notna()]
    assert set(sampled["type"]) == {"pp_p2p", "ep_dispatch"} and len(sampled) == 2
    # the sampled pattern of a type is the one the step waits for: its time is the type's per-repeat time
    for it in res.items[0]:
        if it.type in ("pp_p2p", "ep_dispatch"):
            leg = {"ep_dispatch": "dispatch_s"}.get(it.type, "time_s")
            row = sampled[sampled["type"] == it.type].iloc[0]
            assert row[leg] == pytest.approx(it.notes["pattern_s"], rel=1e-12)
    for _, r in sampled.iterrows():
        assert r["packet_ratio"] == pytest.approx(r["packet_s"] / r["flow_alone_s"], rel=1e-12)
        assert 0.5 < r["packet_ratio"] < 2 and r["packet_estimate_wall_s"] > 0
    row = res.rows[0]
    # report: the step uses the flow engine's times; the factors are written beside them
    for t in COMM_TYPES:
        assert row[f"{t}_s"] == row[f"{t}_flow_s"]
    assert math.isnan(row["tp_packet_factor"])
    assert row["pp_p2p_packet_factor"] == pytest.approx(sampled[sampled["type"] == "pp_p2p"]["packet_ratio"].iloc[0])
    assert row["ep_combine_packet_factor"] != row["ep_combine_packet_factor"]      # not sampled: NaN
    assert res.assumptions["comm_times_from"].startswith("flow engine (packet")
    assert not any("packet" in x for x in res.assumptions["not_modelled"])
    assert "1 pattern(s) per type (slowest)" in res.assumptions["packet_slice"]


def test_packet_slice_correct_scales_each_type_by_its_mean_ratio():
    ps = {"types": ["dp_reduce_scatter", "ep_combine"], "patterns": 2, "use": "correct"}
    _, res = plan_of(dict(S16, clusters=[{"topology": "cluster_small_draw", "gpus": 32}],
                          fabric={"routing": "adaptive", "packet_slice": ps}))
    pats = pd.DataFrame(res.patterns)
    row = res.rows[0]
    rs = pats[(pats["type"] == "dp_reduce_scatter") & pats["packet_s"].notna()]
    assert len(rs) == 2                  # the dense and the expert ring step (32 GPUs: 2 expert replicas)
    want = rs["packet_ratio"].mean()
    assert row["dp_reduce_scatter_packet_factor"] == pytest.approx(want, rel=1e-12)
    assert row["dp_reduce_scatter_s"] == pytest.approx(row["dp_reduce_scatter_flow_s"] * want, rel=1e-12)
    # the expert all-to-all pattern is shared by dispatch and combine: combine uses its combine leg
    a2a = pats[(pats["pattern"] == "a2a") & pats["packet_s"].notna()]
    assert row["ep_combine_packet_factor"] == pytest.approx(a2a["packet_combine_ratio"].mean(), rel=1e-12)
    assert row["ep_dispatch_s"] == row["ep_dispatch_flow_s"]            # not sampled: as simulated
    assert row["step_s"] == pytest.approx(row["compute_s"] + row["exposed_comm_s"], rel=1e-12)
    assert "packet/flow ratio" in res.assumptions["comm_times_from"]


def test_packet_slice_random_pick_follows_the_seed(monkeypatch):
    picked = []

    def fake(self, key):             # the selection only: no packet run
        picked.append(key)
        self.cache[key]["packet"] = {"ratio": {"all": 1.0, "dispatch": 1.0, "combine": 1.0}}
    monkeypatch.setattr(runner.PatternSimulator, "packet_check", fake)
    ps = {"types": ["dp_reduce_scatter"], "patterns": 1}
    d = dict(S16, clusters=[{"topology": "cluster_small_draw", "gpus": 32}])
    _, res = plan_of(dict(d, fabric={"routing": "adaptive", "packet_slice": ps}))
    rs = [p for p in res.patterns if p["type"] == "dp_reduce_scatter"]
    assert len(rs) == 2 and picked == [max(rs, key=lambda p: p["time_s"])["signature"]]     # slowest
    by_seed = {}
    for seed in range(6):
        for _ in range(2):
            picked.clear()
            plan_of(dict(d, seed=seed, fabric={"routing": "adaptive", "packet_slice": dict(ps, pick="random")}))
            by_seed.setdefault(seed, []).append(tuple(picked))
    assert all(a == b for a, b in by_seed.values())             # one seed, one draw
    assert len({a for a, _ in by_seed.values()}) == 2          # and both patterns get drawn over the seeds


def test_packet_slice_above_its_wall_time_budget_is_refused_before_any_packet_run(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(runner.PatternSimulator, "packet_check", lambda *a: calls.append(a))
    p = _write(tmp_path, dict(copy.deepcopy(S16), fabric={"routing": "adaptive",
                                                           "packet_slice": {"max_wall_s": 0.01}}))
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["plan", str(p), "-o", str(out), "-q"])
    assert res.exit_code == 2, res.output
    err = parse_error_line(res.stderr, p)
    assert err["field"] == "fabric.packet_slice.max_wall_s" and "packet engine" in res.stderr
    assert not out.exists() and not calls


@pytest.mark.parametrize("change,field", [
    ({"types": ["ep_x"]}, "fabric.packet_slice.types[0]"),
    ({"patterns": 0}, "fabric.packet_slice.patterns"),
    ({"use": "always"}, "fabric.packet_slice.use"),
    ({"pick": "first"}, "fabric.packet_slice.pick"),
    ({"max_wall_s": -1}, "fabric.packet_slice.max_wall_s"),
])
def test_bad_packet_slice_is_exit_2(tmp_path, change, field):
    p = _write(tmp_path, dict(copy.deepcopy(S16), fabric={"routing": "adaptive", "packet_slice": change}))
    res = CliRunner().invoke(main, ["plan", str(p), "-o", str(tmp_path / "o")])
    assert res.exit_code == 2, res.output
    assert parse_error_line(res.stderr, p)["field"] == field
    assert not (tmp_path / "o").exists()


def test_estimate_counts_the_background_too():
    spec, src = load_plan(dict(copy.deepcopy(RING3), background={"pattern": "permutation"}))
    cases, built = runner.check(spec, src)
    sim = runner.PatternSimulator(spec, next(iter(built.values())), src)
    key = sim.register(comm.Pattern("messages", ((0, 2, 1 << 20),)), "x", cases[0].background)
    plain = sim.register(comm.Pattern("messages", ((0, 2, 1 << 20),)), "x")
    sim.flush()
    assert sim.packet_estimate_s(key) > 2 * sim.packet_estimate_s(plain) > 0
