"""fabricsim sweep: the sweep file, executors that agree, failures recorded, resume, Ctrl-C, CLI."""
from __future__ import annotations

import json

import pandas as pd
import pytest

import fabricsim.api
from fabricsim.cli import main
from fabricsim.errors import ConfigError
from fabricsim.sweep.runner import run_sweep
from fabricsim.sweep.spec import load_spec, parse_spec

from conftest import REPO

BASE = """\
name: s
topology: {kind: leaf_spine, hosts_per_leaf: 2, leaves: 2, spines: 2}
traffic: {pattern: permutation, message_size: 64KiB}
routing: {policy: ecmp}
simulation: {seed: 1, time_limit: 1ms}
"""

SWEEP = """\
name: tiny
base: base.yaml
grid:
  routing: [ecmp, spray]
seeds: 2
"""

# wall time is the one figure that differs from run to run
VOLATILE = ["wall_time_s"]


def planted_failure(source, output_dir=None, overrides=(), seed=None, overwrite=False):
    """A point's run function (module-level: the workers import it by name) that fails for
    routing spray, seed 2, as a simulator crash would, and runs every other point for real."""
    if "routing.policy=spray" in overrides and seed == 2:
        raise RuntimeError("planted failure")
    return fabricsim.api.run(source, output_dir=output_dir, overrides=overrides, seed=seed, overwrite=overwrite)


def crashing_run(source, output_dir=None, overrides=(), seed=None, overwrite=False):
    """A point's run function whose worker process dies (as killed for memory) for routing spray,
    seed 2. Only ever run in a worker process."""
    import os
    if "routing.policy=spray" in overrides and seed == 2:
        os._exit(3)
    return fabricsim.api.run(source, output_dir=output_dir, overrides=overrides, seed=seed, overwrite=overwrite)


@pytest.fixture
def sweep_file(write):
    write("base.yaml", BASE)
    return write("tiny.sweep.yaml", SWEEP)


def _stable(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=VOLATILE).reset_index(drop=True)


# --- the file ---------------------------------------------------------------------------------

def test_grid_is_crossed_zip_groups_vary_together_ranges_expand(tmp_path):
    spec = parse_spec({"base": {"name": "x"}, "grid": {"routing": ["ecmp", "spray"],
                                                       "topology.spines": {"from": 2, "to": 6, "step": 2}},
                       "zip": [{"topology.leaves": [2, 4], "topology.hosts_per_leaf": [4, 2]}],
                       "seeds": [5, 7]}, "<t>", base_dir=tmp_path)
    pts = spec.points()
    assert len(pts) == 2 * 3 * 2 * 2
    assert spec.keys == ["routing", "topology.spines", "topology.leaves", "topology.hosts_per_leaf"]
    assert pts[0].identity == {"routing": "ecmp", "topology.spines": 2, "topology.leaves": 2,
                               "topology.hosts_per_leaf": 4} and pts[0].seed == 5
    assert pts[1].seed == 7 and pts[2].identity["topology.leaves"] == 4
    assert pts[2].identity["topology.hosts_per_leaf"] == 2          # zipped, not crossed
    assert sorted({p.identity["topology.spines"] for p in pts}) == [2, 4, 6]
    assert "topology.spines=2" in pts[0].overrides and "routing.policy=ecmp" in pts[0].overrides
    geo = parse_spec({"base": {"name": "x"}, "grid": {"traffic.qps_per_message": {"from": 1, "to": 8, "factor": 2}}})
    assert [p.identity["traffic.qps_per_message"] for p in geo.points()] == [1, 2, 4, 8]


def test_a_count_of_seeds_starts_at_the_base_seed(write, tmp_path):
    write("base.yaml", BASE.replace("seed: 1", "seed: 10"))
    f = write("s.yaml", "base: base.yaml\nseeds: 3\n")
    from fabricsim.sweep.runner import check
    assert [p.seed for p in check(load_spec(f))] == [10, 11, 12]


@pytest.mark.parametrize("body, named", [
    ("base: base.yaml\ngird: {routing: [ecmp]}\n", "s.yaml:2: gird: unknown field"),
    ("base: nowhere.yaml\n", "s.yaml:1: base: nowhere.yaml: scenario file not found"),
    ("grid: {routing: [ecmp]}\n", "s.yaml:1: base: missing"),
    ("base: base.yaml\ngrid: {routing: [ecmp, sprya]}\n", "s.yaml:2: grid.routing[1]: unknown routing policy 'sprya'"),
    ("base: base.yaml\ngrid:\n  routing:\n    - ecmp\n    - sprya\n", "s.yaml:5: grid.routing[1]: unknown routing"),
    ("base: base.yaml\ngrid: {topology.spiness: [1, 2]}\n", "grid.topology.spiness[0]: unknown field"),
    ("base: base.yaml\ngrid: {routing: []}\n", "s.yaml:2: grid.routing: []"),
    ("base: base.yaml\ngrid: {routing: [ecmp, ecmp]}\n", "grid.routing: value ecmp is given twice"),
    ("base: base.yaml\ngrid: {topology.spines: {from: 4, to: 2, step: 1}}\n", "grid.topology.spines.to: to 2 is below"),
    ("base: base.yaml\ngrid: {topology.spines: {from: 1, to: 2}}\n", "grid.topology.spines: a range needs"),
    ("base: base.yaml\nzip: [{topology.leaves: [2, 4], topology.spines: [2]}]\n",
     "zip[0].topology.spines: 1 values where topology.leaves has 2"),
    ("base: base.yaml\nzip: [{traffic.message_size: [1KiB, zz]}]\n", "zip[0].traffic.message_size[1]: cannot read 'zz'"),
    ("base: base.yaml\ngrid: {simulation.seed: [1, 2]}\n", "grid.simulation.seed: vary the seed with the seeds field"),
    ("base: base.yaml\ngrid: {routing: [ecmp], routing.policy: [spray]}\n", "routing.policy is varied twice"),
    ("base: base.yaml\nseeds: 0\n", "s.yaml:2: seeds: 0 (allowed"),
    ("base: base.yaml\nseeds: [1, 1]\n", "seeds: [1, 1]: a seed is given twice"),
    ("base: base.yaml\ngrid: [routing]\n", "s.yaml:2: grid: allowed: a mapping"),
    ("base: {name: x, topology: {kind: leaf_spin}}\n", "s.yaml:1: base: topology"),
    ("base: base.yaml\ngrid: {traffic.message_size: [64KiB, 65536]}\n", "two points resolve to the same scenario"),
    ("- a\n", "s.yaml:1: a sweep file is a mapping"),
    ("base: base.yaml\nbase: base.yaml\n", "s.yaml:2: base: duplicate key"),
])
def test_bad_sweep_files_exit_2_naming_file_and_field_and_write_nothing(body, named, write, runner, tmp_path):
    write("base.yaml", BASE)
    f = write("s.yaml", body)
    out = tmp_path / "out"
    r = runner.invoke(main, ["sweep", str(f), "-o", str(out), "--executor", "serial", "-q"])
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert named in lines[0], lines[0]
    assert not out.exists()


def test_the_bundled_example_sweep_validates():
    from fabricsim.sweep.runner import check
    files = sorted((REPO / "scenarios" / "sweeps").glob("*.yaml"))
    assert files
    for f in files:
        pts = check(load_spec(f))
        assert len(pts) >= 2 and len({p.point_id for p in pts}) == len(pts)


# --- executors --------------------------------------------------------------------------------

def test_serial_processes_and_dask_give_identical_results(sweep_file, tmp_path):
    pytest.importorskip("distributed")
    from fabricsim.sweep.executor import DaskExecutor
    serial = run_sweep(sweep_file, tmp_path / "serial", executor="serial")
    procs = run_sweep(sweep_file, tmp_path / "procs", executor="processes", jobs=2)
    # a LocalCluster of 2 single-threaded worker processes on loopback (what --executor dask starts)
    dask = run_sweep(sweep_file, tmp_path / "dask", executor=DaskExecutor(jobs=2))
    assert len(serial.table) == 4 and (serial.table["status"] == "complete").all()
    assert list(serial.table["routing"]) == ["ecmp", "ecmp", "spray", "spray"]
    assert list(serial.table["seed"]) == [1, 2, 1, 2]
    pd.testing.assert_frame_equal(_stable(serial.table), _stable(procs.table))
    pd.testing.assert_frame_equal(_stable(serial.table), _stable(dask.table))
    # the stored datasets agree too (same rows, whichever order the points finished in)
    for name in ("procs", "dask"):
        a = pd.read_csv(tmp_path / "serial" / "summary.csv").drop(columns=["wall_time_s_mean", "wall_time_s_ci95"])
        b = pd.read_csv(tmp_path / name / "summary.csv").drop(columns=["wall_time_s_mean", "wall_time_s_ci95"])
        pd.testing.assert_frame_equal(a, b)


def test_points_match_compare_figures(sweep_file, tmp_path):
    import fabricsim
    res = run_sweep(sweep_file, tmp_path / "s", executor="serial")
    df = fabricsim.compare(str(sweep_file.parent / "base.yaml"), vary={"routing": ["ecmp", "spray"]}, seeds=2)
    cols = [c for c in df.columns if c not in VOLATILE]
    pd.testing.assert_frame_equal(res.table[cols].reset_index(drop=True), df[cols].reset_index(drop=True),
                                  check_dtype=False)


@pytest.mark.parametrize("executor", ["serial", "processes"])
def test_a_failing_point_is_recorded_while_the_others_complete(executor, sweep_file, tmp_path):
    res = run_sweep(sweep_file, tmp_path / "out", executor=executor, jobs=2, run=planted_failure)
    t = res.table
    assert len(t) == 4
    bad = t[t["status"] == "failed"]
    assert list(zip(bad["routing"], bad["seed"])) == [("spray", 2)]
    assert bad["reason"].iloc[0] == "RuntimeError: planted failure"
    assert bad["goodput_fraction"].isna().all()
    assert (t.drop(bad.index)["status"] == "complete").all() and t.drop(bad.index)["goodput_fraction"].notna().all()
    assert res.failed == 1 and res.ran == 4
    # the dataset keeps it in its own partition, and a resume does not run it again...
    assert list((tmp_path / "out" / "points" / "status=failed").glob("*.parquet"))
    again = run_sweep(sweep_file, tmp_path / "out", executor="serial", run=planted_failure)
    assert again.ran == 0 and again.skipped == 4
    # ...unless asked to
    retried = run_sweep(sweep_file, tmp_path / "out", executor="serial", retry_failed=True)
    assert retried.ran == 1 and (retried.table["status"] == "complete").all()


def test_a_worker_that_dies_fails_its_own_point_only(sweep_file, tmp_path):
    res = run_sweep(sweep_file, tmp_path / "out", executor="processes", jobs=2, run=crashing_run)
    t = res.table
    assert list(t["status"]) == ["complete", "complete", "complete", "failed"]
    assert t["reason"].iloc[3].startswith("WorkerDied: the worker process running this point died")


def test_a_resumed_sweep_runs_only_the_missing_points(sweep_file, tmp_path, monkeypatch):
    calls = []
    real = fabricsim.api.run

    def counted(source, **kw):
        calls.append((tuple(kw.get("overrides", ())), kw.get("seed")))
        if len(calls) == 3 and not getattr(counted, "resumed", False):
            raise KeyboardInterrupt            # Ctrl-C during the third point
        return real(source, **kw)

    monkeypatch.setattr(fabricsim.api, "run", counted)
    out = tmp_path / "out"
    first = run_sweep(sweep_file, out, executor="serial")
    assert first.interrupted and len(first.table) == 2            # the finished points are kept
    assert list(zip(first.table["routing"], first.table["seed"])) == [("ecmp", 1), ("ecmp", 2)]
    counted.resumed = True
    calls.clear()
    second = run_sweep(sweep_file, out, executor="serial")
    assert len(calls) == 2 and second.ran == 2 and second.skipped == 2 and not second.interrupted
    assert sorted(s for _, s in calls) == [1, 2] and all("routing.policy=spray" in o for o, _ in calls)
    fresh = run_sweep(sweep_file, tmp_path / "fresh", executor="serial")
    pd.testing.assert_frame_equal(_stable(second.table), _stable(fresh.table))
    # a wider grid runs only its new points
    sweep_file.write_text(SWEEP.replace("[ecmp, spray]", "[ecmp, spray, adaptive]"))
    calls.clear()
    third = run_sweep(sweep_file, out, executor="serial")
    assert len(calls) == 2 and third.skipped == 4 and len(third.table) == 6
    assert list(third.table["routing"]) == ["ecmp"] * 2 + ["spray"] * 2 + ["adaptive"] * 2


def test_results_layout_and_keep_runs(sweep_file, tmp_path):
    out = tmp_path / "out"
    res = run_sweep(sweep_file, out, executor="serial", keep_runs=True)
    ds = pd.read_parquet(out / "points")                     # one dataset, readable as a whole
    assert len(ds) == 4 and set(ds["status"].astype(str)) == {"complete"}
    assert {"routing", "seed", "point_id", "reason", "goodput_fraction"} <= set(ds.columns)
    doc = json.loads((out / "sweep.json").read_text())
    assert [p["point_id"] for p in doc["points"]] == list(res.table["point_id"])
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary["routing"]) == ["ecmp", "spray"] and list(summary["runs"]) == [2, 2]
    assert len(pd.read_csv(out / "points.csv")) == 4
    for pid in res.table["point_id"]:
        assert json.loads((out / "runs" / pid / "run.json").read_text())["status"] == "complete"


def test_cli_sweep_progress_and_exit_codes(sweep_file, runner, tmp_path):
    out = tmp_path / "out"
    r = runner.invoke(main, ["sweep", str(sweep_file), "-o", str(out), "--executor", "serial"])
    assert r.exit_code == 0, r.output
    assert "sweep: 4/4 done, 0 running, 0 remaining" in r.stderr
    assert "routing" in r.stdout and "4 run, 0 done before" in r.stdout
    r = runner.invoke(main, ["sweep", str(sweep_file), "-o", str(out), "--executor", "serial", "-q"])
    assert r.exit_code == 0 and r.stdout == "" and r.stderr == ""
    r = runner.invoke(main, ["sweep", str(sweep_file), "-o", str(out), "--executor", "serial",
                             "--scheduler", "tcp://127.0.0.1:1"])
    assert r.exit_code == 2 and "--scheduler needs --executor dask" in r.stderr


# --- compare on the executors -----------------------------------------------------------------

def test_cli_compare_jobs_2_gives_the_same_table_as_jobs_1(write, runner, tmp_path):
    f = write("base.yaml", BASE)
    tables = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}"
        r = runner.invoke(main, ["compare", str(f), "--vary", "routing=ecmp,spray", "--seeds", "2", "-o", str(out),
                                 "--jobs", jobs, "-q"])
        assert r.exit_code == 0, r.output
        tables[jobs] = (pd.read_csv(out / "runs.csv").drop(columns=VOLATILE),
                        pd.read_csv(out / "summary.csv").drop(columns=["wall_time_s_mean", "wall_time_s_ci95"]))
        assert sorted(p.name for p in (out / "routing-spray").iterdir()) == ["seed1", "seed2"]
    pd.testing.assert_frame_equal(tables["1"][0], tables["2"][0])
    pd.testing.assert_frame_equal(tables["1"][1], tables["2"][1])
    assert list(tables["2"][0]["routing"]) == ["ecmp", "ecmp", "spray", "spray"]


def test_compare_on_the_serial_executor_matches_its_own_loop(write, tmp_path, monkeypatch):
    import fabricsim
    f = write("base.yaml", BASE)
    serial = fabricsim.compare(str(f), vary={"routing": ["ecmp", "spray"]}, seeds=2)
    on_ex = fabricsim.compare(str(f), vary={"routing": ["ecmp", "spray"]}, seeds=2, executor="serial")
    pd.testing.assert_frame_equal(_stable(serial), _stable(on_ex))
    with pytest.raises(ConfigError, match="unknown executor 'threads'"):
        fabricsim.compare(str(f), vary={"routing": ["ecmp"]}, executor="threads")


def test_dask_without_the_extra_exits_2_before_writing(sweep_file, runner, tmp_path, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "distributed", None)      # `import distributed` now fails
    out = tmp_path / "out"
    r = runner.invoke(main, ["sweep", str(sweep_file), "-o", str(out), "--executor", "dask"])
    assert r.exit_code == 2 and "pip install 'fabricsim[dask]'" in r.stderr, r.output
    assert not out.exists()


def test_an_unknown_executor_and_bad_jobs_are_config_errors(sweep_file, tmp_path):
    from fabricsim.sweep.executor import EXECUTORS, make_executor
    assert {"serial", "processes", "dask"} <= set(EXECUTORS.names())
    with pytest.raises(ConfigError, match="--executor: unknown executor 'proceses'.*did you mean 'processes'"):
        make_executor("proceses")
    with pytest.raises(ConfigError, match="--jobs: 0"):
        make_executor("processes", jobs=0)
    with pytest.raises(ConfigError, match="takes no scheduler"):
        make_executor("processes", scheduler="tcp://127.0.0.1:1")


def test_cli_sweep_failed_point_exits_3_and_ctrl_c_exits_130_keeping_finished_points(sweep_file, runner, tmp_path,
                                                                                     monkeypatch):
    real = fabricsim.api.run
    monkeypatch.setattr(fabricsim.api, "run", _planted_in_process(real))
    out = tmp_path / "out"
    r = runner.invoke(main, ["sweep", str(sweep_file), "-o", str(out), "--executor", "serial", "-q"])
    assert r.exit_code == 3, r.output
    assert r.stderr.strip() == "warning: routing=spray seed 2: failed: RuntimeError: planted failure"
    calls = []

    def interrupted(source, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(source, **kw)

    monkeypatch.setattr(fabricsim.api, "run", interrupted)
    out2 = tmp_path / "out2"
    r = runner.invoke(main, ["sweep", str(sweep_file), "-o", str(out2), "--executor", "serial", "-q"])
    assert r.exit_code == 130, r.output
    assert "interrupted: 1 of 4 points are in" in r.stderr
    assert len(pd.read_parquet(out2 / "points")) == 1


def _planted_in_process(real):
    """``fabricsim.api.run`` replaced in this process: spray seed 2 fails, the rest run for real."""

    def run(source, output_dir=None, overrides=(), seed=None, overwrite=False):
        if "routing.policy=spray" in overrides and seed == 2:
            raise RuntimeError("planted failure")
        return real(source, output_dir=output_dir, overrides=overrides, seed=seed, overwrite=overwrite)
    return run


def test_cli_sweep_check_counts_points_and_writes_nothing(sweep_file, runner, tmp_path):
    out = tmp_path / "out"
    r = runner.invoke(main, ["sweep", str(sweep_file), "-o", str(out), "--check"])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == f"{sweep_file}: ok (4 points: 2 combinations x 2 seeds; 0 done in {out}, 4 to run)"
    assert not out.exists()
    run_sweep(sweep_file, out, executor="serial", run=planted_failure)
    r = runner.invoke(main, ["sweep", str(sweep_file), "-o", str(out), "--check", "--retry-failed"])
    assert "3 done in" in r.stdout and "1 to run" in r.stdout
    assert len(pd.read_parquet(out / "points")) == 4         # --check dropped nothing


@pytest.mark.parametrize("cmd", [["sweep", "{sweep}"], ["compare", "{base}", "--vary", "routing=ecmp"]])
def test_cli_unknown_executor_exits_2_with_did_you_mean_and_writes_nothing(cmd, sweep_file, runner, tmp_path):
    out = tmp_path / "out"
    args = [a.format(sweep=sweep_file, base=sweep_file.parent / "base.yaml") for a in cmd]
    r = runner.invoke(main, args + ["-o", str(out), "--executor", "proceses"])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip() == ("error: --executor: unknown executor 'proceses' (allowed: dask, processes, serial); "
                                "did you mean 'processes'?")
    assert not out.exists()
