"""Property: malformed input never gets past the front door.

Hypothesis mutates the shipped scenarios (wrong types, unknown fields, negative sizes, unknown
model names, GPU ids outside the topology, bad unit strings), the sample traces (CSV and Parquet:
bad cells, extra values, missing columns) and the CLI arguments, and runs each through
``fabricsim validate`` and ``fabricsim run -o <tmp>/out``: every one must exit with status 2 and
one ``error: ...`` line, no traceback, and leave nothing under the output folder.
"""
from __future__ import annotations

import copy
import csv
import io
import re
import tempfile
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings, strategies as st

from fabricsim.cli import main

from conftest import SCENARIOS, TOPOLOGIES, TRACES

FILES = sorted(SCENARIOS.glob("*.yaml"))
SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: a unit string as scenarios write them ("400Gbps", "4KiB", "1.5us")
UNIT_STRING = re.compile(r"^\s*[0-9][0-9.eE+]*\s*[A-Za-z\u00b5\u03bc/]+\s*$")
#: the fields naming a model from a registry (or a union member), and their section
NAME_FIELDS = [("routing", "policy"), ("receiver", "model"), ("congestion_control", "algorithm"),
               ("nic", "plane_split"), ("simulation", "engine"), ("topology", "kind"), ("traffic", "pattern"),
               (None, "profile")]


def _absolute(data: dict) -> dict:
    """The scenario's file references made absolute (it is rewritten under a temporary folder)."""
    for section in ("topology", "traffic"):
        sec = data.get(section)
        if isinstance(sec, dict) and isinstance(sec.get("path"), str):
            sec["path"] = str((SCENARIOS / sec["path"]).resolve())
    return data


BASES = {p.stem: _absolute(yaml.safe_load(p.read_text())) for p in FILES}


def _walk(node, path=()):
    """(path, value) of every mapping, list and leaf under ``node``."""
    yield path, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, path + (i,))


def _set(data, path, value):
    """``data[path] = value``, making missing (or scalar) mappings on the way."""
    cur = data
    for k in path[:-1]:
        if isinstance(cur, dict) and not isinstance(cur.get(k), (dict, list)):
            cur[k] = {}
        cur = cur[k]
    cur[path[-1]] = value


def _leaves(data):
    return [(p, v) for p, v in _walk(data) if p and not isinstance(v, (dict, list))]


def _registered(section: str | None, key: str) -> set:
    from fabricsim.config.profiles import PROFILES
    from fabricsim.config.scenario import Scenario, union_tags
    if section is None:
        return set(PROFILES.names())
    if section in ("topology", "traffic"):
        return union_tags()[1]
    if section == "simulation":
        from fabricsim.engine import ENGINES
        return set(ENGINES.names())
    return set(Scenario.model_fields[section].annotation.registry().names())


def _mutate(draw, data: dict, kind: str, defaults=((("simulation", "mtu"), "4KiB"),
                                                   (("simulation", "time_limit"), "1ms"))) -> None:
    """Apply one mutation of ``kind`` that makes ``data`` invalid (in place)."""
    units_ = [(p, v) for p, v in _leaves(data) if isinstance(v, str) and UNIT_STRING.match(v)] + list(defaults)
    if kind == "wrong_type":
        path, _ = draw(st.sampled_from(_leaves(data)))
        _set(data, path, draw(st.sampled_from([[[1]], {"zz_nested": [1, 2]}, [None, "x"]])))
    elif kind == "unknown_field":
        path = draw(st.sampled_from([p for p, v in _walk(data) if isinstance(v, dict)]))
        key = "zz_" + draw(st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8))
        _set(data, path + (key,), draw(st.sampled_from([1, "x", None, [1]])))
    elif kind == "negative":
        path, value = draw(st.sampled_from(units_))
        _set(data, path, draw(st.sampled_from([f"-{value}", "-1KiB", -1, "-0.5us"])))
    elif kind == "unknown_name":
        section, key = draw(st.sampled_from(NAME_FIELDS))
        taken = _registered(section, key)
        bad = draw(st.text("abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=10).filter(
            lambda s: s not in taken))
        if section is None:
            data[key] = bad
        else:
            sec = data.get(section)
            data[section] = {**(sec if isinstance(sec, dict) else {}), key: bad}
    elif kind == "gpu_id":
        big = draw(st.integers(10**7, 2**62))
        data["traffic"] = draw(st.sampled_from([{"pattern": "incast", "senders": 1, "receiver": big},
                                                {"pattern": "incast", "senders": big}]))
    elif kind == "bad_unit":
        path, value = draw(st.sampled_from(units_))
        bad = draw(st.sampled_from(["4 parsecs", "fast", "1.5.5us", "12zz", "", "1e999999999B", "0x10ns",
                                    re.sub(r"[A-Za-z\u00b5\u03bc/]+", "furlongs", value)]))
        _set(data, path, bad)
    else:
        raise AssertionError(kind)


@st.composite
def malformed_scenarios(draw):
    """(description, scenario mapping) of a shipped scenario with one mutation that makes it invalid."""
    name = draw(st.sampled_from(sorted(BASES)))
    data = copy.deepcopy(BASES[name])
    kind = draw(st.sampled_from(["wrong_type", "unknown_field", "negative", "unknown_name", "gpu_id", "bad_unit"]))
    _mutate(draw, data, kind)
    return f"{kind} on {name}", data


#: shipped topology files that build in milliseconds
SMALL_TOPOLOGIES = {p.stem: yaml.safe_load(p.read_text()) for p in sorted(TOPOLOGIES.glob("*.yaml"))
                    if p.stem in ("small_explicit", "leaf_spine_32x400g", "leaf_spine_oversub_2to1", "nvl72_rack",
                                  "cluster_small_draw", "su_576")}


@st.composite
def malformed_topologies(draw):
    """(description, topology mapping) of a small shipped topology file with one defect."""
    name = draw(st.sampled_from(sorted(SMALL_TOPOLOGIES)))
    data = copy.deepcopy(SMALL_TOPOLOGIES[name])
    kinds = ["wrong_type", "unknown_field", "negative", "bad_unit", "bad_kind"]
    if data.get("kind") == "explicit":
        kinds += ["unknown_node", "duplicate_node", "host_to_host", "host_tier", "cut"]
    kind = draw(st.sampled_from(kinds))
    if kind == "bad_kind":
        data["kind"] = draw(st.sampled_from(["torus", "file", "", "LEAF_SPINE"]))
    elif kind == "unknown_node":
        link = draw(st.sampled_from(data["links"]))
        link[draw(st.sampled_from(["a", "b"]))] = "zz_" + draw(st.text("abc", min_size=1, max_size=4))
    elif kind == "duplicate_node":
        i, j = draw(st.permutations(range(len(data["nodes"]))))[:2]
        data["nodes"][i]["name"] = data["nodes"][j]["name"]
    elif kind == "host_to_host":
        hosts = [n["name"] for n in data["nodes"] if n["type"] == "host"]
        data["links"].append({"a": hosts[0], "b": hosts[-1], "rate": "400Gbps"})
    elif kind == "host_tier":
        host = draw(st.sampled_from([n for n in data["nodes"] if n["type"] == "host"]))
        host["tier"] = draw(st.integers(1, 5))
    elif kind == "cut":   # every link of one switch removed: disconnected
        sw = draw(st.sampled_from([n["name"] for n in data["nodes"] if n["type"] == "switch" and
                                   n.get("tier") == 1]))
        data["links"] = [ln for ln in data["links"] if sw not in (ln["a"], ln["b"])]
    else:
        _mutate(draw, data, kind, defaults=())
    return f"{kind} on {name}", data


def _refused(args, out: Path):
    """``validate`` and ``run -o out`` of ``args`` (scenario and options): exit 2, one error line."""
    runner = CliRunner()
    for cmd in (["validate", *args], ["run", *args, "-o", str(out), "-q"]):
        res = runner.invoke(main, cmd)
        text = res.output.strip()
        assert res.exit_code == 2, (cmd, res.exit_code, res.output, res.exception)
        assert "Traceback" not in res.output, res.output
        lines = text.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (cmd, res.output)
        assert not out.exists() or not any(out.rglob("*")), (cmd, sorted(out.rglob("*")))


@SETTINGS
@given(malformed_scenarios())
def test_malformed_scenarios_are_one_line_errors(case):
    what, data = case
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "s.yaml"
        p.write_text(yaml.safe_dump(data, sort_keys=False))
        _refused([str(p)], Path(tmp) / "out")


@SETTINGS
@given(malformed_topologies())
def test_malformed_topology_files_are_one_line_errors(case):
    what, data = case
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp) / "topo.yaml"
        t.write_text(yaml.safe_dump(data, sort_keys=False))
        p = Path(tmp) / "s.yaml"
        p.write_text(f"name: s\ntopology: {{kind: file, path: {t}}}\ntraffic: {{pattern: permutation, "
                     f"message_size: 4KiB}}\nsimulation: {{time_limit: 1ms}}\n")
        _refused([str(p)], Path(tmp) / "out")


# --- traces --------------------------------------------------------------------------------

TRACE_ROWS = list(csv.DictReader(io.StringIO((TRACES / "sample_moe_small.csv").read_text())))[:30]
TRACE_COLUMNS = list(TRACE_ROWS[0])
TRACE_HOSTS = 16      # the trace_replay scenarios' leaf-spine: 4 leaves x 4 hosts
INT_COLS = ["id", "src", "dst", "size_bytes", "layer", "microbatch", "gap_ps", "start_ps", "conn", "collective_bytes"]


#: the columns the message-CSV reader (``pattern: csv``) reads, and values it refuses in them
CSV_INT_COLS = ["id", "src", "dst", "size_bytes", "gap_ps", "start_ps", "conn"]


@st.composite
def malformed_traces(draw, pattern):
    """(kind, columns, rows, extra cells per row) of the sample trace with one defect that the
    reader of ``pattern`` (trace or csv) must refuse."""
    rows = [dict(r) for r in TRACE_ROWS]
    cols = list(TRACE_COLUMNS)
    extra: dict[int, list] = {}
    kind = draw(st.sampled_from(["cell", "gpu", "size", "extra", "missing_column", "dep"]))
    r = draw(st.integers(0, len(rows) - 1))
    if kind == "cell":
        if pattern == "trace":
            col = draw(st.sampled_from(INT_COLS))
            rows[r][col] = draw(st.sampled_from(["abc", "1.5", "1" + "0" * 30, "--3", "1e30"]))
        else:   # the message CSV takes fractional times (start_ps: 1.5) and ignores the tag columns
            col = draw(st.sampled_from(CSV_INT_COLS))
            rows[r][col] = draw(st.sampled_from(["abc", "1" + "0" * 30, "--3"]))
    elif kind == "gpu":
        rows[r][draw(st.sampled_from(["src", "dst"]))] = str(draw(st.integers(TRACE_HOSTS, 10**12)))
    elif kind == "size":
        rows[r]["size_bytes"] = draw(st.sampled_from(["0", "-5", str(9 * 10**18), str(2**63)]))
    elif kind == "extra":
        extra[r] = ["x"] * draw(st.integers(1, 3))
    elif kind == "missing_column":
        gone = draw(st.sampled_from(["src", "dst", "size_bytes"] + (["id"] if pattern == "trace" else [])))
        cols.remove(gone)
    else:  # a dependency on a message that is not in the trace
        rows[r]["deps"] = str(draw(st.integers(10**6, 10**9)))
    return kind, cols, rows, extra


def _write_csv(path: Path, cols, rows, extra):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for i, row in enumerate(rows):
            w.writerow([row[c] for c in cols] + extra.get(i, []))


def _write_parquet(path: Path, cols, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq
    data = {}
    for c in cols:
        vals = [row[c] for row in rows]
        if c in INT_COLS:
            try:
                ints = [int(v) for v in vals]
                if all(-2**63 <= v < 2**63 for v in ints):
                    data[c] = pa.array(ints, type=pa.int64())
                    continue
            except ValueError:
                pass
        data[c] = pa.array(vals, type=pa.string())
    pq.write_table(pa.table(data), path)


@st.composite
def trace_cases(draw):
    pattern = draw(st.sampled_from(["trace", "csv"]))
    kind, cols, rows, extra = draw(malformed_traces(pattern))
    fmt = "csv" if pattern == "csv" or kind == "extra" else draw(st.sampled_from(["csv", "parquet"]))
    return pattern, fmt, kind, cols, rows, extra


@SETTINGS
@given(trace_cases())
def test_malformed_traces_are_one_line_errors(case):
    pattern, fmt, kind, cols, rows, extra = case
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        trace = tmp / f"t.{fmt}"
        if fmt == "csv":
            _write_csv(trace, cols, rows, extra)
        else:
            _write_parquet(trace, cols, rows)
        p = tmp / "s.yaml"
        p.write_text(f"name: s\ntopology: {{kind: leaf_spine, hosts_per_leaf: 4, leaves: 4, spines: 4}}\n"
                     f"traffic: {{pattern: {pattern}, path: {trace}}}\nsimulation: {{time_limit: 1ms}}\n")
        _refused([str(p)], tmp / "out")


# --- CLI arguments -------------------------------------------------------------------------

SMALL = SCENARIOS / "quickstart.yaml"


@st.composite
def malformed_overrides(draw):
    kind = draw(st.sampled_from(["no_equals", "empty_key", "unknown_key", "bad_value", "seed", "value_not_section"]))
    word = draw(st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8))
    if kind == "no_equals":
        return ["--set", word]
    if kind == "empty_key":
        return ["--set", draw(st.sampled_from(["=1", f"{word}..x=1", f".{word}=1", f"{word}.=1"]))]
    if kind == "unknown_key":
        return ["--set", f"{draw(st.sampled_from(['', 'simulation.', 'routing.', 'topology.']))}zz_{word}=1"]
    if kind == "bad_value":
        path = draw(st.sampled_from(["simulation.mtu", "simulation.time_limit", "simulation.seed",
                                     "topology.spines", "traffic.message_size", "outputs.formats"]))
        return ["--set", f"{path}={draw(st.sampled_from(['-1', 'abc', '[1, 2]', '{a: 1}', '1e999', '4 parsecs']))}"]
    if kind == "seed":
        return ["--set", f"simulation.seed={draw(st.sampled_from([-1, 2**64, 1.5, 'x']))}"]
    return ["--set", draw(st.sampled_from(["simulation.seed.x=1", "name.x=1", "routing.policy.x=1"]))]


@SETTINGS
@given(malformed_overrides())
def test_malformed_cli_arguments_are_one_line_errors(args):
    with tempfile.TemporaryDirectory() as tmp:
        _refused([str(SMALL), *args], Path(tmp) / "out")


@pytest.mark.parametrize("seed", ["-1", str(2**64)])
def test_a_seed_out_of_range_is_one_line(seed):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        res = CliRunner().invoke(main, ["run", str(SMALL), "-o", str(out), "-q", "--seed", seed])
        assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
        assert not out.exists()
