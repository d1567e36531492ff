"""Smoke test of benchmarks/bench_packet_scale.py on tiny fabrics, so that the script does not rot.

It runs the script's own ``main`` (--quick, 8 hosts) and its --max-wall path (a case killed, the
next one skipped on the projection), and checks the reports it writes; nothing about speed.
"""
from __future__ import annotations

import json

from conftest import load_bench


def _load():
    return load_bench("bench_packet_scale")


def test_quick_runs_both_workloads_and_writes_its_report(tmp_path, capsys):
    bench = _load()
    out = tmp_path / "scale.json"
    assert bench.main(["--quick", "--hosts", "8", "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert {"command", "date", "machine", "affinity", "shapes", "source", "cases"} <= set(res)
    assert res["shapes"]["8"] == {"leaves": 2, "hosts_per_leaf": 4, "spines": 4}
    assert res["source"]["snapshot"] and res["source"]["sha256"]
    rows = {r["workload"]: r for r in res["cases"]}
    assert set(rows) == {"permutation", "all_to_all"}
    # 8 hosts, 256 KiB each / 64 x 4 KiB packets; all-to-all 8 x 7 pairs of 16 KiB / 4 packets
    assert rows["permutation"]["data_packets"] == 8 * 64
    assert rows["all_to_all"]["data_packets"] == 8 * 7 * 4
    for r in rows.values():
        assert r["status"] == "complete" and r["routing_policy"] == "adaptive"
        assert r["messages_completed"] == r["messages_total"] == r["messages"]
        assert r["wall_s"] >= r["engine_wall_s"] > 0 and r["peak_rss_mb"] > 0
        assert r["events"] > 0 and r["packet_hops"] > 0
        assert "bench_packet_scale_" in r["fabricsim_file"]          # the snapshot was measured
        assert r["scenario"]["outputs"]["link_sample_interval"] == "off"
    assert "| 8 | all_to_all | adaptive |" in capsys.readouterr().out


def test_max_wall_kills_then_skips_on_a_projection(tmp_path):
    bench = _load()
    out = tmp_path / "scale.json"
    bench.main(["--quick", "--workloads", "permutation", "--max-wall", "0.05", "--no-snapshot",
                "--out", str(out)])
    small, big = json.loads(out.read_text())["cases"]
    assert small["status"] == "over --max-wall" and small["wall_used_s"] >= 0.05
    assert "wall_s" not in small and "events" not in small          # nothing made up for it
    assert big["status"] == "skipped (projected over --max-wall)" and big["projection_is_lower_bound"]
    assert big["projected_wall_s"] == small["wall_used_s"] * 2          # 16 hosts: twice the packets
    assert "wall_s" not in big


def test_projection_is_linear_in_data_packets():
    bench = _load()
    prev = {"hosts": 128, "workload": "all_to_all", "routing": "adaptive", "data_packets": 1000,
            "status": "complete", "wall_s": 10.0}
    p = bench.project(prev, 3000)
    assert p["projected_wall_s"] == 30.0 and not p["projection_is_lower_bound"]
    assert "measured wall_s 10.0 s" in p["projection_basis"]
    assert bench.project(None, 3000) is None
    assert bench.data_packets(1024, "all_to_all", 64 * 1024) == 1024 * 1023 * 16
    assert bench.data_packets(128, "permutation", 8_000_000) == 128 * 1954
