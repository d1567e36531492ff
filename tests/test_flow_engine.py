"""The flow (fluid) engine: placement shared with the packet engine, max-min shares against hand
computation and an independent fluid reference, NVLink and multi-plane clusters, traces with
dependencies, efficiency, grouping, what it does not model, determinism. Agreement with the packet
engine on the cross-validation matrix: tests/test_flow_validation.py (docs/fidelity/flow.md)."""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fabricsim
from fabricsim.analysis.maxmin import ecmp_fluid_reference
from fabricsim.routing.ecmp import ecmp_index, ecmp_index_array

from test_theory import csv_traffic, leaf_spine, scenario

ROOT = Path(__file__).resolve().parents[1]
PAYLOAD = 4096 / 4178            # MTU payload share with the default header


def _uplinks(res):
    L = res.links
    return L[(L["kind"] == "leaf-spine") & L["src_name"].str.startswith("leaf")]


def _perm(size="1MiB", **extra):
    return {"pattern": "permutation", "locality": "cross_leaf", "message_size": size, **extra}


# ---------------------------------------------------------------------------------------------
# ECMP: the packet engine's own placement, and an independent fluid reference


@pytest.mark.parametrize("qps", [1, 4])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ecmp_placement_equals_the_packet_engines(qps, seed):
    topo = leaf_spine(n_per_leaf=8, leaves=2, spines=8)
    used, wire = {}, {}
    for engine in ("packet", "flow"):
        res = fabricsim.run(scenario(topo, _perm("256KiB", qps_per_message=qps), seed=seed, engine=engine))
        up = _uplinks(res).sort_values("link_id")
        used[engine] = (up["tx_data_bytes"] > 0).to_numpy()
        wire[engine] = up["tx_data_bytes"].to_numpy()
    np.testing.assert_array_equal(used["packet"], used["flow"])
    # and the same bytes on every uplink (queue-pair splits in whole packets: within a packet each)
    assert np.abs(wire["packet"] - wire["flow"]).max() <= qps * 4178
    if qps == 1:
        assert 0 < used["flow"].sum() < len(used["flow"])   # collisions: some uplinks idle


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_flow_ecmp_duration_equals_the_fluid_reference(seed):
    sc = scenario(leaf_spine(n_per_leaf=8, leaves=4, spines=8), _perm("1MiB"), seed=seed, engine="flow")
    res = fabricsim.run(sc)
    ref = ecmp_fluid_reference({**sc, "simulation": {"seed": seed}})
    dur = res.summary["pattern"]["duration_ps"]
    assert abs(dur - ref["duration_ps"]) / ref["duration_ps"] < 1e-6
    assert res.summary["effective_bandwidth"]["completion_time_ratio"] == pytest.approx(
        ref["completion_time_ratio"], rel=1e-6)


@settings(max_examples=300, deadline=None)
@given(h=st.integers(0, 2**64 - 1), salt=st.integers(0, 2**64 - 1), sw=st.integers(0, 10**6),
       n=st.integers(1, 512))
def test_ecmp_index_array_equals_ecmp_index(h, salt, sw, n):
    assert int(ecmp_index_array(np.array([h], dtype=np.uint64), salt, sw, n)[0]) == ecmp_index(h, salt, sw, n)


def test_ecmp_index_array_broadcasts_like_ecmp_index():
    rng = np.random.default_rng(7)
    h = rng.integers(0, 2**63, size=200, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    sw = rng.integers(0, 5000, size=200)
    n = rng.integers(1, 129, size=200)
    got = ecmp_index_array(h, 12345678901234567, sw, n)
    want = [ecmp_index(int(a), 12345678901234567, int(b), int(c)) for a, b, c in zip(h, sw, n)]
    assert got.tolist() == want


# ---------------------------------------------------------------------------------------------
# max-min shares against hand computation


def test_two_bottleneck_max_min_shares_and_finish_times(tmp_path):
    """A, B, D (hosts 0, 1, 2) into host 4; C from host 1 to host 5. Fabric links 4x the host
    links, so the only bottlenecks are host 4's downlink (A, B, D: 1/3 each) and host 1's uplink
    (B at 1/3, so C gets 2/3). With S = 1 MiB and C = 3 S at capacity c: C has moved 2 S when
    A, B, D finish at 3 S / c, then runs alone: 4 S / c."""
    S = 2**20
    topo = leaf_spine(n_per_leaf=4, leaves=2, spines=2, fabric_rate="1600Gbps")
    tr = csv_traffic(tmp_path, [{"id": 0, "src": 0, "dst": 4, "size_bytes": S},
                                {"id": 1, "src": 1, "dst": 4, "size_bytes": S},
                                {"id": 2, "src": 2, "dst": 4, "size_bytes": S},
                                {"id": 3, "src": 1, "dst": 5, "size_bytes": 3 * S}])
    res = fabricsim.run(scenario(topo, tr, engine="flow", flow={"group": 0}))     # exact
    m = res.messages.set_index("message_id")
    c = 400e9 / 8 / 1e12 * PAYLOAD          # payload bytes per ps
    fluid = {0: 3 * S / c, 1: 3 * S / c, 2: 3 * S / c, 3: 4 * S / c}
    for i, tf in fluid.items():
        size = int(m.loc[i, "size_bytes"])
        tail = int(m.loc[i, "ideal_fct_ps"]) - size / c           # the idle path's pipeline latency
        assert int(m.loc[i, "fct_ps"]) == pytest.approx(tf + tail, abs=2)


def test_parking_lot_shares(tmp_path):
    """Parking lot: B crosses both bottlenecks (host 1's uplink, host 4's downlink), A and C one
    each: max-min gives everyone 1/2; equal sizes all finish at 2 S / c."""
    S = 2**20
    topo = leaf_spine(n_per_leaf=4, leaves=2, spines=2, fabric_rate="1600Gbps")
    tr = csv_traffic(tmp_path, [{"id": 0, "src": 0, "dst": 4, "size_bytes": S},
                                {"id": 1, "src": 1, "dst": 4, "size_bytes": S},
                                {"id": 2, "src": 1, "dst": 5, "size_bytes": S}])
    res = fabricsim.run(scenario(topo, tr, engine="flow"))
    c = 400e9 / 8 / 1e12 * PAYLOAD
    for r in res.messages.itertuples():
        assert int(r.fct_ps) == pytest.approx(2 * S / c + int(r.ideal_fct_ps) - S / c, abs=2)


# ---------------------------------------------------------------------------------------------
# GPU clusters


def test_nvl72_rack_all_to_all_reaches_the_nvlink_bound():
    sc = {"name": "nvl72-a2a", "topology": {"kind": "file", "path": str(ROOT / "topologies" / "nvl72_rack.yaml")},
          "traffic": {"pattern": "all_to_all", "message_size": "256KiB"}, "routing": {"policy": "adaptive"},
          "simulation": {"seed": 1, "engine": "flow"}}
    res = fabricsim.run(sc)
    assert res.summary["run"]["status"] == "complete"
    assert res.messages["completed"].all() and len(res.messages) == 72 * 71
    # each GPU sends 71 x 256 KiB over 7.2 Tbps at NVLink framing 256 / (256 + 16)
    bound_ps = 71 * 256 * 1024 / (7.2e12 / 8 / 1e12 * 256 / 272)
    dur = res.summary["pattern"]["duration_ps"]
    assert dur >= bound_ps
    assert dur < bound_ps * 1.01 + 2e6        # the bound plus the pipeline latency (< 2 us)
    assert res.summary["effective_bandwidth"]["completion_time_ratio"] > 0.97


def test_multi_plane_cluster_permutation_uses_every_plane():
    sc = {"name": "planes", "topology": {"kind": "file", "path": str(ROOT / "topologies" / "cluster_small_draw.yaml")},
          "traffic": {"pattern": "permutation", "message_size": "1MiB"}, "routing": {"policy": "spray"},
          "simulation": {"seed": 1, "engine": "flow"}}
    res = fabricsim.run(sc)
    assert res.messages["completed"].all()
    L = res.links
    fabric = L[L["kind"] == "leaf-spine"]
    planes = fabric["src_name"].str.extract(r"^(p\d+)\.")[0]
    assert set(planes.dropna()) == {"p0", "p1"}
    by_plane = fabric.groupby(planes)["tx_data_bytes"].sum()
    assert (by_plane > 0).all()
    # per-packet plane split over two equal ports: the planes carry the same bytes
    assert by_plane.min() / by_plane.max() > 0.95


def test_trace_dependencies_gaps_and_persistent_connections_give_per_operation_times(tmp_path):
    """A small DeepSeek-V3 MoE layer (dispatch then combine, persistent connections, the combine
    released after the expert compute): per-operation times on the flow engine, each within its
    lower bound and close to the packet engine's."""
    trace = tmp_path / "moe16.parquet"
    subprocess.run([sys.executable, "-c", "from fabricsim.cli import main; main()", "trace", "moe", "-o", str(trace),
                    "--preset", "deepseek-v3", "--gpus", "16", "--ep-size", "16", "--gpus-per-node", "8",
                    "--tokens-per-gpu", "8", "--layers", "1", "--seed", "1"], check=True, capture_output=True,
                   env={"PYTHONPATH": str(ROOT), "PATH": ""})
    topo = {"kind": "cluster", "domain": "hgx8", "nodes": 2, "nic": {"ports": 1, "rate": "400Gbps"},
            "switch": {"buffer": {"size": "unbounded"}}}
    out = {}
    for engine in ("packet", "flow"):
        sc = {"name": "moe16", "topology": topo, "traffic": {"pattern": "trace", "path": str(trace)},
              "routing": {"policy": "adaptive"}, "simulation": {"seed": 1, "engine": engine}}
        out[engine] = fabricsim.run(sc)
    f = out["flow"]
    ops = f.collectives.set_index("op")
    assert set(ops.index) == {"moe.l0.mb0.dispatch", "moe.l0.mb0.combine"}
    assert ops["completed"].all()
    assert (ops["time_ps"] >= ops["ideal_time_ps"]).all()
    # the combine waits for the dispatch (dependencies + compute gap)
    assert ops.loc["moe.l0.mb0.combine", "first_release_ps"] > ops.loc["moe.l0.mb0.dispatch", "first_release_ps"]
    m = f.messages
    has_deps = m["release_ps"] > 0
    assert has_deps.any()
    # persistent connections: messages on one connection complete in order
    if "conn" in m.columns:
        for _k, g in m[m["conn"] >= 0].groupby(["conn", "src", "dst"]):
            ends = g.sort_values("release_ps")["end_ps"].astype("int64").to_numpy()
            assert (np.diff(ends) >= 0).all()
    p_ops = out["packet"].collectives.set_index("op")
    for op in ops.index:
        assert abs(ops.loc[op, "time_ps"] - p_ops.loc[op, "time_ps"]) / p_ops.loc[op, "time_ps"] < 0.10


# ---------------------------------------------------------------------------------------------
# parameters: efficiency and grouping


@pytest.mark.parametrize("efficiency", [0.5, {"ecmp": 0.5}])
def test_efficiency_half_doubles_a_bandwidth_bound_transfer(tmp_path, efficiency):
    size = 32 * 2**20
    tr = csv_traffic(tmp_path, [{"id": 0, "src": 0, "dst": 6, "size_bytes": size}])
    full = fabricsim.run(scenario(leaf_spine(), tr, engine="flow")).messages.iloc[0]
    half = fabricsim.run(scenario(leaf_spine(), tr, engine="flow", flow={"efficiency": efficiency}))
    row = half.messages.iloc[0]
    c = 400e9 / 8 / 1e12 * PAYLOAD
    latency = int(full["fct_ps"]) - size / c
    assert int(row["fct_ps"]) - latency == pytest.approx(2 * (int(full["fct_ps"]) - latency), rel=1e-6)
    assert half.summary["run"]["flow_efficiency"] == 0.5


def test_efficiency_of_another_policy_is_one(tmp_path):
    tr = csv_traffic(tmp_path, [{"id": 0, "src": 0, "dst": 6, "size_bytes": 2**20}])
    a = fabricsim.run(scenario(leaf_spine(), tr, engine="flow")).messages
    b = fabricsim.run(scenario(leaf_spine(), tr, engine="flow", flow={"efficiency": {"spray": 0.5}})).messages
    pd.testing.assert_series_equal(a["fct_ps"], b["fct_ps"])


@pytest.mark.parametrize("group", [0.01, 0.05])
def test_grouping_stays_close_to_exact(group):
    sc = scenario(leaf_spine(n_per_leaf=8, leaves=4, spines=8), {"pattern": "all_to_all", "message_size": "64KiB"},
                  engine="flow", flow={"group": 0})
    exact = fabricsim.run(sc)
    assert exact.summary["run"]["flow_group"] == 0
    grouped = fabricsim.run(scenario(leaf_spine(n_per_leaf=8, leaves=4, spines=8),
                                     {"pattern": "all_to_all", "message_size": "64KiB"}, engine="flow",
                                     flow={"group": group}))
    assert grouped.summary["run"]["flow_group"] == group
    assert grouped.summary["run"]["flow_rate_recomputations"] < exact.summary["run"]["flow_rate_recomputations"]
    d0, d1 = exact.summary["pattern"]["duration_ps"], grouped.summary["pattern"]["duration_ps"]
    # a window of g x elapsed delays a change by at most that: the run end moves by at most ~g
    assert abs(d1 - d0) / d0 <= group
    e0 = exact.messages["end_ps"].astype("int64").to_numpy()
    e1 = grouped.messages["end_ps"].astype("int64").to_numpy()
    assert np.max(np.abs(e1 - e0) / e0) <= 2 * group
    assert grouped.summary["bytes"]["delivered_payload_bytes"] == exact.summary["bytes"]["delivered_payload_bytes"]


# ---------------------------------------------------------------------------------------------
# what the flow engine does not model; determinism


def test_not_modelled_figures_are_named_and_absent():
    res = fabricsim.run(scenario(leaf_spine(), _perm("256KiB"), engine="flow"))
    nm = res.summary["not_modelled"]
    assert {"packet_latency", "transport", "drops", "queues", "control_bytes"} <= set(nm)
    assert "link_timeseries" not in nm           # sampled from the fluid rates (queue_bytes NA: "queues")
    assert all(isinstance(v, str) and v for v in nm.values())
    L = res.links
    for col in ("tx_control_bytes", "tx_control_packets", "tx_packets", "peak_queue_bytes", "drops_buffer_full", "ecn_marked_packets",
                "pfc_pause_events", "pfc_paused_ps"):
        assert L[col].isna().all(), col
    assert (L["tx_bytes"] == L["tx_data_bytes"]).all()
    assert res.messages["completed"].all()


def test_flow_engine_is_deterministic_and_seeded():
    sc = scenario(leaf_spine(n_per_leaf=8, leaves=4, spines=8), _perm("512KiB", qps_per_message=2), engine="flow")
    a, b = fabricsim.run(sc), fabricsim.run(sc)
    pd.testing.assert_frame_equal(a.messages, b.messages)
    pd.testing.assert_frame_equal(a.links, b.links)
    pd.testing.assert_frame_equal(a.goodput, b.goodput)
    c = fabricsim.run({**sc, "simulation": {"seed": 2, "engine": "flow"}})
    assert not np.array_equal(_uplinks(a)["tx_data_bytes"].to_numpy(), _uplinks(c)["tx_data_bytes"].to_numpy())



@pytest.mark.parametrize("pxn", [False, True])
def test_placement_in_chunks_gives_the_same_run(monkeypatch, pxn):
    # the engine opens the flows of many starting messages in chunks (bounded temporaries): any
    # chunk size gives the same flows and segments (their numbering may differ: sums in another
    # order), here the same results
    from fabricsim.engine import flow as flow_mod
    if pxn:
        sc = {"name": "pxn", "topology": {"kind": "cluster", "domain": "nvl72", "racks": 2,
                                          "nic": {"ports": 1, "rate": "400Gbps"}},
              "traffic": {"pattern": "permutation", "message_size": "256KiB", "locality": "cross_leaf"},
              "routing": {"policy": "ecmp"}, "nic": {"plane_split": "per_packet", "pxn": True, "pxn_chunk": "64KiB"},
              "simulation": {"engine": "flow"}}
    else:
        sc = scenario(leaf_spine(n_per_leaf=8, leaves=4, spines=8), _perm("512KiB", qps_per_message=3), engine="flow")
    whole = fabricsim.run(sc)
    monkeypatch.setattr(flow_mod, "FLUSH_CHUNK", 5)
    chunked = fabricsim.run(sc)
    pd.testing.assert_frame_equal(whole.messages, chunked.messages)
    pd.testing.assert_frame_equal(whole.links, chunked.links)
    for k in ("flows", "flow_segments", "flow_rate_recomputations"):
        assert whole.summary["run"][k] == chunked.summary["run"][k]


# ---------------------------------------------------------------------------------------------
# agreement with the packet engine where the fluid assumptions hold: the whole matrix of
# benchmarks/flow_validation_cases.py in tests/test_flow_validation.py (docs/fidelity/flow.md)


def test_pxn_relays_as_in_the_packet_engine():
    """nic.pxn: each chunk goes to the relay over NVLink, then on from the relay's NIC; the flow
    engine cuts and chains the pieces as the packet engine does, and the first legs are not goodput."""
    sc = {"name": "pxn", "topology": {"kind": "cluster", "domain": "nvl72", "racks": 2,
                                      "nic": {"ports": 1, "rate": "400Gbps"}, "switch": {"buffer": {"size": "unbounded"}}},
          "traffic": {"pattern": "permutation", "message_size": "512KiB", "locality": "cross_leaf"},
          "routing": {"policy": "adaptive"}, "nic": {"plane_split": "per_packet", "pxn": True, "pxn_chunk": "128KiB"}}
    res = {e: fabricsim.run({**sc, "simulation": {"engine": e}}) for e in ("packet", "flow")}
    p, f = (res[e].summary for e in ("packet", "flow"))
    assert f["run"]["status"] == "complete"
    assert f["bytes"]["delivered_payload_bytes"] == p["bytes"]["delivered_payload_bytes"] == 144 * 512 * 1024
    from fabricsim.api import prepare
    _l, sim = prepare({**sc, "simulation": {"engine": "flow"}})
    relayed = sum(sim.paths.pxn_relay(m.src, m.dst) is not None for m in sim.messages)
    assert 0 < relayed < 144
    # a relayed message: 4 chunks, two legs each, one queue pair per leg; the others go direct
    assert f["run"]["flows"] == relayed * 4 * 2 + (144 - relayed)
    assert abs(f["pattern"]["duration_ps"] / p["pattern"]["duration_ps"] - 1) < 0.03
    # without PXN the same traffic leaves by each GPU's own NIC: a different time
    direct = fabricsim.run({**sc, "nic": {"plane_split": "per_packet"}, "simulation": {"engine": "flow"}})
    assert direct.summary["pattern"]["duration_ps"] != f["pattern"]["duration_ps"]


def test_link_time_series_from_fluid_rates():
    """The flow engine samples its links as the packet engine does: bins add up to the links
    table, never above line rate, and queue_bytes is NA (no queues in a fluid model)."""
    sc = {"name": "ts", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 4, "spines": 4},
          "traffic": {"pattern": "all_to_all", "message_size": "256KiB"}, "routing": {"policy": "ecmp"},
          "simulation": {"engine": "flow"}, "outputs": {"link_sample_interval": "10us"}}
    res = fabricsim.run(sc)
    ts = res.link_timeseries
    assert len(ts) and ts["queue_bytes"].isna().all()
    assert ts["utilisation"].max() <= 1 + 1e-9
    per_link = ts.groupby("link_id")["tx_bytes"].sum()
    tx = res.links.set_index("link_id")["tx_bytes"]
    assert (per_link - tx.loc[per_link.index]).abs().max() <= 1
    assert "queues" in res.summary["not_modelled"]
    small = fabricsim.run({**sc, "outputs": {"link_sample_interval": "10us", "link_sample_budget": 200}})
    assert small.summary["run"].get("link_timeseries_truncated") is True


def test_an_interrupted_flow_run_keeps_what_finished(tmp_path, monkeypatch):
    """Ctrl-C during a flow run: the messages that completed keep their rows, the others are
    reported 'interrupted', and the results folder is written (as the packet engine does)."""
    import fabricsim.flows.fluid as fluid
    real = fluid.FluidProblem.solve
    calls = {"n": 0}

    def solve(self, **kw):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return real(self, **kw)

    monkeypatch.setattr(fluid.FluidProblem, "solve", solve)
    tr = csv_traffic(tmp_path, [{"id": i, "src": i % 8, "dst": (i + 1) % 8, "size_bytes": (i + 1) * 65536}
                                for i in range(8)])
    res = fabricsim.run(scenario(leaf_spine(), tr, engine="flow", flow={"group": 0}), output_dir=tmp_path / "out")
    assert res.summary["run"]["status"] == "interrupted"
    m = res.messages
    assert 0 < int(m["completed"].sum()) < 8
    assert set(m.loc[~m["completed"], "incomplete_reason"]) == {"interrupted"}
    assert (tmp_path / "out" / "summary.json").exists()


@pytest.mark.parametrize("body,field,allowed", [
    ("routing: {policy: pinned}\nsimulation: {engine: flow}\n", "routing.policy", "adaptive, ecmp, flowlet, spray"),
    ("simulation: {engine: flow, flow: {grop: 1}}\n", "simulation.flow.grop",
     "quantum, group, releases, solver, warm_start, adaptive, waterfill_tolerance, waterfill_iterations, efficiency"),
    ("simulation: {engine: flow, flow: {adaptive: waterfil}}\n", "simulation.flow.adaptive", "'waterfill' or 'proportional'"),
    ("simulation: {engine: flow, flow: {efficiency: 2}}\n", "simulation.flow.efficiency", "(0, 1]"),
    ("simulation: {engine: flwo}\n", "simulation.engine", "flow, packet"),
])
def test_bad_flow_engine_input_is_one_located_line_and_writes_nothing(tmp_path, body, field, allowed):
    from click.testing import CliRunner
    from fabricsim.cli import main
    sc = tmp_path / "bad.yaml"
    sc.write_text("name: bad\n" + body)
    r = CliRunner().invoke(main, ["run", str(sc), "-o", str(tmp_path / "out")])
    assert r.exit_code == 2
    line = r.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "bad.yaml:2" in line and field in line and allowed in line
    assert not (tmp_path / "out").exists()


def test_module_doctests():
    import doctest
    from fabricsim.engine import estimate, flow
    from fabricsim.flows import identity, links, replay, table
    for mod in (flow, estimate, identity, links, replay, table):
        assert doctest.testmod(mod).failed == 0, mod.__name__


def test_recorder_refuses_column_rows_while_keeping_rows():
    # an engine that reports ended rows in batches must stream only (else its rows would be lost)
    from fabricsim.analysis.recorder import Recorder
    from fabricsim.errors import SimulationError
    rec = Recorder()
    with pytest.raises(SimulationError, match="stream_only"):
        rec.on_messages([(0, 0, 1, 10, 1, 0, 0, 5, 5, 10, 0, True, "")])
    rec.stream_only()
    rec.on_messages([(0, 0, 1, 10, 1, 0, 0, 5, 5, 10, 0, True, "")])
    assert rec.first_end == 5


@pytest.mark.parametrize("routing", ["ecmp", "spray"])
def test_warm_starts_and_both_solvers_give_the_same_run(routing, monkeypatch, tmp_path):
    # the engine's warm-start bookkeeping (the last rates, the lowest rate of the flows finished
    # since, their renumbering when finished flows are compacted away): the same messages table
    # with warm starts, without, and with the vectorised solver; compaction forced often
    import fabricsim.engine.flow as flow_engine
    monkeypatch.setattr(flow_engine, "COMPACT_MIN", 16)
    topo = leaf_spine(n_per_leaf=8, leaves=4, spines=4)
    rng = np.random.default_rng(7)
    rows = []
    for i in range(800):                     # random pairs, sizes and start times: rates differ
        src, dst = rng.choice(32, 2, replace=False)
        rows.append({"id": i, "src": int(src), "dst": int(dst), "size_bytes": int(rng.integers(4096, 400_000)),
                     "start_ps": int(rng.integers(0, 20_000_000))})
    traffic = csv_traffic(tmp_path, rows)
    out = {}
    for name, flow in (("warm", {}), ("cold", {"warm_start": False}), ("vectorised", {"solver": "vectorised"})):
        res = fabricsim.run(scenario(topo, traffic, routing=routing, engine="flow", flow=flow))
        out[name] = res
    kept = out["warm"].summary["run"]["flow_rates_kept"]
    assert kept > 0 and out["cold"].summary["run"]["flow_rates_kept"] == 0
    assert out["warm"].summary["run"]["flow_solver"] == "compiled"
    assert out["vectorised"].summary["run"]["flow_solver"] == "vectorised"
    cols = ["message_id", "end_ps", "delivered_bytes"]
    for other in ("cold", "vectorised"):
        a, b = out["warm"].messages[cols], out[other].messages[cols]
        assert (a["message_id"].to_numpy() == b["message_id"].to_numpy()).all()
        assert np.abs(a["end_ps"].to_numpy() - b["end_ps"].to_numpy()).max() <= 1      # rounding
        assert (a["delivered_bytes"].to_numpy() == b["delivered_bytes"].to_numpy()).all()


@pytest.fixture
def kept_recorders(monkeypatch):
    """The recorders ``fabricsim.run`` makes, kept in a list (to read their figures afterwards)."""
    import fabricsim.api as api
    from fabricsim.analysis.recorder import Recorder
    made = []

    class Kept(Recorder):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

    monkeypatch.setattr(api, "Recorder", Kept)
    return made


def test_releases_told_once_per_round_give_the_recorders_first_and_last_release(kept_recorders, tmp_path):
    # the engine tells the recorder only the earliest and the latest release of each round (a
    # grouped step lets many releases at different times wait for its end): its figures must be
    # those of every release, the earliest and the latest release time of the messages table
    made = kept_recorders
    rng = np.random.default_rng(3)
    rows = [{"id": i, "src": int(s), "dst": int(d), "size_bytes": int(rng.integers(4096, 300_000)),
             "start_ps": int(rng.integers(0, 30_000_000))}
            for i, (s, d) in enumerate(rng.integers(0, 32, (300, 2))) if s != d]
    res = fabricsim.run(scenario(leaf_spine(n_per_leaf=8, leaves=4, spines=4), csv_traffic(tmp_path, rows),
                                 engine="flow", flow={"group": 0.1, "releases": "grouped"}))
    rel = res.messages["release_ps"].astype("int64")
    assert rel.nunique() > res.summary["run"]["flow_steps"] / 10       # rounds with several releases
    rec = made[-1]
    assert (rec.first_release, rec.last_release) == (int(rel.min()), int(rel.max()))


def _open_flows_one_by_one(self, todo):
    """The flow engine's opening as it was before ConnectionTable.open_many: every row of the
    batch asks ConnectionTable.open for its queue pairs in start order, and the flows are then
    appended by the engine's own _add_flows (the reference of
    test_batch_opening_gives_the_run_of_opening_message_by_message: only the opening differs)."""
    t = self.table
    src_l, dst_l, uid_l, h_l, size_l, row_l, t0_l = [], [], [], [], [], [], []
    firsts = []
    n = len(t)
    for i, at in todo:
        if i < n and self.pieces_of.get(i):
            firsts.append(int(math.ceil(at + self._latency(i)[1])))
            for p in self.pieces_of[i]:
                self.rel[p] = at
                self._to_start.append((p, at))
            continue
        if i < n:
            src, dst, size, qps, conn = int(t.src[i]), int(t.dst[i]), int(t.size_bytes[i]), int(t.qps[i]), int(t.conn[i])
        else:
            k = i - n
            src, dst, size, qps, conn = self.u_src[k], self.u_dst[k], self.u_size[k], self.u_qps[k], self.u_conn[k]
        opened = self.connections.open(src, dst, size, qps, conn)
        self.qps_left[i] = len(opened)
        self.fluid_end[i] = at
        if size and i < n:
            firsts.append(int(math.ceil(at + self._latency(i)[1])))
        if not opened:
            self._fluid_done(i, float(at))
            continue
        for uid, _sport, h, qb in opened:
            src_l.append(src)
            dst_l.append(dst)
            uid_l.append(uid)
            h_l.append(h)
            size_l.append(qb)
            row_l.append(i)
            t0_l.append(at)
    self._first_due.add(firsts)
    if src_l:
        self._add_flows(np.asarray(src_l, np.int64), np.asarray(dst_l, np.int64), np.asarray(uid_l, np.int64),
                        np.asarray(h_l, dtype=np.uint64), np.asarray(size_l, np.int64),
                        np.asarray(row_l, np.int64), np.asarray(t0_l, np.int64))


def _mixed_connections_trace(tmp_path):
    """Messages on fresh queue pairs and on persistent connections used by several messages (some
    of them starting together) and messages smaller than their queue-pair count (traces hold no
    empty messages), in two dependent rounds."""
    from fabricsim.traces import write_trace
    from fabricsim.traces.schema import Trace, TraceRecord
    rng = np.random.default_rng(4)
    recs = []
    for r in range(2):
        for j in range(40):
            src, dst = int(rng.integers(0, 8)), int(rng.integers(8, 16))
            size = int(rng.choice([1, 2, 3000, 200_000]))
            deps = (int(rng.integers(0, 40)),) if r else ()
            recs.append(TraceRecord(len(recs), src, dst, size, "op", "other", deps=deps,
                                    conn=int(rng.choice([-1, 0, 1]))))
    return write_trace(Trace(recs, "<test>"), tmp_path / "mixed.parquet")


@pytest.mark.parametrize("case", ["mixed_connections", "pxn"])
def test_batch_opening_gives_the_run_of_opening_message_by_message(tmp_path, monkeypatch, case):
    """_open_flows opens a batch with one ConnectionTable.open_many: the same flows, numbering
    and results as asking for each message's queue pairs in turn."""
    from fabricsim.engine import flow as flow_mod
    if case == "pxn":
        sc = {"name": "pxn", "topology": {"kind": "cluster", "domain": "nvl72", "racks": 2,
                                          "nic": {"ports": 1, "rate": "400Gbps"}},
              "traffic": {"pattern": "permutation", "message_size": "200KiB", "locality": "cross_leaf",
                          "qps_per_message": 3},
              "routing": {"policy": "ecmp"}, "nic": {"plane_split": "per_packet", "pxn": True, "pxn_chunk": "64KiB"},
              "simulation": {"engine": "flow"}}
    else:
        path = _mixed_connections_trace(tmp_path)
        sc = scenario(leaf_spine(n_per_leaf=8, leaves=2, spines=4),
                      {"pattern": "trace", "path": str(path), "qps_per_message": 3}, engine="flow")
    batch = fabricsim.run(sc)
    monkeypatch.setattr(flow_mod.FlowEngine, "_open_flows", _open_flows_one_by_one)
    one_by_one = fabricsim.run(sc)
    pd.testing.assert_frame_equal(batch.messages, one_by_one.messages)
    pd.testing.assert_frame_equal(batch.links, one_by_one.links)
    for k in ("flows", "flow_segments", "flow_rate_recomputations"):
        assert batch.summary["run"][k] == one_by_one.summary["run"][k]
    m = batch.messages
    assert m["completed"].all() and (case == "pxn" or (m["size_bytes"] < 3).any())


def test_messages_frame_transport_columns_are_all_missing_integers():
    """The flow engine does not model the transport: its messages table has those columns as
    nullable integers, every one missing (the frame the element-by-element construction gave)."""
    from fabricsim.analysis.recorder import TRANSPORT_COLUMNS, Recorder
    from fabricsim.api import prepare
    from fabricsim.engine import ENGINES
    _loaded, sim = prepare(scenario(leaf_spine(), _perm("64KiB"), engine="flow"))
    s = sim.scenario
    eng = ENGINES.get("flow")(sim, Recorder(s.outputs.latency_rel_error, s.outputs.timeseries_bin))
    assert eng.run().status == "complete"
    got = eng._messages_frame()
    want = got.copy()
    for c in TRANSPORT_COLUMNS:
        want[c] = pd.array([None] * len(got), dtype="Int64")
    assert set(TRANSPORT_COLUMNS) <= set(got.columns) and len(got)
    pd.testing.assert_frame_equal(got, want)


def test_a_run_interrupted_inside_a_round_tells_the_recorder_its_releases(kept_recorders, monkeypatch, tmp_path):
    # Ctrl-C while a round's completions are handled (its releases not yet told to the recorder):
    # the outcome still gives the recorder the releases of that round
    import fabricsim.engine.flow as flow_mod
    made = kept_recorders
    done = flow_mod.FlowEngine._done_many

    pending = []

    def stop_inside_a_round(self, rows, at):
        # the first completions handled after a round's releases spread over time
        r = self._released
        if r is not None and r[1] > r[0]:
            pending.append(list(r))
            raise KeyboardInterrupt
        return done(self, rows, at)

    monkeypatch.setattr(flow_mod.FlowEngine, "_done_many", stop_inside_a_round)
    # 128 messages, then 128 that each wait for one of them: grouped steps end many at once, and
    # their dependents are released in the same round
    rows = [{"id": i, "src": i % 16, "dst": (i * 7 + 3) % 16 if (i * 7 + 3) % 16 != i % 16 else (i + 1) % 16,
             "size_bytes": 20_000 + 997 * i, "deps": str(i - 128) if i >= 128 else ""} for i in range(256)]
    res = fabricsim.run(scenario(leaf_spine(n_per_leaf=8, leaves=2, spines=2), csv_traffic(tmp_path, rows),
                                 engine="flow", flow={"group": 0.1, "releases": "grouped"}))
    assert res.summary["run"]["status"] == "interrupted"
    assert pending and pending[0][1] > pending[0][0]     # a round's releases not yet told
    rel = res.messages["release_ps"].dropna().astype("int64")
    rec = made[-1]
    assert (rec.first_release, rec.last_release) == (int(rel.min()), int(rel.max()))
