"""CLI commands: schema, topo list / show PRESET, interop attached, click usage errors as one line,
and the cross-run report.html of compare."""
from __future__ import annotations

import json

import pytest
import yaml

from fabricsim.cli import main
from fabricsim.topology.catalog import preset_names

from conftest import SCENARIOS, TOPOLOGIES


def test_schema_prints_the_scenario_schema_and_it_validates_every_scenario(runner):
    jsonschema = pytest.importorskip("jsonschema")
    res = runner.invoke(main, ["schema"])
    assert res.exit_code == 0, res.output
    schema = json.loads(res.output)
    assert schema["$schema"].endswith("2020-12/schema")
    v = jsonschema.Draft202012Validator(schema)
    for path in sorted(SCENARIOS.glob("*.yaml")):
        assert not list(v.iter_errors(yaml.safe_load(path.read_text()))), path.name
    topo = json.loads(runner.invoke(main, ["schema", "topology"]).output)
    w = jsonschema.Draft202012Validator(topo)
    for path in sorted(TOPOLOGIES.glob("*.yaml")):
        assert not list(w.iter_errors(yaml.safe_load(path.read_text()))), path.name


def test_schema_of_an_unknown_kind_is_one_line(runner):
    res = runner.invoke(main, ["schema", "bogus"])
    assert res.exit_code == 2
    assert len(res.output.strip().splitlines()) == 1 and res.output.startswith("error: fabricsim schema:")


def test_topo_list_names_every_preset_with_its_description(runner):
    res = runner.invoke(main, ["topo", "list"])
    assert res.exit_code == 0
    lines = res.output.strip().splitlines()
    assert [line.split()[0] for line in lines] == preset_names()
    assert all(len(line.split()) > 3 for line in lines)          # a description follows each name
    rows = json.loads(runner.invoke(main, ["topo", "list", "--json"]).output)
    assert list(rows) == preset_names()
    for name, row in rows.items():      # the line is the description's first sentence
        assert row["description"].startswith(row["summary"]) and row["summary"] in res.output, name


def test_topo_show_takes_a_preset_name(runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)              # no topologies/ folder here
    res = runner.invoke(main, ["topo", "show", "su_576", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["name"] == "su_576" and d["gpus"] == 576


def test_interop_commands_are_attached(runner):
    res = runner.invoke(main, ["interop", "--help"])
    assert res.exit_code == 0
    assert "cm-import" in res.output and "fct-export" in res.output and "nccl-table" in res.output


@pytest.mark.parametrize("args, says", [
    (["run", "SCEN", "--seed", "abc"], "'abc' is not a valid integer"),
    (["run", "SCEN", "--bogus"], "--bogus"),
    (["rn"], "'rn'"),
    (["run"], "Missing argument 'SCENARIO'"),
    (["compare", "SCEN"], "Missing option '--vary'"),
])
def test_click_usage_errors_are_one_line_exit_2(runner, args, says):
    args = [str(SCENARIOS / "quickstart.yaml") if a == "SCEN" else a for a in args]
    res = runner.invoke(main, args)
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1, res.output
    assert lines[0].startswith("error: fabricsim") and says in lines[0] and "--help" in lines[0]


def test_help_and_version_still_exit_0(runner):
    assert runner.invoke(main, ["--help"]).exit_code == 0
    assert runner.invoke(main, ["-h"]).exit_code == 0
    res = runner.invoke(main, ["--version"])
    assert res.exit_code == 0 and "fabricsim" in res.output


def test_compare_writes_a_cross_run_report(runner, write, tmp_path):
    sc = write("s.yaml", "name: c\ntopology: {hosts_per_leaf: 2, leaves: 2, spines: 2}\n"
                         "traffic: {pattern: permutation, message_size: 64KiB}\nsimulation: {seed: 1}\n")
    res = runner.invoke(main, ["compare", str(sc), "--vary", "routing=ecmp,spray", "-o", str(tmp_path / "cmp"),
                               "--quiet"])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "cmp" / "report.html").read_text()
    assert "fabricsim compare: c" in html and "ecmp" in html and "spray" in html


def test_on_an_nvlink_cluster_the_summary_and_compare_show_the_nic_goodput(runner, tmp_path):
    """Found in review: the summary line and compare's metrics showed only the NVLink-inclusive
    goodput fraction (about 0.03 on an NVLink cluster)."""
    sc = SCENARIOS / "moe_dsv3_64gpu_flat.yaml"
    res = runner.invoke(main, ["run", str(sc), "-o", str(tmp_path / "r"), "--set", "simulation.engine=flow"])
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())["effective_bandwidth"]
    line = next(x for x in res.output.splitlines() if x.startswith("scale-out"))
    assert f"{summary['nic_goodput_fraction']:.3f} of the hosts' NIC line rate" in line
    from fabricsim.compare import DEFAULT_METRICS, metrics_of
    assert "nic_goodput_fraction" in DEFAULT_METRICS
    assert metrics_of(json.loads((tmp_path / "r" / "summary.json").read_text()))["nic_goodput_fraction"] == \
        summary["nic_goodput_fraction"]
