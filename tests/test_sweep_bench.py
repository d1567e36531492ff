"""Smoke test of benchmarks/bench_sweep.py on a few points, so that the script does not rot (it
asserts nothing about speed)."""
from __future__ import annotations

import json

from conftest import load_bench


def test_bench_sweep_runs_and_writes_its_report(tmp_path):
    bench = load_bench("bench_sweep")
    out = tmp_path / "sweep.json"
    assert bench.main(["--points", "4", "--executors", "serial,processes", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [r["executor"] for r in doc["rows"]] == ["serial", "processes"]
    for r in doc["rows"]:
        assert r["points"] == 4 and r["complete"] == 4 and r["identical_to_serial"] is True
        assert r["wall_s"] > 0 and r["startup_s"] >= 0
    assert doc["command"].startswith("python3 benchmarks/bench_sweep.py")
