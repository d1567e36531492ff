"""Results folders (issue 13): one folder per run by default, no stale artefacts, no silent mixing
of two scenarios in one folder, a results-format version in summary.json, run.json and Parquet."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

import fabricsim
from fabricsim.cli import main
from fabricsim.errors import ConfigError
from tests.conftest import BASE_SCENARIO, parse_error_line

TINY = {"name": "tiny", "topology": {"hosts_per_leaf": 2, "leaves": 2, "spines": 2},
        "traffic": {"pattern": "permutation", "message_size": "64KiB"}}


def test_set_variants_get_their_own_default_folders(write, runner, tmp_path, monkeypatch):
    scenario = write("scenario.yaml", BASE_SCENARIO)
    monkeypatch.chdir(tmp_path)
    for policy in ("ecmp", "spray"):
        r = runner.invoke(main, ["run", str(scenario), "-q", "--set", f"routing.policy={policy}"])
        assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["run", str(scenario), "-q", "--seed", "9"])
    assert r.exit_code == 0, r.output
    folders = sorted((tmp_path / "results").iterdir())
    assert len(folders) == 3 and all(f.name.startswith("t-") for f in folders)
    seen = {(json.loads((f / "summary.json").read_text())["routing"],
             json.loads((f / "summary.json").read_text())["seed"]) for f in folders}
    assert seen == {("ecmp", 1), ("spray", 1), ("ecmp", 9)}
    # the same scenario again lands in the same folder
    r = runner.invoke(main, ["run", str(scenario), "-q", "--set", "routing.policy=spray"])
    assert r.exit_code == 0 and len(list((tmp_path / "results").iterdir())) == 3


def test_a_rerun_replaces_every_artefact_including_report_and_plots(write, runner, tmp_path):
    scenario = write("scenario.yaml", BASE_SCENARIO)
    out = tmp_path / "o"
    assert runner.invoke(main, ["run", str(scenario), "-o", str(out), "-q", "--report"]).exit_code == 0
    assert runner.invoke(main, ["plot", str(out)]).exit_code == 0
    assert (out / "report.html").is_file() and any((out / "plots").iterdir())
    r = runner.invoke(main, ["run", str(scenario), "-o", str(out), "-q"])
    assert r.exit_code == 0, r.output
    assert not (out / "report.html").exists() and not (out / "plots").exists()
    assert (out / "summary.json").is_file()


def test_a_folder_of_another_scenario_is_refused_unless_force(write, runner, tmp_path):
    scenario = write("scenario.yaml", BASE_SCENARIO)
    out = tmp_path / "o"
    assert runner.invoke(main, ["run", str(scenario), "-o", str(out), "-q"]).exit_code == 0
    before = (out / "summary.json").read_text()
    r = runner.invoke(main, ["run", str(scenario), "-o", str(out), "-q", "--set", "routing.policy=spray"])
    assert r.exit_code == 2, r.output
    err = parse_error_line(r.stderr, out)
    assert err["field"] == "--output" and "another scenario" in err["msg"] and "--force" in err["msg"]
    assert (out / "summary.json").read_text() == before
    r = runner.invoke(main, ["run", str(scenario), "-o", str(out), "-q", "--set", "routing.policy=spray", "--force"])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "summary.json").read_text())["routing"] == "spray"


def test_a_folder_with_other_files_is_refused_and_force_keeps_them(write, runner, tmp_path):
    scenario = write("scenario.yaml", BASE_SCENARIO)
    out = tmp_path / "o"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    r = runner.invoke(main, ["run", str(scenario), "-o", str(out), "-q"])
    assert r.exit_code == 2 and "holds no fabricsim results" in r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert runner.invoke(main, ["run", str(scenario), "-o", str(out), "-q", "--force"]).exit_code == 0
    assert (out / "notes.txt").read_text() == "mine" and (out / "summary.json").is_file()


def test_the_api_refuses_another_scenarios_folder_unless_overwrite(tmp_path):
    fabricsim.run(TINY, output_dir=tmp_path / "r")
    with pytest.raises(ConfigError, match="another scenario"):
        fabricsim.run(TINY, output_dir=tmp_path / "r", overrides=["routing.policy=spray"])
    res = fabricsim.run(TINY, output_dir=tmp_path / "r", overrides=["routing.policy=spray"], overwrite=True)
    assert res.summary["routing"] == "spray"
    fabricsim.run(TINY, output_dir=tmp_path / "r", overrides=["routing.policy=spray"])   # same scenario: fine


def test_results_carry_their_format_version(tmp_path):
    from fabricsim.analysis.status import RESULTS_FORMAT
    fabricsim.run(TINY, output_dir=tmp_path / "r")
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["results_format"] == RESULTS_FORMAT
    assert json.loads((tmp_path / "r" / "run.json").read_text())["results_format"] == RESULTS_FORMAT
    for f in (tmp_path / "r").glob("*.parquet"):
        meta = pq.read_schema(f).metadata
        assert meta[b"fabricsim_results_format"] == str(RESULTS_FORMAT).encode(), f.name
    from fabricsim.analysis.load import load_results
    assert load_results(tmp_path / "r").summary["results_format"] == RESULTS_FORMAT


def test_a_folder_a_live_run_is_writing_into_is_refused(tmp_path):
    import os
    fabricsim.run(TINY, output_dir=tmp_path / "r")
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    run.update(status="running", pid=os.getppid())     # a live process other than this one
    (tmp_path / "r" / "run.json").write_text(json.dumps(run))
    with pytest.raises(ConfigError, match=f"another run \\(pid {os.getppid()}\\) is writing"):
        fabricsim.run(TINY, output_dir=tmp_path / "r")


def test_user_files_named_like_results_are_not_taken_for_a_run(write, runner, tmp_path):
    """Found in review: a folder holding only a user's plots/notes.md or messages.csv was wiped."""
    scenario = write("scenario.yaml", BASE_SCENARIO)
    out = tmp_path / "mine"
    (out / "plots").mkdir(parents=True)
    (out / "plots" / "notes.md").write_text("keep")
    (out / "messages.csv").write_text("src,dst,size_bytes\n0,1,100\n")
    r = runner.invoke(main, ["run", str(scenario), "-o", str(out), "-q"])
    assert r.exit_code == 2 and "holds no fabricsim results" in r.output
    assert (out / "plots" / "notes.md").read_text() == "keep" and (out / "messages.csv").exists()
    assert not (out / "run.json").exists()
    # with --force the run replaces its own artefacts, and still leaves the user's note in plots/
    r = runner.invoke(main, ["run", str(scenario), "-o", str(out), "-q", "--force"])
    assert r.exit_code == 0, r.output
    runner.invoke(main, ["plot", str(out)])
    r = runner.invoke(main, ["run", str(scenario), "-o", str(out), "-q"])     # a rerun: plots replaced
    assert r.exit_code == 0, r.output
    assert (out / "plots" / "notes.md").read_text() == "keep"
    assert not list((out / "plots").glob("*.png"))


def test_the_default_folder_names_the_input_files_contents(tmp_path, runner, monkeypatch):
    """Found in review: one scenario text beside two different message lists shared a folder."""
    text = ("name: m\ntopology: {hosts_per_leaf: 2, leaves: 2, spines: 2}\n"
            "traffic: {pattern: csv, path: m.csv}\nsimulation: {seed: 1}\n")
    for d, size in (("A", 1000), ("B", 2000)):
        (tmp_path / d).mkdir()
        (tmp_path / d / "s.yaml").write_text(text)
        (tmp_path / d / "m.csv").write_text(f"src,dst,size_bytes\n0,3,{size}\n")
    monkeypatch.chdir(tmp_path)
    for d in ("A", "B"):
        r = runner.invoke(main, ["run", f"{d}/s.yaml", "-q"])
        assert r.exit_code == 0, r.output
    folders = sorted((tmp_path / "results").iterdir())
    assert len(folders) == 2
    sizes = sorted(json.loads((f / "summary.json").read_text())["bytes"]["offered_payload_bytes"] for f in folders)
    assert sizes == [1000, 2000]


def test_an_unwritable_output_is_one_line(write, runner, tmp_path):
    scenario = write("scenario.yaml", BASE_SCENARIO)
    r = runner.invoke(main, ["run", str(scenario), "-o", "/proc/fabricsim-test", "-q"])
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and "Traceback" not in r.output


def test_a_folder_of_another_results_format_is_refused_on_load(tmp_path):
    from fabricsim.analysis.load import load_results
    out = tmp_path / "r"
    fabricsim.run(TINY, output_dir=out)
    load_results(out)                                   # this version's own folder loads
    s = json.loads((out / "summary.json").read_text())
    s["results_format"] = 0
    (out / "summary.json").write_text(json.dumps(s))
    with pytest.raises(ConfigError, match="results format 0"):
        load_results(out)


@pytest.mark.parametrize("command, record", [
    (["plan", "PLANS/small_moe.yaml"], "plan.csv"),
    (["sweep", "SCENARIOS/sweeps/routing.yaml", "--executor", "serial"], "points.csv"),
    (["compare", "SCENARIOS/quickstart.yaml", "--vary", "routing=ecmp"], "runs.csv"),
])
def test_plan_sweep_and_compare_never_overwrite_the_users_files(runner, tmp_path, command, record):
    """Found in the final review: `fabricsim plan -o DIR` overwrote a user's plan.csv silently."""
    from conftest import REPO
    out = tmp_path / "mine"
    out.mkdir()
    (out / record).write_text("my own table\n")
    args = [a.replace("PLANS", str(REPO / "plans")).replace("SCENARIOS", str(REPO / "scenarios")) for a in command]
    r = runner.invoke(main, args + ["-o", str(out), "-q"])
    assert r.exit_code == 2, r.output
    assert len(r.output.strip().splitlines()) == 1 and "holds no fabricsim" in r.output
    assert (out / record).read_text() == "my own table\n" and [p.name for p in out.iterdir()] == [record]
