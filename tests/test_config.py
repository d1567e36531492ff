"""The typed scenario model and its loader, used from Python (no CLI)."""
from __future__ import annotations

import pytest
import yaml

from fabricsim.api import prepare
from fabricsim.config import LeafSpineConfig, Scenario, load_scenario
from fabricsim.config.scenario import _node_line, format_field, parse_field, set_path
from fabricsim.errors import ConfigError, TopologyError, TrafficError
from fabricsim.topology import load_topology_file

from conftest import BASE_SCENARIO, SCENARIOS


def edit(old, new, text=BASE_SCENARIO):
    assert old in text, old
    return text.replace(old, new, 1)


def load_error(path, *args, **kw) -> ConfigError:
    with pytest.raises(ConfigError) as ei:
        prepare(path, *args, **kw)
    return ei.value


# --- what a loaded scenario holds ---------------------------------------------------------


def test_base_scenario_values_are_integers_in_base_units(write):
    sc = load_scenario(write("s.yaml", BASE_SCENARIO)).scenario
    assert sc.traffic.message_size == 64 * 1024
    assert sc.simulation.time_limit == 10**9  # 1 ms in ps
    assert sc.topology.host_link.rate == 400 * 10**9  # default 400Gbps in bit/s
    assert sc.topology.switch_latency == 600_000
    assert sc.routing.name == "ecmp" and sc.routing.params is None


def test_defaults_fill_a_sparse_file(write):
    sc = load_scenario(write("sparse.yaml", "topology: {spines: 2}\n")).scenario
    assert sc.name == "sparse"  # from the file name
    assert isinstance(sc.topology, LeafSpineConfig)
    assert (sc.topology.leaves, sc.topology.hosts_per_leaf, sc.topology.spines) == (4, 4, 2)
    assert sc.traffic.pattern == "permutation"
    assert sc.receiver.name == "ddp" and sc.congestion_control.name == "none"


def test_dump_is_exact_human_strings_and_round_trips(write):
    text = edit("policy: ecmp\n", "policy: flowlet\n  gap: 5us\n")
    sc = load_scenario(write("s.yaml", text)).scenario
    dumped = sc.model_dump(mode="json")
    assert dumped["traffic"]["message_size"] == "64KiB"
    assert dumped["simulation"]["time_limit"] == "1ms"
    assert dumped["simulation"]["header"] == "82B"
    # flowlet's own key and the port-quality keys it shares with adaptive, as human strings
    assert {k: dumped["routing"][k] for k in ("policy", "gap", "refresh", "queue_ref")} == \
        {"policy": "flowlet", "gap": "5us", "refresh": "100ns", "queue_ref": "2MiB"}
    again = load_scenario(dumped).scenario
    assert again == sc
    assert load_scenario(sc).scenario == sc


def test_bundled_quickstart_loads():
    sc = load_scenario(SCENARIOS / "quickstart.yaml").scenario
    assert sc.name == "quickstart"
    assert sc.topology.leaves * sc.topology.hosts_per_leaf == 32


# --- overrides --------------------------------------------------------------------------


def test_set_override_and_seed_apply(write):
    p = write("s.yaml", BASE_SCENARIO)
    sc = load_scenario(p, overrides=["routing.policy=adaptive", "routing.metric=queue_util",
                                     "topology.spines=4"], seed=42).scenario
    assert sc.routing.name == "adaptive" and sc.routing.params.metric == "queue_util"
    assert sc.topology.spines == 4
    assert sc.simulation.seed == 42


def test_override_error_has_no_line_and_says_where_it_came_from(write):
    p = write("s.yaml", BASE_SCENARIO)
    err = load_error(p, ["traffic.message_size=0B"])
    assert err.source == str(p) and err.field == "traffic.message_size"
    assert err.line is None  # line 9 holds 64KiB, which is not what is wrong
    assert err.from_override and "(from --set traffic.message_size=0B)" in err.message


def test_file_error_is_not_blamed_on_an_unrelated_override(write):
    p = write("s.yaml", edit("seed: 1", "seed: -3"))
    err = load_error(p, ["routing.policy=spray"])
    assert err.field == "simulation.seed" and err.line == 13 and not err.from_override


def test_set_path_into_a_value_is_an_error():
    data = {"traffic": {"message_size": "1MiB"}}
    with pytest.raises(ConfigError, match="message_size is a value, not a section"):
        set_path(data, "traffic.message_size.x", 1)
    set_path(data, "simulation.seed", 3)
    assert data["simulation"] == {"seed": 3}


# --- strictness -------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["true", "'4'", "2.0"])
def test_counts_must_be_integers(write, value):
    err = load_error(write("s.yaml", edit("spines: 2", f"spines: {value}")))
    assert err.field == "topology.spines" and err.line == 6
    assert "whole number" in err.message


@pytest.mark.parametrize("value", [".inf", ".nan"])
def test_non_finite_sizes_are_rejected(write, value):
    err = load_error(write("s.yaml", edit("64KiB", value)))
    assert err.field == "traffic.message_size" and err.line == 9


def test_unknown_field_lists_allowed_fields(write):
    err = load_error(write("s.yaml", edit("  time_limit: 1ms\n", "  time_limit: 1ms\n  sede: 3\n")))
    assert err.field == "simulation.sede" and err.line == 15
    assert "did you mean 'seed'" in err.message
    for allowed in ("seed", "time_limit", "mtu", "header"):
        assert allowed in err.message


def test_user_key_spelled_like_a_union_tag_is_still_named(write):
    # 'file' is also the tag of 'kind: file'; it must not be swallowed as a pydantic union tag
    err = load_error(write("s.yaml", edit("  spines: 2\n", "  spines: 2\n  file: x.yaml\n")))
    assert err.field == "topology.file" and err.line == 7


def test_list_items_are_reported_with_brackets(write):
    err = load_error(write("s.yaml", BASE_SCENARIO + "outputs:\n  formats: [csv, json]\n"))
    assert err.field == "outputs.formats[1]" and "'json'" in err.message and err.line == 16


def test_header_cross_check(write):
    err = load_error(write("s.yaml", edit("  seed: 1\n", "  seed: 1\n  mtu: 64B\n  header: 512B\n")))
    assert err.field == "simulation.header" and "allowed: less than 4 x mtu" in err.message


# --- errors raised after validation (topology / traffic building) -------------------------


def test_incast_errors_are_traffic_errors(write):
    p = write("s.yaml", edit("  pattern: permutation\n", "  pattern: incast\n  senders: 9\n"))
    err = load_error(p)
    assert isinstance(err, TrafficError) and err.field == "traffic.senders"
    assert err.exit_code == 2


def test_explicit_topology_file_reports_explicit_errors(write):
    # both alternatives of a topology file are pydantic models; the error must come from the
    # one named by 'kind', not from leaf_spine complaining about 'nodes'
    p = write("t.yaml", "kind: explicit\nnodes:\n  - {name: a, type: host}\n  - {name: b, type: hots}\n"
                        "links:\n  - {a: a, b: b, rate: 1Gbps}\n")
    with pytest.raises(TopologyError) as ei:
        load_topology_file(p)
    e = ei.value
    assert (e.source, e.field, e.line) == (str(p), "nodes[1].type", 4)
    assert "'hots'" in e.message


def test_topology_file_errors_have_no_scenario_prefix(write):
    p = write("t.yaml", "kind: explicit\nnodes:\n  - {name: a, type: host}\n  - {name: s, type: switch}\n"
                        "  - {name: a, type: switch}\nlinks:\n  - {a: a, b: s, rate: 1Gbps}\n")
    with pytest.raises(TopologyError) as ei:
        load_topology_file(p)
    assert ei.value.field == "nodes[2].name" and ei.value.line == 5
    assert "duplicate node name 'a'" in ei.value.message


def test_topology_file_unknown_kind(write):
    p = write("t.yaml", "# comment\nkind: dragonfly\n")
    with pytest.raises(TopologyError) as ei:
        load_topology_file(p)
    assert ei.value.field == "kind" and ei.value.line == 2 and "'dragonfly'" in ei.value.message


def test_csv_line_numbers_count_blank_lines(write):
    write("m.csv", "src,dst,size\n0,1,4KiB\n\n1,2,4KiB\n2,2,4KiB\n")
    p = write("s.yaml", edit("  pattern: permutation\n  message_size: 64KiB\n", "  pattern: csv\n  path: m.csv\n"))
    err = load_error(p)
    assert err.source.endswith("m.csv") and err.field == "dst" and err.line == 5
    assert "both 2" in err.message


def test_csv_sizes_and_times_with_units(write):
    write("m.csv", "id,src,dst,size,start,deps\n5,0,1,4KiB,1us,\n6,1,2,1MB,0,5\n")
    p = write("s.yaml", edit("  pattern: permutation\n  message_size: 64KiB\n", "  pattern: csv\n  path: m.csv\n"))
    _, sim = prepare(p)
    m5, m6 = sim.messages
    assert (m5.id, m5.size_bytes, m5.start_ps, m5.deps) == (5, 4096, 10**6, ())
    assert (m6.id, m6.size_bytes, m6.deps) == (6, 10**6, (5,))


# --- helpers ------------------------------------------------------------------------------


def test_field_formatting_round_trip():
    loc = ("topology", "links", 1, "b")
    assert format_field(loc) == "topology.links[1].b"
    assert parse_field("topology.links[1].b") == loc
    assert format_field(()) is None


def test_node_line_points_at_keys_and_items():
    text = "a:\n  b:\n    - x\n    - {c: 1}\n  d: 2\n"
    root = yaml.compose(text)
    assert _node_line(root, ("a", "d")) == 5
    assert _node_line(root, ("a", "b")) == 2
    assert _node_line(root, ("a", "b", 1)) == 4
    assert _node_line(root, ("a", "b", 1, "c")) == 4
    assert _node_line(root, ("a", "missing")) == 1  # deepest existing parent: the key 'a'


def test_config_error_one_line_format():
    e = ConfigError("bad (allowed: x)", source="f.yaml", field="a.b", line=3)
    assert str(e) == "f.yaml:3: a.b: bad (allowed: x)"
    assert str(ConfigError("bad", source="f.yaml")) == "f.yaml: bad"
    assert ConfigError("x").exit_code == 2


def test_scenario_model_rejects_extra_fields_directly():
    with pytest.raises(Exception):
        Scenario.model_validate({"bogus": 1})


def test_link_sample_interval_off_survives_yaml_and_set():
    """YAML 1.1 reads a bare `off` as false: `--set outputs.link_sample_interval=off` and a file's
    `link_sample_interval: off` both mean off."""
    from fabricsim.config import load_scenario
    sc = load_scenario({"outputs": {"link_sample_interval": "10us"}}, ["outputs.link_sample_interval=off"]).scenario
    assert sc.outputs.link_sample_interval == "off"
    import yaml
    assert load_scenario(yaml.safe_load("outputs: {link_sample_interval: off}")).scenario.outputs.link_sample_interval == "off"
