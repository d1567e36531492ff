"""Trace format v1: round trips, inspect figures, malformed traces rejected with row and column,
and replay of a dependency chain with its gaps."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fabricsim
from fabricsim.api import prepare
from fabricsim.cli import main
from fabricsim.errors import ConfigError, TraceError
from fabricsim.traces import Trace, TraceRecord, inspect_trace, read_trace, write_trace

from conftest import SCENARIOS, TRACES

HEADER = "id,src,dst,size_bytes,op,phase,deps,gap_ps"

TOPO_4 = """\
kind: leaf_spine
hosts_per_leaf: 2
leaves: 2
spines: 2
"""


def small_trace() -> Trace:
    return Trace([
        TraceRecord(0, 0, 1, 100, "a2a,dispatch", "dispatch", 0, 0, (), 0, 0),
        TraceRecord(1, 0, 2, 200, "a2a,dispatch", "dispatch", 0, 1, (), 0, 5),
        TraceRecord(2, 1, 0, 300, 'comb "x"', "combine", 1, -1, (0,), 10, 0),
        TraceRecord(3, 2, 0, 400, 'comb "x"', "combine", -1, -1, (1, 2), 20, 7),
    ], "mem")


# --------------------------------------------------------------------------- round trips

@pytest.mark.parametrize("ext", ["parquet", "csv", "jsonl"])
def test_round_trip_each_format(tmp_path, ext):
    t = small_trace()
    back = read_trace(write_trace(t, tmp_path / f"t.{ext}"))
    assert back.records == t.records


def test_convert_chain_is_lossless(tmp_path, runner):
    src = write_trace(small_trace(), tmp_path / "a.parquet")
    chain = [src, tmp_path / "b.csv", tmp_path / "c.jsonl", tmp_path / "d.parquet"]
    for a, b in zip(chain, chain[1:]):
        res = runner.invoke(main, ["trace", "convert", str(a), str(b)])
        assert res.exit_code == 0, res.output
    assert read_trace(chain[-1]).records == small_trace().records
    assert pq.read_schema(chain[-1]).field("deps").type == pa.list_(pa.int64())
    assert pq.read_schema(chain[-1]).metadata[b"fabricsim.trace.format_version"] == b"2"
    # CSV stays plain: a header line, deps as ';'-separated ids
    lines = (tmp_path / "b.csv").read_text().splitlines()
    assert lines[0] == "id,src,dst,size_bytes,op,phase,layer,microbatch,deps,gap_ps,start_ps,conn,collective,collective_bytes"
    assert lines[4].split(",")[8] == "1;2"


def test_jsonl_accepts_deps_as_string_and_defaults(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"id": 0, "src": 0, "dst": 1, "size_bytes": 8, "op": "x", "phase": "other"}\n\n'
                 '{"id": 1, "src": 1, "dst": 0, "size_bytes": 8, "op": "x", "phase": "other", "deps": "0"}\n')
    t = read_trace(p)
    assert t.records[1].deps == (0,) and t.records[0].layer == -1 and t.records[0].start_ps == 0
    assert t.where == [("line", 1), ("line", 3)]


def test_sample_trace_formats_agree():
    pq_t, csv_t = read_trace(TRACES / "sample_moe_small.parquet"), read_trace(TRACES / "sample_moe_small.csv")
    assert pq_t.records == csv_t.records
    d = inspect_trace(pq_t)
    assert d["messages"] == 960 and d["gpus"] == 16 and d["dependency_depth"] == 4
    combine = [r for r in pq_t.records if r.phase == "combine"]
    by_id = {r.id: r for r in pq_t.records}
    for r in combine:
        (dep,) = r.deps
        assert (by_id[dep].src, by_id[dep].dst) == (r.dst, r.src) and r.gap_ps == 5_000_000
        assert by_id[dep].layer == r.layer and by_id[dep].phase == "dispatch"


# --------------------------------------------------------------------------- inspect

def test_inspect_figures_by_hand(tmp_path, runner):
    p = write_trace(small_trace(), tmp_path / "t.csv")
    res = runner.invoke(main, ["trace", "inspect", str(p), "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["messages"] == 4 and d["total_bytes"] == 1000 and d["gpus"] == 3 and d["ops"] == 2
    assert d["bytes_per_op"] == {"a2a,dispatch": {"messages": 2, "bytes": 300},
                                 'comb "x"': {"messages": 2, "bytes": 700}}
    assert d["bytes_per_phase"] == {"combine": {"messages": 2, "bytes": 700},
                                    "dispatch": {"messages": 2, "bytes": 300}}
    assert d["dependency_depth"] == 3 and d["dependency_edges"] == 3 and d["messages_with_deps"] == 2
    tm = d["traffic_matrix"]
    assert tm["pairs"] == 4 and tm["pair_bytes_max"] == 400 and tm["pair_bytes_mean"] == 250
    assert tm["send_bytes_max"] == 400 and tm["send_bytes_mean"] == pytest.approx(1000 / 3)
    assert tm["recv_bytes_max"] == 700 and tm["recv_bytes_mean"] == pytest.approx(1000 / 3)
    assert tm["recv_skew"] == pytest.approx((700 - 1000 / 3) / (1000 / 3))
    text = runner.invoke(main, ["trace", "inspect", str(p)])
    assert text.exit_code == 0 and "depth 3" in text.stdout and "skew 1.100" in text.stdout


# --------------------------------------------------------------------------- validate

MALFORMED = {
    "duplicate_id": (["0,0,1,10,a,dispatch,,0", "0,1,0,10,a,dispatch,,0"], 3, "id"),
    "zero_size": (["0,0,1,0,a,dispatch,,0"], 2, "size_bytes"),
    "negative_size": (["0,0,1,10,a,dispatch,,0", "1,0,1,-4,a,dispatch,,0"], 3, "size_bytes"),
    "unknown_dep": (["0,0,1,10,a,dispatch,,0", "1,1,0,10,a,combine,7,0"], 3, "deps"),
    "self_dep": (["0,0,1,10,a,dispatch,0,0"], 2, "deps"),
    "cycle": (["0,0,1,10,a,dispatch,2,0", "1,1,0,10,a,combine,0,0", "2,1,3,10,a,combine,1,0"], 2, "deps"),
    "src_is_dst": (["0,2,2,10,a,dispatch,,0"], 2, "dst"),
    "bad_phase": (["0,0,1,10,a,forward,,0"], 2, "phase"),
    "non_integer_size": (["0,0,1,1.5,a,dispatch,,0"], 2, "size_bytes"),
    "non_integer_src": (["0,x,1,10,a,dispatch,,0"], 2, "src"),
    "bad_deps": (["0,0,1,10,a,dispatch,,0", "1,1,0,10,a,dispatch,0;b,0"], 3, "deps"),
    "negative_gap": (["0,0,1,10,a,dispatch,,-1"], 2, "gap_ps"),
    "missing_op_value": (["0,0,1,10,,dispatch,,0"], 2, "op"),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_validate_rejects_malformed_csv(tmp_path, runner, name):
    rows, line, col = MALFORMED[name]
    p = tmp_path / f"{name}.csv"
    p.write_text("\n".join([HEADER, *rows]) + "\n")
    res = runner.invoke(main, ["trace", "validate", str(p)])
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"error: {p}: line {line}: column {col}: "), err


def test_validate_rejects_missing_column(tmp_path, runner):
    p = tmp_path / "t.csv"
    p.write_text("id,src,dst,op,phase\n0,0,1,a,dispatch\n")
    res = runner.invoke(main, ["trace", "validate", str(p)])
    assert res.exit_code == 2
    assert res.stderr.startswith(f"error: {p}: line 1: column size_bytes: missing column")


@pytest.mark.parametrize("as_scenario", [False, True])
def test_validate_checks_gpu_ids_against_a_topology(tmp_path, runner, write, as_scenario):
    p = tmp_path / "t.csv"
    p.write_text("\n".join([HEADER, "0,0,3,10,a,dispatch,,0", "1,1,4,10,a,dispatch,,0"]) + "\n")
    ok = runner.invoke(main, ["trace", "validate", str(p)])
    assert ok.exit_code == 0 and ok.stdout.startswith(f"{p}: ok")
    if as_scenario:
        topo = write("s.yaml", "name: s\ntopology:\n" + "".join("  " + ln + "\n" for ln in TOPO_4.splitlines())
                     + "traffic:\n  pattern: permutation\n")
    else:
        topo = write("topo.yaml", TOPO_4)
    res = runner.invoke(main, ["trace", "validate", str(p), "--topology", str(topo)])
    assert res.exit_code == 2, res.output
    assert res.stderr.startswith(f"error: {p}: line 3: column dst: GPU 4 is not in the topology (allowed: 0..3)")


def test_parquet_errors_name_the_row_index(tmp_path, runner):
    p = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": [0, 1, 1], "src": [0, 1, 2], "dst": [1, 0, 0], "size_bytes": [1, 2, 3],
                             "op": ["a"] * 3, "phase": ["other"] * 3}), p)
    res = runner.invoke(main, ["trace", "validate", str(p)])
    assert res.exit_code == 2
    assert res.stderr.startswith(f"error: {p}: row 2: column id: duplicate message id 1")


def test_jsonl_errors_name_the_line(tmp_path, runner):
    p = tmp_path / "t.jsonl"
    p.write_text('{"id": 0, "src": 0, "dst": 1, "size_bytes": 8, "op": "x", "phase": "other"}\n'
                 '{"id": 1, "src": 1, "dst": 0, "size_bytes": 8, "op": "x", "phase": "other", "layer": 1.5}\n')
    res = runner.invoke(main, ["trace", "validate", str(p)])
    assert res.exit_code == 2
    assert res.stderr.startswith(f"error: {p}: line 2: column layer: expected an integer")


def test_trace_error_is_a_config_error(tmp_path, runner):
    assert issubclass(TraceError, ConfigError) and TraceError("x").exit_code == 2
    res = runner.invoke(main, ["trace", "convert", str(TRACES / "sample_moe_small.csv"), str(tmp_path / "t.txt")])
    assert res.exit_code == 2 and "unknown trace file extension" in res.stderr


# --------------------------------------------------------------------------- replay

def test_replay_releases_a_chain_in_order_with_its_gaps(tmp_path):
    t = Trace([TraceRecord(0, 0, 3, 65536, "x", "dispatch"),
               TraceRecord(1, 3, 1, 32768, "x", "combine", deps=(0,), gap_ps=3_000_000),
               TraceRecord(2, 1, 2, 4096, "y", "other", deps=(1,), gap_ps=1_000_000),
               TraceRecord(3, 2, 0, 1000, "y", "other", start_ps=100)])
    p = write_trace(t, tmp_path / "chain.parquet")
    sc = {"name": "t", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 2, "leaves": 2, "spines": 2},
          "traffic": {"pattern": "trace", "path": str(p)}, "routing": {"policy": "ecmp"},
          "simulation": {"seed": 1}}
    _, sim = prepare(sc)
    assert sim.messages[1].tags == {"op": "x", "phase": "combine", "layer": -1, "microbatch": -1,
                                    "collective": "", "collective_bytes": 0}
    res = fabricsim.run(sc)
    m = res.messages.set_index("message_id")
    assert m["completed"].all()
    assert m.loc[1, "release_ps"] == m.loc[0, "end_ps"] + 3_000_000
    assert m.loc[2, "release_ps"] == m.loc[1, "end_ps"] + 1_000_000
    assert m.loc[0, "release_ps"] == 0 and m.loc[3, "release_ps"] == 100


def test_replay_rejects_gpu_outside_the_scenario_topology(tmp_path, runner, write):
    p = tmp_path / "t.csv"
    p.write_text("\n".join([HEADER, "0,0,5,10,a,dispatch,,0"]) + "\n")
    s = write("s.yaml", "name: s\ntopology:\n" + "".join("  " + ln + "\n" for ln in TOPO_4.splitlines())
              + f"traffic:\n  pattern: trace\n  path: {p}\n")
    res = runner.invoke(main, ["validate", str(s)])
    assert res.exit_code == 2
    assert f"{p}: line 2: column dst: GPU 5" in res.stderr


def test_trace_scenarios_replay_the_sample():
    for name in ("trace_replay_ecmp", "trace_replay_adaptive"):
        loaded, sim = prepare(SCENARIOS / f"{name}.yaml")
        assert loaded.scenario.traffic.pattern == "trace" and len(sim.messages) == 960
        assert sim.topology.num_hosts == 16
