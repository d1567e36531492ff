"""Smoke test of benchmarks/bench_packet.py on a tiny fabric, so that the script does not rot.

It runs the script's own ``main`` (the --quick path, shrunk further) and checks the report it
writes; it asserts nothing about speed.
"""
from __future__ import annotations

import json
from pathlib import Path

from conftest import load_bench

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_packet.py"


def _load():
    return load_bench("bench_packet")


def test_bench_packet_quick_runs_and_writes_its_report(tmp_path, capsys):
    bench = _load()
    out = tmp_path / "speed.json"
    rc = bench.main(["--quick", "--hosts-per-leaf", "2", "--leaves", "2", "--spines", "2",
                     "--message-size", "64KiB", "--bare-events", "3000", "--profile", "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert {"machine", "config", "loops_events_per_s", "engine", "reference", "profiles", "command"} <= set(res)
    assert res["machine"]["python"] and res["machine"]["cpu_count"]
    for loop in ("bare_heapq", "heap_kernel", "bare_simpy", "simpy_kernel", "bare_compiled"):
        assert all(v > 0 for v in res["loops_events_per_s"][loop].values())
    rows = {(r["routing"], r["kernel"]): r for r in res["engine"]}
    assert set(rows) == {(p, k) for p in ("ecmp", "adaptive", "spray") for k in ("heap", "simpy")}
    for (policy, kernel), r in rows.items():
        assert r["status"] == "complete"
        assert r["messages_completed"] == 4
        # 4 hosts, 64 KiB each, 4 KiB MTU: 16 data packets x 4 hops
        assert r["data_packet_hops"] == 4 * 16 * 4
        # packet_hops also counts the ACKs (one per data packet, on the reverse path), up to the
        # end of the event loop: the heap kernel drains them all, the simpy kernel stops at the
        # last message completion
        assert r["control_packet_hops"] > 0
        assert r["links_table_hops"] == r["data_packet_hops"] + r["control_packet_hops"]
        assert r["links_table_hops"] <= r["packet_hops"] <= 2 * 4 * 16 * 4
        assert r["packet_hops_per_s"] > 0 and r["hops_per_s_over_bare_heapq"] > 0
        if kernel == "simpy":
            assert r["identical_to_heap"] is True
    for policy in ("ecmp", "adaptive"):
        shares = res["profiles"][policy]["breakdown"]
        assert abs(sum(shares.values()) - 1) < 1e-6
    printed = capsys.readouterr().out
    assert "engine (fabricsim.run)" in printed and "bare_heapq" in printed


def test_bench_trace_moe_tiny_runs_and_writes_its_report(tmp_path):
    bench = load_bench("bench_trace_moe")
    out = tmp_path / "moe.json"
    bench.main(["--gpus", "64,128", "--tokens", "16", "--baseline-src", str(BENCH.parents[1]), "-o", str(out)])
    res = json.loads(out.read_text())
    assert res["identical_files"] == {"64": True, "128": True}  # the same code twice
    assert res["bare_baseline"]["values"] == 128 * 16 * 256
    rows = {(r["gpus"], r["code"]): r for r in res["rows"]}
    assert set(rows) == {(n, c) for n in (64, 128) for c in ("current", "baseline")}
    assert all(r["messages"] > 0 and r["peak_rss_mib"] > 0 and r["total_s"] > 0 for r in rows.values())
    assert rows[(128, "current")]["messages"] > rows[(64, "current")]["messages"]


def test_bench_setup_phases_runs_on_a_small_trace(capsys):
    mod = load_bench("bench_setup_phases")
    trace = str(BENCH.parents[1] / "traces" / "dsv3_64gpu_flat.parquet")
    got = mod.phases(trace, "leaf_spine_128x400g")
    assert set(got) >= {"trace parse", "trace check", "LinkTable", "Replay.__init__", "LowerBound.__init__"}
    assert all(v >= 0 for v in got.values())
    run = mod.profiled_run(trace, "leaf_spine_128x400g")
    assert set(run) == set(mod.RUN_PHASES) | {"wall (profiled)"}
    # nested phases are inside their callers (cumulative times, rounded to 10 ms)
    assert run["build_result"] + 0.01 >= run["LowerBound.__init__"] >= 0
    assert run["prepare"] + 0.01 >= run["read_trace"] >= 0
