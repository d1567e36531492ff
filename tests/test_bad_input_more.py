"""Bad input found by users (issue 13): each gives one line naming the file (and field or line),
exit status 2, no traceback and nothing written."""
from __future__ import annotations

import textwrap

import pytest
import yaml

from fabricsim.cli import main
from fabricsim.errors import ConfigError

from conftest import BASE_SCENARIO, parse_error_line


def _refused(runner, path, tmp_path, *args):
    """``validate`` and ``run -o`` both refuse ``path`` with exit 2 and one error line, writing
    nothing; returns the parsed line."""
    res = runner.invoke(main, ["validate", str(path), *args])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    parsed = parse_error_line(res.output.strip(), path)
    out = tmp_path / "out"
    res = runner.invoke(main, ["run", str(path), "-o", str(out), "-q", *args])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    assert not out.exists() or not any(out.rglob("*")), sorted(out.rglob("*"))
    return parsed


# --- YAML ------------------------------------------------------------------------------------


def _laughs(levels: int = 9) -> str:
    lines = ['  - &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"  - &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "description: anchors\nx-anchors:\n" + "\n".join(lines) + f"\nname: *a{levels - 1}\n"


def test_billion_laughs_is_refused_quickly(runner, write, tmp_path):
    p = write("laughs.yaml", _laughs())
    err = _refused(runner, p, tmp_path)
    assert "aliases expand to more than" in err["msg"] and err["line"] is not None


def test_a_small_alias_expansion_in_a_string_field_gives_a_short_message(runner, write, tmp_path):
    # under the expansion limit (9**5 strings), but far too long to print in an error message
    p = write("laughs.yaml", _laughs(5).replace("x-anchors", "description"))
    p.write_text(p.read_text().replace("description: anchors\n", ""))
    err = _refused(runner, p, tmp_path)
    assert err["field"] == "name" and len(err["msg"]) < 200, err


def test_an_alias_inside_its_own_anchor_is_refused(runner, write, tmp_path):
    err = _refused(runner, write("cyc.yaml", "name: &a [*a]\n"), tmp_path)
    assert "refers to the anchor it is inside" in err["msg"]


def test_deep_nesting_is_refused_without_recursion_error(runner, write, tmp_path):
    p = write("deep.yaml", "name: " + "[" * 20000 + "]" * 20000 + "\n")
    err = _refused(runner, p, tmp_path)
    assert "levels deep" in err["msg"] and err["line"] == 1


def test_deep_nesting_through_aliases_is_refused(runner, write, tmp_path):
    body = "\n".join(["description: chain", "x:", "  - &a0 [1]"] +
                     [f"  - &a{i} [*a{i - 1}]" for i in range(1, 300)]) + "\n"
    err = _refused(runner, write("chain.yaml", body), tmp_path)
    assert "levels of nesting" in err["msg"]


@pytest.mark.parametrize("text, line, field", [
    (BASE_SCENARIO + "simulation: {seed: 3}\n", 15, "simulation"),
    (BASE_SCENARIO + "outputs: {formats: [csv], formats: [csv]}\n", 15, "outputs.formats"),
    (BASE_SCENARIO.replace("  spines: 2\n", "  spines: 2\n  leaves: 3\n"), 7, "topology.leaves"),
])
def test_duplicate_keys_are_refused(runner, write, tmp_path, text, line, field):
    err = _refused(runner, write("dup.yaml", text), tmp_path)
    assert err["line"] == line and err["field"] == field and "duplicate key" in err["msg"], err


def test_merge_keys_may_still_be_overridden():
    from fabricsim.config.yaml_loader import load_yaml_text
    data, _ = load_yaml_text("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  y: 3\n", "f.yaml")
    assert data["c"] == {"x": 1, "y": 3}


def test_yaml_loader_doctests():
    import doctest
    from fabricsim.config import yaml_loader
    assert doctest.testmod(yaml_loader).failed == 0


# --- scenario name -----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["..", ".", ".hidden", "a/b", "a\\\\b", "-rf", "x" * 129])
def test_a_name_that_is_not_one_safe_folder_name_is_refused(runner, write, tmp_path, name):
    p = write("n.yaml", BASE_SCENARIO.replace("name: t", f"name: '{name}'"))
    err = _refused(runner, p, tmp_path)
    assert err["field"] == "name" and err["line"] == 1 and "allowed:" in err["msg"], err


def test_a_name_given_by_set_is_checked_too(runner, write, tmp_path):
    p = write("n.yaml", BASE_SCENARIO)
    err = _refused(runner, p, tmp_path, "--set", "name=..")
    assert err["field"] == "name" and "--set name=.." in err["msg"], err


@pytest.mark.parametrize("name", ["t", "all_to_all_16", "run-2.b", "_x"])
def test_safe_names_are_accepted(name):
    from fabricsim.config.scenario import load_scenario
    assert load_scenario({**yaml.safe_load(BASE_SCENARIO), "name": name}).scenario.name == name


# --- unknown fields under a union member ------------------------------------------------------


@pytest.mark.parametrize("section, body", [
    ("traffic", "pattern: trace\n  path: t.csv"),
    ("traffic", "pattern: csv\n  path: m.csv"),
    ("traffic", "pattern: incast"),
    ("topology", "kind: file\n  path: x.yaml"),
    ("topology", "kind: cluster\n  racks: 1"),
    ("topology", "kind: nvl72_rack"),
])
def test_an_unknown_field_under_any_union_member_is_named_by_its_section(runner, write, tmp_path, section, body):
    p = write("u.yaml", f"name: u\n{section}:\n  {body}\n  bogus: 1\n")
    err = _refused(runner, p, tmp_path)
    assert err["field"] == f"{section}.bogus" and "unknown field" in err["msg"], err


def test_union_tags_are_read_from_the_models():
    import typing
    from fabricsim.config.scenario import Scenario, union_tags
    sections, tags = union_tags()
    assert sections == {"topology", "traffic"}
    for s in sections:
        fld = Scenario.model_fields[s]
        members = typing.get_args(fld.annotation)
        assert {m.model_fields[fld.discriminator].default for m in members} <= tags
    assert "trace" in tags


# --- --set typos ---------------------------------------------------------------------------


@pytest.mark.parametrize("override, field, hint", [
    ("routing.polcy=spray", "routing.polcy", "did you mean 'policy'?"),
    ("congestion_control.algoritm=dcqcn", "congestion_control.algoritm", "did you mean 'algorithm'?"),
    ("routing.gap=5us", "routing.gap", "gap is a parameter of flowlet"),
    ("simulation.flow.quantm=1us", "simulation.flow.quantm", "did you mean 'quantum'?"),
    ("routing.policy=flowlet routing.gapp=5us", "routing.gapp", "did you mean 'gap'?"),
])
def test_set_typos_name_the_field_and_the_likely_spelling(runner, write, tmp_path, override, field, hint):
    args = [a for o in override.split() for a in ("--set", o)]
    err = _refused(runner, write("s.yaml", BASE_SCENARIO), tmp_path, *args)
    assert err["field"] == field and err["msg"].startswith("unknown field") and hint in err["msg"], err
    assert "takes no parameters (" not in err["msg"].split(";")[0]


def test_the_same_typo_in_the_file_gets_the_same_message_with_its_line(runner, write, tmp_path):
    p = write("s.yaml", BASE_SCENARIO.replace("  policy: ecmp", "  polcy: spray"))
    err = _refused(runner, p, tmp_path)
    assert err["field"] == "routing.polcy" and err["line"] == 11 and "did you mean 'policy'?" in err["msg"], err


# --- values the simulator cannot hold, found before anything is written -------------------------


def test_a_switch_buffer_smaller_than_one_packet_is_refused(runner, write, tmp_path):
    p = write("b.yaml", BASE_SCENARIO.replace("  spines: 2\n", "  spines: 2\n  buffer: {size: 1KiB}\n"))
    err = _refused(runner, p, tmp_path)
    assert err["field"] == "topology.buffer.size" and err["line"] == 7, err
    assert "4178 B" in err["msg"] and "allowed: at least 4178 B" in err["msg"], err


@pytest.mark.parametrize("args, field", [
    (("--set", "topology.buffer.size=4KiB"), "topology.buffer.size"),           # 4096 < 4096 + 82
    (("--set", "simulation.cell_packets=4", "--set", "topology.buffer.size=10KiB"), "topology.buffer.size"),
    (("--set", "switch.buffer.admission=dynamic", "--set", "switch.buffer.size=2KiB"), "switch.buffer.size"),
])
def test_buffer_against_packet_via_set(runner, write, tmp_path, args, field):
    err = _refused(runner, write("b.yaml", BASE_SCENARIO), tmp_path, *args)
    assert err["field"] == field and "cannot hold one packet" in err["msg"], err


def test_a_buffer_of_one_packet_is_accepted():
    from fabricsim.config.scenario import load_scenario
    data = yaml.safe_load(BASE_SCENARIO)
    data["topology"]["buffer"] = {"size": 4096 + 82}
    assert load_scenario(data).scenario.topology.buffer.size == 4178


def test_a_small_buffer_in_a_topology_file_names_that_file(runner, write, tmp_path):
    t = write("topo.yaml", "kind: leaf_spine\nhosts_per_leaf: 2\nleaves: 2\nspines: 1\nbuffer:\n  size: 4KiB\n")
    p = write("s.yaml", "name: s\ntopology: {kind: file, path: topo.yaml}\n")
    res = runner.invoke(main, ["validate", str(p)])
    assert res.exit_code == 2 and "Traceback" not in res.output
    err = parse_error_line(res.output.strip(), t)
    assert err["field"] == "buffer.size" and err["line"] == 6, err


def test_traffic_starting_after_the_time_limit_is_refused(runner, write, tmp_path):
    p = write("s.yaml", BASE_SCENARIO.replace("  message_size: 64KiB\n", "  message_size: 64KiB\n  start: 2ms\n"))
    err = _refused(runner, p, tmp_path)
    assert err["field"] == "traffic.start" and err["line"] == 10 and "simulation.time_limit" in err["msg"], err


def _csv_scenario(write, csv_text, pattern="csv", name="m.csv"):
    write(name, csv_text)
    return write("s.yaml", f"name: s\ntopology: {{kind: leaf_spine, hosts_per_leaf: 2, leaves: 2, spines: 1}}\n"
                           f"traffic: {{pattern: {pattern}, path: {name}}}\nsimulation: {{time_limit: 1ms}}\n")


TRACE_HEADER = ("id,src,dst,size_bytes,op,phase,layer,microbatch,deps,gap_ps,start_ps,conn,collective,"
                "collective_bytes\n")


def _trace_row(size="1000", start="0", gap="0"):
    return f"0,0,1,{size},moe.l0.dispatch,dispatch,0,0,,{gap},{start},-1,,0\n"


@pytest.mark.parametrize("text, column", [
    ("id,src,dst,size_bytes\n0,0,1,1000,7,8\n", None),
    ("id,src,dst,size_bytes\n0,0,1," + "1" + "0" * 30 + "\n", "size_bytes"),
    ("id,src,dst,size\n0,0,1,1e30B\n", "size"),
    ("id,src,dst,size_bytes,start_ps\n0,0,1,1000," + "1" + "0" * 30 + "\n", "start_ps"),
    ("id,src,dst,size_bytes,start_us\n0,0,1,1000,1e30\n", "start_us"),
    ("id,src,dst,size_bytes,gap\n0,0,1,1000,1e30s\n", "gap"),
    ("id,src,dst,size_bytes\n" + "1" + "0" * 30 + ",0,1,1000\n", "id"),
])
def test_message_csv_values_out_of_range_are_refused(runner, write, tmp_path, text, column):
    p = _csv_scenario(write, text)
    res = runner.invoke(main, ["run", str(p), "-o", str(tmp_path / "out"), "-q"])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    err = parse_error_line(res.output.strip(), tmp_path / "m.csv")
    assert err["line"] == 2 and err["field"] == column, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("pattern, name, text", [
    ("csv", "m.csv", "id,src,dst,size_bytes,start_ps\n0,0,1,9000000000000000000,0\n"),
    ("csv", "m.csv", "id,src,dst,size_bytes,start_ps\n0,0,1,1000,9000000000000000000\n"),
    ("trace", "t.csv", TRACE_HEADER + _trace_row(size="9000000000000000000", start="9000000000000000000")),
    ("trace", "t.csv", TRACE_HEADER + _trace_row(start="9223372036854775807")),
    ("trace", "t.jsonl", '{"id": 0, "src": 0, "dst": 1, "size_bytes": 9000000000000000000, "op": "x", '
                         '"phase": "dispatch"}\n'),
])
def test_messages_beyond_a_64_bit_picosecond_clock_are_refused_before_writing(runner, write, tmp_path,
                                                                             pattern, name, text):
    p = _csv_scenario(write, text, pattern, name)
    err = _refused(runner, p, tmp_path)
    assert err["field"] == "traffic.path" and "64-bit picosecond clock" in err["msg"], err


def test_trace_csv_row_with_more_values_than_columns(runner, write, tmp_path):
    p = _csv_scenario(write, TRACE_HEADER + _trace_row().rstrip("\n") + ",extra\n", "trace", "t.csv")
    res = runner.invoke(main, ["run", str(p), "-o", str(tmp_path / "out"), "-q"])
    assert res.exit_code == 2 and "more values than columns" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "out").exists()


# --- explicit topologies ---------------------------------------------------------------------

EXPLICIT = """\
name: mh
topology:
  kind: explicit
  nodes:
    - {name: h0, type: host}
    - {name: h1, type: host}
    - {name: h2, type: host}
    - {name: s0, type: switch, tier: 1}
    - {name: s1, type: switch, tier: 1}
  links:
    - {a: h0, b: s0, rate: 400Gbps}
    - {a: h1, b: s1, rate: 400Gbps}
    - {a: h2, b: s0, rate: 400Gbps}
    - {a: h2, b: s1, rate: 400Gbps}
traffic: {pattern: permutation}
simulation: {time_limit: 1ms}
"""


def test_switches_joined_only_through_a_multi_homed_host_are_refused(runner, write, tmp_path):
    err = _refused(runner, write("mh.yaml", EXPLICIT), tmp_path)
    assert err["field"] == "topology.links" and err["line"] == 10, err
    assert "'h0' and 'h1'" in err["msg"] and "only through host 'h2'" in err["msg"], err


def test_multi_homed_hosts_on_planes_every_host_shares_are_accepted(runner, write, tmp_path):
    # two planes (s0, s1), every host on both: no host is needed as a transit node
    text = EXPLICIT.replace("    - {a: h2, b: s1, rate: 400Gbps}\n",
                            "    - {a: h2, b: s1, rate: 400Gbps}\n    - {a: h0, b: s1, rate: 400Gbps}\n"
                            "    - {a: h1, b: s0, rate: 400Gbps}\n")
    p = write("planes.yaml", text)
    res = runner.invoke(main, ["run", str(p), "-o", str(tmp_path / "out"), "-q"])
    assert res.exit_code == 0, res.output


def test_a_spine_link_makes_the_same_hosts_valid(runner, write, tmp_path):
    p = write("ok.yaml", EXPLICIT.replace("  links:\n", "  links:\n    - {a: s0, b: s1, rate: 400Gbps}\n"))
    res = runner.invoke(main, ["run", str(p), "-o", str(tmp_path / "out"), "-q"])
    assert res.exit_code == 0, res.output


# --- found by tests/test_malformed_property.py ------------------------------------------------


@pytest.mark.parametrize("override, says", [
    ("topology.buffer.size=-1", "a size must not be negative (or 'unbounded')"),
    ("switch.pfc.response=soon", "cannot read 'soon' as a time; write e.g. '600ns' (or 'auto')"),
])
def test_a_value_or_literal_field_reports_the_value_error(runner, write, tmp_path, override, says):
    # was "got -1 (allowed: 'unbounded')": the literal alternative's message hid what was wrong
    err = _refused(runner, write("s.yaml", BASE_SCENARIO), tmp_path, "--set", override)
    assert says in err["msg"], err


def test_internal_fields_are_not_offered_as_allowed(runner, write, tmp_path):
    err = _refused(runner, write("s.yaml", BASE_SCENARIO), tmp_path, "--set", "simulation.zz=1")
    assert "allowed: cell_packets" in err["msg"] and "engine_params" not in err["msg"], err


def test_set_values_are_read_under_the_same_yaml_limits(runner, write, tmp_path):
    err = _refused(runner, write("s.yaml", BASE_SCENARIO), tmp_path, "--set", "description={a: 1, a: 2}")
    assert err["field"] == "description" and "duplicate key 'a'" in err["msg"], err
    assert "(from --set description={a: 1, a: 2})" in err["msg"], err


def test_set_values_that_are_not_yaml_stay_text():
    from fabricsim.config.scenario import parse_overrides
    assert parse_overrides(["description=a: b: c", "simulation.seed=5"]) == [
        ("description", "a: b: c", "--set description=a: b: c"), ("simulation.seed", 5, "--set simulation.seed=5")]


# --- a byte-order mark (spreadsheet exports) is not part of the first column's name ------------


@pytest.mark.parametrize("pattern", ["csv", "trace"])
def test_a_utf8_byte_order_mark_is_read_as_such(runner, write, tmp_path, pattern):
    text = TRACE_HEADER + _trace_row(size="4096") + _trace_row(size="4096").replace("0,0,1,", "1,1,0,", 1)
    p = _csv_scenario(write, text, pattern)
    (tmp_path / "m.csv").write_bytes(b"\xef\xbb\xbf" + text.encode())
    from fabricsim.api import prepare
    _, sim = prepare(p)
    assert list(sim.messages.id) == [0, 1]
    # the ids are read, not numbered: a message CSV whose ids are 5 and 9 keeps them
    (tmp_path / "m.csv").write_bytes(b"\xef\xbb\xbf" + text.replace("\n0,0,1,", "\n5,0,1,").replace(
        "\n1,1,0,", "\n9,1,0,").encode())
    _, sim = prepare(p)
    assert list(sim.messages.id) == [5, 9]


def test_a_misspelt_engine_parameter_section_is_suggested():
    from click.testing import CliRunner

    from fabricsim.cli import main
    from conftest import SCENARIOS
    res = CliRunner().invoke(main, ["validate", str(SCENARIOS / "quickstart.yaml"), "--set", "simulation.flwo=1"])
    assert res.exit_code == 2
    assert "flow" in res.output.split("allowed:")[1] and "did you mean 'flow'?" in res.output


@pytest.mark.parametrize("sets, field", [
    (["topology.hosts_per_leaf=100000", "topology.leaves=100000"], "topology.hosts_per_leaf"),
    (["topology.spines=100000", "topology.links_per_spine=10000"], "topology.leaves"),
])
def test_a_fabric_too_large_to_build_is_refused_before_building(sets, field):
    """Found in review: 10^10 hosts from two --set typos took 10 GB in 40 s without an answer."""
    from click.testing import CliRunner

    from fabricsim.cli import main
    from conftest import SCENARIOS
    args = ["validate", str(SCENARIOS / "quickstart.yaml")]
    for s in sets:
        args += ["--set", s]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2 and f"{field}:" in res.output and "allowed: at most" in res.output


def test_a_cluster_too_large_to_build_is_refused(tmp_path):
    from click.testing import CliRunner

    from fabricsim.cli import main
    p = tmp_path / "c.yaml"
    p.write_text("name: c\ntopology: {kind: cluster, domain: nvl72, racks: 100000}\n")
    res = CliRunner().invoke(main, ["validate", str(p)])
    assert res.exit_code == 2 and "topology.racks" in res.output and "7,200,000 hosts" in res.output


@pytest.mark.parametrize("key", ["preset", "file", "leaf_spine"])
def test_an_unknown_key_spelled_like_a_union_tag_is_named(runner, write, tmp_path, key):
    """A top-level key that happens to be spelled like a topology kind (``preset: x``) was dropped
    from the error's location as if it were pydantic's union tag, and the message builder then
    raised IndexError: a traceback instead of one line. Now the key is named, in a scenario and in
    an MoE trace config."""
    path = write("s.yaml", f"name: tagged\n{key}: x\n")
    parsed = _refused(runner, path, tmp_path)
    assert parsed["field"] == key
    cfg = tmp_path / "moe.yaml"
    cfg.write_text(f"gpus: 64\n{key}: deepseek-v3\n")
    res = runner.invoke(main, ["trace", "moe", "--config", str(cfg), "-o", str(tmp_path / "t.parquet")])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert f"{key}: unknown field" in res.output and not (tmp_path / "t.parquet").exists()
