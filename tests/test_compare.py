"""fabricsim.compare and ``fabricsim compare``: combinations x seeds, tidy table, CI, CLI errors."""
from __future__ import annotations

import math

import pandas as pd
import pytest

import fabricsim
from fabricsim.cli import main
from fabricsim.compare import DEFAULT_METRICS, summarize, t_critical
from fabricsim.errors import ConfigError

# 8 hosts (2 leaves x 4), 4 spines, every host sends across leaves
TINY = {
    "name": "tiny",
    "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 4},
    "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "128KiB"},
    "simulation": {"seed": 1, "time_limit": "1ms"},
}

TINY_YAML = """\
name: tiny
topology: {kind: leaf_spine, hosts_per_leaf: 4, leaves: 2, spines: 4}
traffic: {pattern: permutation, locality: cross_leaf, message_size: 64KiB}
routing: {policy: ecmp}
simulation: {seed: 1, time_limit: 1ms}
"""


def test_rows_are_combinations_times_seeds_with_identity_columns():
    df = fabricsim.compare(TINY, vary={"routing": ["ecmp", "spray", "adaptive"], "split": ["per_flow", "per_packet"]},
                           seeds=2)
    assert len(df) == 3 * 2 * 2
    assert list(df.columns) == ["routing", "split", "seed", "status", "reason"] + DEFAULT_METRICS
    combos = set(zip(df["routing"], df["split"], df["seed"]))
    assert combos == {(r, s, n) for r in ("ecmp", "spray", "adaptive") for s in ("per_flow", "per_packet")
                      for n in (1, 2)}


def test_dotted_keys_and_explicit_seed_list():
    df = fabricsim.compare(TINY, vary={"routing.policy": ["spray"]}, seeds=[7, 9])
    assert list(df["routing.policy"]) == ["spray", "spray"]
    assert list(df["seed"]) == [7, 9]


def test_default_seed_is_the_scenarios():
    df = fabricsim.compare(dict(TINY, simulation={"seed": 5}), vary={"routing": ["ecmp"]})
    assert list(df["seed"]) == [5]


def test_same_seed_is_reproducible():
    kw = dict(vary={"routing": ["ecmp", "spray"]}, seeds=2)
    a = fabricsim.compare(TINY, **kw).drop(columns="wall_time_s")
    b = fabricsim.compare(TINY, **kw).drop(columns="wall_time_s")
    pd.testing.assert_frame_equal(a, b)


def test_ci_of_a_constant_column_is_zero_and_t_values():
    df = pd.DataFrame({"routing": ["a"] * 3 + ["b"] * 2, "seed": [1, 2, 3, 1, 2],
                       "x": [2.5, 2.5, 2.5, 1.0, 3.0]})
    s = summarize(df).set_index("routing")
    assert s.loc["a", "x_mean"] == 2.5 and s.loc["a", "x_ci95"] == 0
    assert s.loc["a", "runs"] == 3
    # two seeds: t(1) = 12.706, sd = sqrt(2), half-width = 12.706 * sqrt(2) / sqrt(2)
    assert s.loc["b", "x_mean"] == 2.0
    assert s.loc["b", "x_ci95"] == pytest.approx(12.706)
    assert t_critical(1) == 12.706 and t_critical(30) == 2.042 and t_critical(100) == 1.960


def test_single_run_has_no_ci():
    df = pd.DataFrame({"routing": ["a"], "seed": [1], "x": [1.0]})
    assert math.isnan(summarize(df)["x_ci95"][0])


def test_adaptive_beats_ecmp_on_cross_leaf_permutation():
    df = fabricsim.compare(dict(TINY, traffic=dict(TINY["traffic"], message_size="256KiB")),
                           vary={"routing": ["ecmp", "adaptive"]}, seeds=3)
    mean = df.groupby("routing")["completion_time_ratio"].mean()
    assert mean["adaptive"] > mean["ecmp"]


def test_bad_vary_raises_before_running(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=r"--vary routing=ecmp,bogus.*unknown routing policy"):
        fabricsim.compare(TINY, vary={"routing": ["ecmp", "bogus"]}, output_dir=out)
    with pytest.raises(ConfigError, match=r"--vary nosuch\.field=1"):
        fabricsim.compare(TINY, vary={"nosuch.field": [1]}, output_dir=out)
    assert not out.exists()


def test_output_dir_layout(tmp_path):
    out = tmp_path / "cmp"
    fabricsim.compare(TINY, vary={"routing": ["ecmp", "spray"]}, seeds=2, output_dir=out)
    assert (out / "effective_bandwidth.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in ("runs.csv", "runs.parquet", "summary.csv"):
        assert (out / name).is_file()
    assert (out / "routing-ecmp" / "seed1" / "summary.json").is_file()
    assert (out / "routing-spray" / "seed2" / "summary.json").is_file()
    assert len(pd.read_csv(out / "runs.csv")) == 4
    assert len(pd.read_csv(out / "summary.csv")) == 2


def test_cli_happy_path(write, runner, tmp_path):
    sc = write("tiny.yaml", TINY_YAML)
    out = tmp_path / "o"
    r = runner.invoke(main, ["compare", str(sc), "--vary", "routing=ecmp,spray", "--vary", "cc=none",
                             "--seeds", "2", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "goodput_fraction" in r.output and "±" in r.output
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 4 and list(runs.columns[:3]) == ["routing", "cc", "seed"]
    assert (out / "summary.csv").is_file()


def test_cli_default_output_folder(write, runner, tmp_path, monkeypatch):
    sc = write("tiny.yaml", TINY_YAML)
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(main, ["compare", str(sc), "--vary", "routing=spray", "--quiet"])
    assert r.exit_code == 0, r.output
    assert r.output == ""
    assert (tmp_path / "results" / "tiny-compare" / "runs.csv").is_file()


@pytest.mark.parametrize("item, named", [
    ("nosuch.key=1,2", "--vary nosuch.key=1,2"),
    ("routing=ecmp,bogus", "--vary routing=ecmp,bogus"),
    ("routing", "--vary routing"),
    ("routing=ecmp,", "--vary routing=ecmp,"),
    ("routing=ecmp,ecmp", "--vary routing=ecmp,ecmp"),
])
def test_cli_bad_vary_exits_2_with_one_line(item, named, write, runner, tmp_path, monkeypatch):
    sc = write("tiny.yaml", TINY_YAML)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "o"
    r = runner.invoke(main, ["compare", str(sc), "--vary", item, "-o", str(out)])
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0]
    assert not out.exists()
    assert not (tmp_path / "results").exists()


def test_run_and_compare_build_each_topology_once(monkeypatch, tmp_path):
    """`fabricsim run` builds the topology once (it used to build it for validation and again for
    the run), and `compare` once for all its validations and runs of one topology section (it built
    it per combination and per run); a varied topology is built once per value. Results equal
    separate runs."""
    import fabricsim.api as api
    from click.testing import CliRunner
    from fabricsim.cli import main
    calls = []
    inner = api.build_topology

    def counted(*args, **kwargs):
        calls.append(1)
        return inner(*args, **kwargs)
    monkeypatch.setattr(api, "build_topology", counted)
    sc = {"name": "once", "topology": {"hosts_per_leaf": 2, "leaves": 2, "spines": 2},
          "traffic": {"pattern": "permutation", "message_size": "64KiB"}}
    import yaml
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sc))
    assert CliRunner().invoke(main, ["run", str(path), "-q", "-o", str(tmp_path / "r")]).exit_code == 0
    assert len(calls) == 1
    calls.clear()
    df = fabricsim.compare(sc, vary={"routing": ["ecmp", "spray"]}, seeds=3)
    assert len(df) == 6 and len(calls) == 1
    calls.clear()
    df2 = fabricsim.compare(sc, vary={"topology.spines": [2, 4], "routing": ["ecmp", "spray"]}, seeds=2)
    assert len(calls) == 2
    calls.clear()      # the CLI's own checks before the runs share the runs' builds (they built it N + 1 times)
    r = CliRunner().invoke(main, ["compare", str(path), "--vary", "routing=ecmp,spray,adaptive", "-q",
                                  "-o", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    assert len(calls) == 1
    for row in df.itertuples():
        alone = fabricsim.run(dict(sc, routing={"policy": row.routing}), seed=row.seed)
        assert alone.summary["effective_bandwidth"]["goodput_fraction"] == pytest.approx(row.goodput_fraction, rel=0, abs=0)
    assert len(df2) == 8


def test_a_misspelled_per_operation_metric_is_an_error_naming_the_keys():
    with pytest.raises(ConfigError) as e:
        fabricsim.compare({"name": "x"}, metrics=["allreduse_time_us"])
    assert e.value.field == "metrics" and "allreduce" in str(e.value) and "dispatch" in str(e.value)
