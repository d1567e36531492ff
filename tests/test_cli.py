"""Malformed scenarios through the command line.

Every case is run through both ``fabricsim validate`` and ``fabricsim run -o DIR``: each must
exit with status 2, print exactly one line ``error: FILE[:LINE]: field.path: message`` naming
the right file and dotted field, and (for ``run``) create no output folder.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from fabricsim.cli import main

from conftest import BASE_SCENARIO, TOPOLOGIES, parse_error_line


def edit(old: str, new: str, text: str = BASE_SCENARIO) -> str:
    """BASE_SCENARIO with one exact substring replaced (fails loudly if it is not there)."""
    assert old in text, old
    return text.replace(old, new, 1)


@dataclass
class Case:
    id: str
    scenario: str  # text of scenario.yaml
    field: str | None  # expected dotted field path (None: the error names no field)
    says: tuple[str, ...]  # substrings the message must contain
    line: int | None = None  # expected line, where the tests pin it down
    extra_files: dict = field(default_factory=dict)  # other files next to scenario.yaml
    args: tuple[str, ...] = ()  # extra CLI args (e.g. --set)
    source: str = "scenario.yaml"  # the file the error must name


EXPLICIT_HEAD = """\
name: t
topology:
  kind: explicit
  nodes:
    - {name: h0, type: host}
    - {name: h1, type: host}
    - {name: s0, type: switch}
    - {name: s1, type: switch}
  links:
"""

CASES = [
    Case("unknown_top_level_key", BASE_SCENARIO + "colour: blue\n", "colour",
         ("unknown field", "allowed:", "topology", "traffic"), line=15),
    Case("unknown_key_in_section", edit("  spines: 2\n", "  spines: 2\n  spinez: 2\n"), "topology.spinez",
         ("unknown field", "did you mean 'spines'"), line=7),
    Case("negative_size", edit("64KiB", "-4KiB"), "traffic.message_size", ("-4KiB", "negative"), line=9),
    Case("bad_unit", edit("64KiB", "4 parsecs"), "traffic.message_size",
         ("unknown size unit 'parsecs'", "allowed:", "KiB"), line=9),
    Case("size_in_bits", edit("64KiB", "64Kb"), "traffic.message_size", ("bytes", "not bits")),
    Case("unknown_policy_did_you_mean", edit("policy: ecmp", "policy: adaptiv"), "routing.policy",
         ("unknown routing policy 'adaptiv'", "allowed:", "did you mean 'adaptive'"), line=11),
    Case("param_of_policy_without_params", edit("policy: ecmp\n", "policy: ecmp\n  gap: 1us\n"), "routing.gap",
         ("'ecmp' takes no parameters",), line=12),
    Case("unknown_param_of_policy", edit("policy: ecmp\n", "policy: flowlet\n  gapp: 5us\n"), "routing.gapp",
         ("unknown field", "did you mean 'gap'"), line=12),
    Case("zero_rate", edit("  spines: 2\n", "  spines: 2\n  host_link: {rate: 0Gbps}\n"),
         "topology.host_link.rate", ("0Gbps", "greater than zero"), line=7),
    Case("negative_rate", edit("  spines: 2\n", "  spines: 2\n  fabric_link:\n    rate: -400Gbps\n"),
         "topology.fabric_link.rate", ("negative",), line=8),
    Case("time_without_unit", edit("time_limit: 1ms", "time_limit: 10"), "simulation.time_limit",
         ("needs a unit",), line=14),
    Case("negative_seed", edit("seed: 1", "seed: -1"), "simulation.seed", ("-1", ">= 0"), line=13),
    Case("seed_not_an_integer", edit("seed: 1", "seed: yes"), "simulation.seed", ("whole number",), line=13),
    Case("unknown_topology_kind", edit("kind: leaf_spine", "kind: torus"), "topology.kind",
         ("'torus'", "leaf_spine", "explicit")),
    Case("incast_receiver_outside_topology",
         edit("  pattern: permutation\n", "  pattern: incast\n  senders: 2\n  receiver: 4\n"),
         "traffic.receiver", ("host 4", "0..3"), line=10),
    Case("incast_too_many_senders",
         edit("  pattern: permutation\n", "  pattern: incast\n  senders: 4\n  receiver: 0\n"),
         "traffic.senders", ("4 senders", "1..3"), line=9),
    Case("oversubscription_inconsistent", edit("  spines: 2\n", "  spines: 2\n  oversubscription: 2\n"),
         "topology.oversubscription", ("disagrees", "= 1"), line=7),
    Case("leaves_without_spines", edit("spines: 2", "spines: 0"), "topology.spines",
         ("at least one spine",), line=6),
    Case("csv_gpu_out_of_range",
         edit("  pattern: permutation\n  message_size: 64KiB\n", "  pattern: csv\n  path: msgs.csv\n"),
         "dst", ("9 out of range", "0..3"), line=3, source="msgs.csv",
         extra_files={"msgs.csv": "src,dst,size\n0,1,4KiB\n1,9,4KiB\n2,3,4KiB\n"}),
    Case("csv_missing_column",
         edit("  pattern: permutation\n  message_size: 64KiB\n", "  pattern: csv\n  path: msgs.csv\n"),
         "dst", ("missing column dst", "have: size, src"), line=1, source="msgs.csv",
         extra_files={"msgs.csv": "src,size\n0,4KiB\n"}),
    Case("csv_dependency_cycle",
         edit("  pattern: permutation\n  message_size: 64KiB\n", "  pattern: csv\n  path: msgs.csv\n"),
         "deps", ("cycle", "1 -> 2", "2 -> 1"), line=3, source="msgs.csv",
         extra_files={"msgs.csv": "id,src,dst,size,deps\n0,0,1,4KiB,\n1,1,2,4KiB,2\n2,2,3,4KiB,1\n"}),
    Case("csv_unknown_dependency",
         edit("  pattern: permutation\n  message_size: 64KiB\n", "  pattern: csv\n  path: msgs.csv\n"),
         "deps", ("unknown message 7",), line=3, source="msgs.csv",
         extra_files={"msgs.csv": "id,src,dst,size,deps\n0,0,1,4KiB,\n1,1,2,4KiB,7\n"}),
    Case("csv_file_missing",
         edit("  pattern: permutation\n  message_size: 64KiB\n", "  pattern: csv\n  path: nope.csv\n"),
         "traffic.path", ("'nope.csv' not found",), line=9),
    Case("malformed_yaml_indentation", edit("  leaves: 2\n", "   leaves: 2\n"), None,
         ("not valid YAML",), line=5),
    Case("malformed_yaml_tab", edit("  seed: 1\n", "\tseed: 1\n"), None, ("not valid YAML",), line=13),
    Case("scenario_not_a_mapping", "- a\n- b\n", None, ("must be a YAML mapping",), line=1),
    Case("topology_file_missing", edit("  kind: leaf_spine\n  hosts_per_leaf: 2\n  leaves: 2\n  spines: 2\n",
                                       "  kind: file\n  path: topologies/nope.yaml\n"),
         "topology.path", ("'topologies/nope.yaml' not found",), line=4),
    Case("topology_file_with_error", edit("  kind: leaf_spine\n  hosts_per_leaf: 2\n  leaves: 2\n  spines: 2\n",
                                          "  kind: file\n  path: topo.yaml\n"),
         "spines", ("at least one spine",), line=4, source="topo.yaml",
         extra_files={"topo.yaml": "kind: leaf_spine\nhosts_per_leaf: 2\nleaves: 2\nspines: 0\n"}),
    Case("explicit_link_to_unknown_node",
         EXPLICIT_HEAD + "    - {a: h0, b: s0, rate: 400Gbps}\n    - {a: h1, b: s9, rate: 400Gbps}\n"
         "    - {a: s0, b: s1, rate: 400Gbps}\n",
         "topology.links[1].b", ("unknown node 's9'",), line=11),
    Case("explicit_disconnected",
         EXPLICIT_HEAD + "    - {a: h0, b: s0, rate: 400Gbps}\n    - {a: h1, b: s1, rate: 400Gbps}\n",
         "topology.links", ("disconnected", "h0"), line=9),
    Case("explicit_bad_node_type", EXPLICIT_HEAD.replace("{name: s1, type: switch}", "{name: s1, type: swtich}")
         + "    - {a: h0, b: s0, rate: 400Gbps}\n",
         "topology.nodes[3].type", ("'swtich'", "'host'", "'switch'"), line=8),
    Case("set_override_bad_value", BASE_SCENARIO, "traffic.message_size",
         ("negative", "from --set traffic.message_size=-1KiB"), args=("--set", "traffic.message_size=-1KiB")),
    Case("set_override_unknown_policy", BASE_SCENARIO, "routing.policy",
         ("did you mean 'adaptive'", "from --set routing.policy=adaptiv"),
         args=("--set", "routing.policy=adaptiv")),
    Case("set_override_breaks_traffic", BASE_SCENARIO, "traffic.receiver",
         ("host 9",), args=("--set", "traffic={pattern: incast, senders: 1, receiver: 9}")),
    Case("set_override_into_a_value", BASE_SCENARIO, "traffic.message_size.x",
         ("traffic.message_size is a value, not a section",), args=("--set", "traffic.message_size.x=1")),
]


def _prepare(case: Case, write):
    scenario = write("scenario.yaml", case.scenario)
    for name, text in case.extra_files.items():
        write(name, text)
    return scenario, scenario.parent / case.source


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_scenario_is_one_line_error(case, command, write, runner, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a default results/ folder would land here
    scenario, source = _prepare(case, write)
    out = tmp_path / "out"
    args = [command, str(scenario), *case.args]
    if command == "run":
        args += ["-o", str(out), "-q"]
    res = runner.invoke(main, args)
    assert res.exit_code == 2, (res.exit_code, res.output, res.exception)
    assert res.stdout == ""
    err = parse_error_line(res.stderr, source)
    assert err["field"] == case.field, res.stderr
    for s in case.says:
        assert s in err["msg"], (s, res.stderr)
    if case.line is not None:
        assert err["line"] == case.line, res.stderr
    if case.args:  # the value came from the command line, not from a line of the file
        assert err["line"] is None, res.stderr
    assert not out.exists()
    assert not (tmp_path / "results").exists()


def test_line_numbers_point_at_the_offending_text(write, runner):
    """Independent of the table above: the reported line holds the bad key or value."""
    for case in CASES:
        if case.line is None or case.field is None or case.source != "scenario.yaml":
            continue
        scenario, _ = _prepare(case, write)
        res = runner.invoke(main, ["validate", str(scenario), *case.args])
        err = parse_error_line(res.stderr, scenario)
        text = scenario.read_text().splitlines()[err["line"] - 1]
        last = case.field.split(".")[-1].split("[")[0]
        assert f"{last}:" in text, (case.id, text)


def test_valid_scenario_runs_and_creates_the_folder(write, runner, tmp_path):
    """The control for the cases above: the same base scenario succeeds and writes output."""
    scenario = write("scenario.yaml", BASE_SCENARIO)
    res = runner.invoke(main, ["validate", str(scenario)])
    assert res.exit_code == 0, res.output
    assert "ok (4 hosts, 4 switches, 4 messages, routing ecmp)" in res.stdout
    out = tmp_path / "out"
    res = runner.invoke(main, ["run", str(scenario), "-o", str(out), "-q"])
    assert res.exit_code == 0, res.output
    assert out.is_dir() and any(out.iterdir())


def test_set_override_changes_the_run(write, runner, tmp_path):
    scenario = write("scenario.yaml", BASE_SCENARIO)
    res = runner.invoke(main, ["run", str(scenario), "-o", str(tmp_path / "o"), "--json",
                               "--set", "routing.policy=spray", "--seed", "7"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["routing"] == "spray"
    assert summary["seed"] == 7


def test_seed_option_out_of_range_names_the_option(write, runner, tmp_path):
    scenario = write("scenario.yaml", BASE_SCENARIO)
    res = runner.invoke(main, ["run", str(scenario), "-o", str(tmp_path / "o"), "--seed", "-1"])
    assert res.exit_code == 2
    err = parse_error_line(res.stderr, scenario)
    assert err["field"] == "simulation.seed" and "from --seed -1" in err["msg"]
    assert err["line"] is None
    assert not (tmp_path / "o").exists()


def test_set_without_equals_sign(write, runner):
    scenario = write("scenario.yaml", BASE_SCENARIO)
    res = runner.invoke(main, ["validate", str(scenario), "--set", "routing.policy"])
    assert res.exit_code == 2
    err = parse_error_line(res.stderr, scenario)
    assert "KEY.PATH=VALUE" in err["msg"]


def test_missing_scenario_file(runner, tmp_path):
    missing = tmp_path / "nope.yaml"
    res = runner.invoke(main, ["validate", str(missing)])
    assert res.exit_code == 2
    assert parse_error_line(res.stderr, missing)["msg"] == "file not found"


def test_output_path_that_is_a_file(write, runner, tmp_path):
    scenario = write("scenario.yaml", BASE_SCENARIO)
    blocker = write("blocker", "x")
    res = runner.invoke(main, ["run", str(scenario), "-o", str(blocker), "-q"])
    assert res.exit_code == 2
    err = parse_error_line(res.stderr, blocker)
    assert err["field"] == "--output"
    assert blocker.read_text() == "x"


def test_topo_show_reports_errors_in_one_line(write, runner):
    topo = write("topo.yaml", "kind: explicit\nnodes:\n  - {name: a, type: host}\n  - {name: s, type: switch}\n"
                              "links:\n  - {a: a, b: t, rate: 1Gbps}\n")
    res = runner.invoke(main, ["topo", "show", str(topo)])
    assert res.exit_code == 2
    err = parse_error_line(res.stderr, topo)
    assert err["field"] == "links[0].b" and err["line"] == 6 and "unknown node 't'" in err["msg"]


def test_topo_show_on_a_bundled_file(runner):
    res = runner.invoke(main, ["topo", "show", str(TOPOLOGIES / "leaf_spine_32x400g.yaml")])
    assert res.exit_code == 0, res.output
    assert "bisection     6.4Tbps" in res.stdout
