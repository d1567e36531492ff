"""The results folder: files, formats, seed recorded, resolved scenario reproduces the run,
interrupted runs keep what they finished."""
from __future__ import annotations

import json

import pandas as pd
import yaml
from click.testing import CliRunner

import fabricsim
from fabricsim.analysis.recorder import MESSAGE_COLUMNS, Recorder
from fabricsim.analysis.result import build_result
from fabricsim.cli import main
from fabricsim.engine import ENGINES

SC = {"name": "res", "topology": {"hosts_per_leaf": 4, "leaves": 2, "spines": 4},
      "traffic": {"pattern": "permutation", "message_size": "256KiB"},
      "routing": {"policy": "spray"}, "simulation": {"seed": 7}}


def test_cli_writes_every_table_in_both_formats(tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(SC))
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["run", str(scen), "-o", str(out), "--quiet"])
    assert r.exit_code == 0, r.output
    names = {p.name for p in out.iterdir()}
    for table in ("messages", "links", "latency_histogram", "goodput_timeseries"):
        assert {f"{table}.parquet", f"{table}.csv"} <= names
        a = pd.read_parquet(out / f"{table}.parquet")
        b = pd.read_csv(out / f"{table}.csv")
        assert len(a) == len(b) and list(a.columns) == list(b.columns)
    assert "messages.partial.csv" not in names
    summary = json.loads((out / "summary.json").read_text())
    run = json.loads((out / "run.json").read_text())
    assert summary["seed"] == 7 and run["seed"] == 7 and run["status"] == "complete"
    assert summary["run"]["events"] > 0 and summary["run"]["wall_time_s"] > 0
    assert summary["run"]["version"] == fabricsim.__version__
    # the resolved scenario is a complete, valid scenario that reproduces the run
    resolved = yaml.safe_load((out / "scenario.resolved.yaml").read_text())
    assert resolved["simulation"]["seed"] == 7 and resolved["routing"]["policy"] == "spray"
    again = fabricsim.run(resolved)
    pd.testing.assert_frame_equal(again.messages.reset_index(drop=True),
                                  pd.read_parquet(out / "messages.parquet"), check_dtype=False)


def test_seed_option_overrides_and_is_recorded(tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(SC))
    r = CliRunner().invoke(main, ["run", str(scen), "-o", str(tmp_path / "o"), "--seed", "11", "--json", "-q"])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["seed"] == 11


def test_set_overrides_reach_the_run(tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(SC))
    r = CliRunner().invoke(main, ["run", str(scen), "-o", str(tmp_path / "o"), "-q",
                                  "--set", "routing.policy=adaptive", "--set", "traffic.message_size=64KiB"])
    assert r.exit_code == 0, r.output
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["routing"] == "adaptive"
    assert s["bytes"]["offered_payload_bytes"] == 8 * 64 * 1024


def _run_interrupted(sim, rec):
    """Run the packet engine and press Ctrl-C at the first progress report (65,536 events in)."""
    engine = ENGINES.get("packet")(sim, rec)

    def progress(now):
        raise KeyboardInterrupt

    return engine.run(progress=progress)


def _staggered(tmp_path):
    """Messages of growing size from host 0 and 1, so they finish one after another."""
    rows = ["src,dst,size_bytes"] + [f"{i % 2},{2 + i % 6},{(i + 1) * 256 * 1024}" for i in range(24)]
    p = tmp_path / "m.csv"
    p.write_text("\n".join(rows) + "\n")
    return {**SC, "traffic": {"pattern": "csv", "path": str(p)}}


def test_interrupted_run_keeps_finished_messages_and_reports_the_rest(tmp_path):
    loaded, sim = fabricsim.prepare(_staggered(tmp_path))
    rec = Recorder()
    outcome = _run_interrupted(sim, rec)
    assert outcome.status == "interrupted"
    res = build_result(sim, rec, outcome, 1.0, "test")
    m = res.messages
    assert len(m) == 24
    assert 0 < m["completed"].sum() < 24
    assert set(m.loc[~m["completed"], "incomplete_reason"]) == {"interrupted"}
    b = res.summary["bytes"]
    assert b["injected_payload_bytes"] == b["delivered_payload_bytes"] + b["in_flight_payload_bytes"]


def test_streamed_partial_file_holds_finished_messages(tmp_path):
    loaded, sim = fabricsim.prepare(_staggered(tmp_path))
    path = tmp_path / "messages.partial.csv"
    rec = Recorder(stream_path=path)
    _run_interrupted(sim, rec)
    col = MESSAGE_COLUMNS.index("completed")
    done_before_final = sum(1 for r in rec.rows if r[col])
    rec.close()
    streamed = pd.read_csv(path)
    assert streamed["completed"].sum() == done_before_final > 0


def test_a_reused_folder_holds_only_the_new_runs_tables(tmp_path):
    out = tmp_path / "out"
    fabricsim.run({**SC, "outputs": {"formats": ["parquet", "csv"]}}, output_dir=out)
    assert (out / "messages.csv").exists()
    fabricsim.run({**SC, "outputs": {"formats": ["parquet"]}}, output_dir=out, overwrite=True)
    assert not (out / "messages.csv").exists() and (out / "messages.parquet").exists()


def test_rows_not_streamed_are_made_once_and_equal_the_streamed_runs(tmp_path, monkeypatch):
    """The packet engine rebuilds every message row at the end (Recorder.refresh); a row not streamed
    to ``messages.partial.csv`` is not also made when its message ends. The table is the same as a
    streamed run's."""
    streamed = fabricsim.run(SC, output_dir=tmp_path / "out")
    calls = []
    orig = Recorder._row

    def row(st):
        calls.append(st)
        return orig(st)
    monkeypatch.setattr(Recorder, "_row", staticmethod(row))
    kept = fabricsim.run(SC)
    assert len(calls) == len(kept.messages) > 0
    pd.testing.assert_frame_equal(kept.messages, streamed.messages)
