"""Topology presets: installed with the package, found by name from any directory."""
from __future__ import annotations

import tomllib

import pytest
import yaml

import fabricsim
from fabricsim.cli import main
from fabricsim.topology import load_topology_file
from fabricsim.topology.catalog import preset_description, preset_names, preset_path

from conftest import REPO, TOPOLOGIES, parse_error_line

SMALL = """\
name: p
topology: {preset: leaf_spine_32x400g}
traffic: {pattern: permutation, message_size: 64KiB}
simulation: {seed: 3}
"""


def test_every_topology_file_in_the_checkout_is_a_preset():
    assert preset_names() == sorted(p.stem for p in TOPOLOGIES.glob("*.yaml"))
    assert len(preset_names()) >= 10


LARGE = ("gb300_8192", "gb300_4096", "hgx8_16384")   # built in tests/test_topology_cluster.py


def test_each_preset_has_a_description():
    for name in preset_names():
        assert preset_description(name), name     # the leading comment, printed by `topo list`


@pytest.mark.parametrize("name", [n for n in preset_names() if not n.startswith(LARGE)])
def test_each_small_preset_builds_under_its_name(name):
    topo = load_topology_file(preset_path(name))
    assert topo.name == name and topo.hosts


def test_presets_are_package_data():
    # what a wheel installs: the package-data glob must cover every preset file
    conf = tomllib.loads((REPO / "pyproject.toml").read_text())
    globs = conf["tool"]["setuptools"]["package-data"]["fabricsim.topology"]
    folder = preset_path(preset_names()[0]).parent
    assert folder.parent.name == "topology"
    covered = {p.name for g in globs for p in folder.parent.glob(g)}
    assert covered == {f"{n}.yaml" for n in preset_names()}


def test_a_scenario_names_a_preset_from_any_directory(tmp_path, monkeypatch):
    # the scenario lives outside the checkout and the working directory is elsewhere too
    (tmp_path / "s").mkdir()
    sc = tmp_path / "s" / "p.yaml"
    sc.write_text(SMALL)
    monkeypatch.chdir(tmp_path)
    by_name = fabricsim.run(sc)
    by_file = fabricsim.run(yaml.safe_load(SMALL.replace(
        "{preset: leaf_spine_32x400g}", "{kind: file, path: " + str(TOPOLOGIES / "leaf_spine_32x400g.yaml") + "}")))
    assert by_name.summary["messages"]["completed"] == by_name.summary["messages"]["total"] == 32
    assert by_name.messages.equals(by_file.messages)
    # `kind: preset` may be spelled out
    spelled = fabricsim.run(yaml.safe_load(SMALL.replace("{preset:", "{kind: preset, preset:")))
    assert spelled.messages.equals(by_name.messages)


def test_unknown_preset_is_one_line_with_a_suggestion(write, runner):
    sc = write("s.yaml", SMALL.replace("leaf_spine_32x400g", "leaf_spine_32x400"))
    res = runner.invoke(main, ["validate", str(sc)])
    assert res.exit_code == 2
    err = parse_error_line(res.output, sc)
    assert err["field"] == "topology.preset"
    assert "did you mean 'leaf_spine_32x400g'" in err["msg"] and "allowed:" in err["msg"]


def test_a_preset_takes_no_other_fields(write, runner):
    sc = write("s.yaml", SMALL.replace("{preset: leaf_spine_32x400g}", "{preset: leaf_spine_32x400g, spines: 2}"))
    res = runner.invoke(main, ["validate", str(sc)])
    assert res.exit_code == 2
    err = parse_error_line(res.output, sc)
    assert err["field"] == "topology.spines"


def test_the_json_schema_takes_a_preset_with_or_without_its_kind():
    jsonschema = pytest.importorskip("jsonschema")
    from fabricsim.config.jsonschema import scenario_json_schema, topology_json_schema
    v = jsonschema.Draft202012Validator(scenario_json_schema())

    def ok(topology):
        return not list(v.iter_errors({"name": "a", "topology": topology}))

    assert ok({"preset": "su_576"}) and ok({"kind": "preset", "preset": "su_576"})
    assert ok({"hosts_per_leaf": 2})                       # still the leaf-spine default
    assert not ok({"preset": "su_576", "spines": 2}) and not ok({"kind": "leaf_spine", "preset": "su_576"})
    # a topology file holds a topology: it cannot name a preset
    assert list(jsonschema.Draft202012Validator(topology_json_schema()).iter_errors({"preset": "su_576"}))
