"""Third-party plug-ins are found through entry points (fabricsim/registry.py, topology/plugin.py).

The CLI runs in a subprocess with tests/plugins on the path, as a user's installed plug-in
would be: the registries of this process stay as they are.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from fabricsim.registry import PluginWarning, Registry

from conftest import REPO, parse_error_line

PLUGINS = REPO / "tests" / "plugins"

SCENARIO = """\
name: plug
topology:
  kind: plugin
  builder: tiny_leaf_spine
  params: {hosts: 8}
traffic: {pattern: permutation, locality: cross_leaf, message_size: 64KiB}
routing: {policy: first_port}
simulation: {seed: 1}
"""


def _cli(*args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(PLUGINS)])}
    return subprocess.run([sys.executable, "-m", "fabricsim", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_discover_registers_entry_points_once(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    r = Registry("routing policy", group="fabricsim.routing")
    assert "first_port" in r                       # found on first use
    assert r.get("first_port").__name__ == "FirstPort"
    assert "broken_policy" not in r.names()       # a plug-in that fails to import is left out ...
    msg = r.unknown_message("broken_policy")      # ... and asking for it says why
    assert "failed to load" in msg and "ModuleNotFoundError" in msg
    r.discover()                                   # idempotent: nothing registered twice
    assert r.names().count("first_port") == 1
    assert "unknown routing policy {'x': 1}" in r.unknown_message({"x": 1})   # not a name at all


def test_a_builtin_name_is_never_shadowed(monkeypatch, tmp_path):
    dist = tmp_path / "shadow-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: shadow\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[fabricsim.test_shadow]\necmp = json:dumps\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    r = Registry("routing policy", group="fabricsim.test_shadow")

    @r.register("ecmp")
    class Mine:
        pass

    with pytest.warns(PluginWarning, match="'ecmp' .* ignored: the name is taken"):
        assert r.get("ecmp") is Mine


def test_a_plugin_of_the_wrong_kind_is_refused_with_the_reason(monkeypatch, tmp_path):
    """Found in review: an entry point naming a plain function was registered as a routing policy
    and failed later, after the results folder existed."""
    dist = tmp_path / "wrong-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: wrong\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[fabricsim.test_kind]\nnot_a_policy = json:dumps\nok = fabricsim.routing.spray:Spray\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from fabricsim.routing import RoutingPolicy
    r = Registry("routing policy", group="fabricsim.test_kind")
    r.accepts(RoutingPolicy, "a RoutingPolicy subclass")
    assert r.names() == ["ok"]
    assert "is not a RoutingPolicy subclass" in r.unknown_message("not_a_policy")


def test_plugin_policy_and_topology_run_from_the_cli(tmp_path):
    (tmp_path / "s.yaml").write_text(SCENARIO)
    res = _cli("run", "s.yaml", "-o", "out", "--quiet", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["messages"]["completed"] == summary["messages"]["total"] == 8
    links = pd.read_parquet(tmp_path / "out" / "links.parquet")
    up = links[(links["kind"] == "leaf-spine") & links["src_name"].str.startswith("leaf")]
    # first_port sends every packet leaving a leaf to the same (first) spine
    assert (up["tx_data_bytes"] > 0).sum() == 2, up[["src_name", "dst_name", "tx_data_bytes"]]


def test_broken_and_unknown_plugins_are_one_line_errors(tmp_path):
    (tmp_path / "s.yaml").write_text(SCENARIO)
    res = _cli("validate", "s.yaml", "--set", "routing.policy=broken_policy", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    err = parse_error_line(res.stderr or res.stdout, "s.yaml")
    assert err["field"] == "routing.policy" and "failed to load" in err["msg"]

    res = _cli("validate", "s.yaml", "--set", "topology.builder=tiny_leaf_spin", cwd=tmp_path)
    assert res.returncode == 2
    err = parse_error_line(res.stderr or res.stdout, "s.yaml")
    assert err["field"] == "topology.builder" and "did you mean 'tiny_leaf_spine'" in err["msg"]

    res = _cli("validate", "s.yaml", "--set", "topology.builder=crashing", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    err = parse_error_line(res.stderr or res.stdout, "s.yaml")
    assert "plug-in 'crashing' failed: ZeroDivisionError" in err["msg"]
