"""compare and run status (issue 13): a status column, incomplete runs out of the means unless
asked, a point that fails at run time recorded instead of aborting, duplicate --vary values refused."""
from __future__ import annotations

import math

import pandas as pd
import pytest

import fabricsim
import fabricsim.api
from fabricsim.cli import main
from fabricsim.compare import summarize
from fabricsim.errors import ConfigError, SimulationError

TINY = {
    "name": "tiny",
    "topology": {"kind": "leaf_spine", "hosts_per_leaf": 2, "leaves": 2, "spines": 2},
    "traffic": {"pattern": "permutation", "message_size": "64KiB"},
    "simulation": {"seed": 1, "time_limit": "1ms"},
}
TINY_YAML = """\
name: tiny
topology: {kind: leaf_spine, hosts_per_leaf: 2, leaves: 2, spines: 2}
traffic: {pattern: permutation, message_size: 64KiB}
routing: {policy: ecmp}
simulation: {seed: 1, time_limit: 1ms}
"""


def test_the_table_has_a_status_column_and_incomplete_runs_are_not_averaged_in():
    df = fabricsim.compare(TINY, vary={"simulation.time_limit": ["1us", "1ms"]})
    assert list(df["status"]) == ["time_limit", "complete"]
    s = summarize(df)
    short, full = s.iloc[0], s.iloc[1]
    assert short["runs"] == 0 and short["excluded"] == 1 and short["status"] == "time_limit 1"
    assert math.isnan(short["goodput_fraction_mean"])
    assert full["runs"] == 1 and full["excluded"] == 0 and full["status"] == "complete"
    inc = summarize(df, include_incomplete=True).iloc[0]
    assert inc["runs"] == 1 and inc["goodput_fraction_mean"] == pytest.approx(df["goodput_fraction"][0])


def test_summarize_keeps_complete_runs_of_a_mixed_group():
    df = pd.DataFrame({"routing": ["a"] * 3, "seed": [1, 2, 3], "status": ["complete", "time_limit", "failed"],
                       "reason": ["", "", "SimulationError: x"], "goodput_fraction": [0.5, 0.9, float("nan")]})
    row = summarize(df).iloc[0]
    assert row["runs"] == 1 and row["excluded"] == 2 and row["goodput_fraction_mean"] == 0.5
    row = summarize(df, include_incomplete=True).iloc[0]
    assert row["runs"] == 2 and row["excluded"] == 1 and row["goodput_fraction_mean"] == pytest.approx(0.7)


def _failing_for_spray(monkeypatch):
    real = fabricsim.api.run

    def run(source, *a, overrides=(), **kw):
        if "routing.policy=spray" in overrides:
            raise SimulationError("injected failure")
        return real(source, *a, overrides=overrides, **kw)
    monkeypatch.setattr(fabricsim.api, "run", run)


def test_a_point_that_fails_at_run_time_is_recorded_and_the_others_run(monkeypatch, tmp_path):
    _failing_for_spray(monkeypatch)
    df = fabricsim.compare(TINY, vary={"routing": ["spray", "ecmp"]}, output_dir=tmp_path / "c")
    assert list(df["status"]) == ["failed", "complete"]
    assert "injected failure" in df["reason"][0]
    assert math.isnan(df["goodput_fraction"][0]) and df["goodput_fraction"][1] > 0
    assert (tmp_path / "c" / "runs.csv").is_file()


def test_cli_compare_reports_a_failed_point_in_one_line_and_exits_3(monkeypatch, write, runner, tmp_path):
    _failing_for_spray(monkeypatch)
    sc = write("tiny.yaml", TINY_YAML)
    r = runner.invoke(main, ["compare", str(sc), "--vary", "routing=spray,ecmp", "-o", str(tmp_path / "c")])
    assert r.exit_code == 3, r.output
    assert "Traceback" not in r.output
    assert "warning: routing=spray seed 1: failed: SimulationError: injected failure" in r.stderr
    runs = pd.read_csv(tmp_path / "c" / "runs.csv")
    assert list(runs["status"]) == ["failed", "complete"]


def test_cli_compare_include_incomplete(write, runner, tmp_path):
    sc = write("tiny.yaml", TINY_YAML)
    for extra, runs in (([], 0), (["--include-incomplete"], 1)):
        out = tmp_path / f"c{len(extra)}"
        r = runner.invoke(main, ["compare", str(sc), "--vary", "simulation.time_limit=1us", "-o", str(out), *extra])
        assert r.exit_code == 3, r.output
        assert "time_limit" in r.stderr
        assert pd.read_csv(out / "summary.csv")["runs"].tolist() == [runs]


def test_duplicate_vary_values_are_refused():
    with pytest.raises(ConfigError, match="ecmp is given twice"):
        fabricsim.compare(TINY, vary={"routing": ["ecmp", "ecmp"]})


def test_sigterm_between_runs_ends_the_comparison_keeping_the_runs_done(tmp_path):
    import signal

    def refuse(signum, frame):
        raise RuntimeError("SIGTERM was not handled by compare")
    old = signal.signal(signal.SIGTERM, refuse)
    try:
        def progress(i, n, name, seed):
            if i == 2:
                signal.raise_signal(signal.SIGTERM)
        df = fabricsim.compare(TINY, vary={"routing": ["ecmp", "spray", "adaptive"]}, output_dir=tmp_path / "c",
                               progress=progress)
    finally:
        signal.signal(signal.SIGTERM, old)
    assert df.attrs["interrupted"] is True
    assert list(df["routing"]) == ["ecmp"] and list(df["status"]) == ["complete"]
    assert len(pd.read_csv(tmp_path / "c" / "runs.csv")) == 1


def test_compare_output_below_a_file_is_one_line_before_any_run(write, runner, tmp_path):
    sc = write("tiny.yaml", TINY_YAML)
    (tmp_path / "afile").write_text("x")
    r = runner.invoke(main, ["compare", str(sc), "--vary", "routing=ecmp", "-o", str(tmp_path / "afile" / "c")])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--output" in lines[0] and "is a file" in lines[0], r.stderr
    assert "[1/1]" not in r.output


def test_a_second_comparison_into_the_same_folder_leaves_no_stale_points(tmp_path):
    import json

    import fabricsim
    sc = {"name": "st", "topology": {"hosts_per_leaf": 2, "leaves": 2, "spines": 2},
          "traffic": {"pattern": "permutation", "message_size": "64KiB"}, "simulation": {"seed": 1}}
    out = tmp_path / "cmp"
    fabricsim.compare(sc, vary={"routing": ["ecmp", "spray"]}, output_dir=out)
    (out / "notes.txt").write_text("mine")              # not the comparison's: never touched
    assert {p.name for p in out.iterdir() if p.is_dir()} == {"routing-ecmp", "routing-spray"}
    fabricsim.compare(sc, vary={"routing": ["adaptive"]}, output_dir=out)
    assert {p.name for p in out.iterdir() if p.is_dir()} == {"routing-adaptive"}
    assert (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "compare.json").read_text())["runs"] == ["routing-adaptive/seed1"]


def test_compare_json_entries_never_reach_outside_the_folder(tmp_path):
    """Found in review: an absolute path or '.' in compare.json had its folder removed."""
    import json

    import fabricsim
    sc = {"name": "st", "topology": {"hosts_per_leaf": 2, "leaves": 2, "spines": 2},
          "traffic": {"pattern": "permutation", "message_size": "64KiB"}, "simulation": {"seed": 1}}
    victim = tmp_path / "victim"
    fabricsim.run(sc, output_dir=victim)                    # a real run folder outside
    (victim / "data.txt").write_text("keep")
    out = tmp_path / "cmp"
    fabricsim.compare(sc, vary={"routing": ["ecmp"]}, output_dir=out)
    (out / "mine").mkdir()
    (out / "mine" / "run.json").write_text("{}")
    doc = json.loads((out / "compare.json").read_text())
    doc["runs"] += [str(victim), ".", "../victim", "mine"]
    (out / "compare.json").write_text(json.dumps(doc))
    fabricsim.compare(sc, vary={"routing": ["spray"]}, output_dir=out)
    assert (victim / "data.txt").read_text() == "keep" and (victim / "summary.json").is_file()
    assert (out / "mine" / "run.json").is_file() and (out / "runs.csv").is_file()
    assert not (out / "routing-ecmp").exists()


def test_compare_refuses_a_folder_of_the_users_files(tmp_path, runner):
    from fabricsim.cli import main
    out = tmp_path / "o"
    out.mkdir()
    (out / "runs.csv").write_text("my own table\n")
    sc = tmp_path / "s.yaml"
    sc.write_text("name: c\ntopology: {hosts_per_leaf: 2, leaves: 2, spines: 2}\n"
                  "traffic: {pattern: permutation, message_size: 64KiB}\n")
    r = runner.invoke(main, ["compare", str(sc), "--vary", "routing=ecmp", "-o", str(out), "-q"])
    assert r.exit_code == 2 and "holds no fabricsim comparison" in r.output
    assert (out / "runs.csv").read_text() == "my own table\n"


def test_values_that_make_the_same_folder_name_get_their_own_folders(tmp_path):
    import fabricsim
    sc = {"name": "st", "topology": {"hosts_per_leaf": 2, "leaves": 2, "spines": 2},
          "traffic": {"pattern": "permutation", "message_size": "64KiB"}, "simulation": {"seed": 1}}
    df = fabricsim.compare(sc, vary={"description": ["a b", "a/b"]}, output_dir=tmp_path / "c")
    assert len(df) == 2
    dirs = [p for p in (tmp_path / "c").iterdir() if p.is_dir()]
    assert len(dirs) == 2 and all((d / "seed1" / "summary.json").is_file() for d in dirs)


def test_vary_values_are_read_under_the_yaml_limits():
    from fabricsim.compare import parse_vary
    from fabricsim.errors import ConfigError
    with pytest.raises(ConfigError):
        parse_vary(["description=" + "[" * 5000 + "]" * 5000])
