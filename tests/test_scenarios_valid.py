"""Every bundled scenario validates, and every small one runs to completion.

Parametrised over ``scenarios/*.yaml``, so a new scenario file is tested automatically.
"""
from __future__ import annotations

import pytest

import fabricsim
from fabricsim.api import prepare
from fabricsim.cli import main

from conftest import SCENARIOS

FILES = sorted(SCENARIOS.glob("*.yaml"))
# scenarios offering at most this much payload are run in the test suite (quickstart: 128 MiB)
SMALL_BYTES = 512 * 2**20


def test_there_are_scenarios():
    names = {p.stem for p in FILES}
    assert {"quickstart", "incast_32to1", "all_to_all_16", "permutation_adaptive", "permutation_spray",
            "flowlet", "messages_csv"} <= names


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario_validates(path, runner):
    res = runner.invoke(main, ["validate", str(path)])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(f"{path}: ok (")
    loaded, sim = prepare(path)
    assert loaded.scenario.name == path.stem  # results/<name> never collides
    assert sim.messages


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_small_scenario_runs_to_completion(path):
    _, sim = prepare(path)
    offered = sum(m.size_bytes for m in sim.messages)
    if offered > SMALL_BYTES:
        pytest.skip(f"{offered} bytes offered: too large for the test suite")
    res = fabricsim.run(path)
    m = res.summary["messages"]
    assert m["total"] == len(sim.messages)
    assert m["completed"] == m["total"], m
    assert res.summary["run"]["status"] == "complete"
    assert res.summary["bytes"]["delivered_payload_bytes"] == offered
    assert bool(res.messages["completed"].all())


# --- what the specific scenarios promise ----------------------------------------------------


def test_incast_scenario_shape():
    _, sim = prepare(SCENARIOS / "incast_32to1.yaml")
    assert sim.topology.num_hosts >= 40
    assert len(sim.messages) == 32
    assert {m.dst for m in sim.messages} == {0}
    assert len({m.src for m in sim.messages}) == 32
    assert {m.size_bytes for m in sim.messages} == {256 * 1024}


def test_all_to_all_scenario_shape():
    _, sim = prepare(SCENARIOS / "all_to_all_16.yaml")
    assert sim.topology.num_hosts == 16
    pairs = {(m.src, m.dst) for m in sim.messages}
    assert len(pairs) == len(sim.messages) == 16 * 15
    assert {m.size_bytes for m in sim.messages} == {64 * 1024}


@pytest.mark.parametrize("name, policy", [("permutation_adaptive", "adaptive"), ("permutation_spray", "spray"),
                                          ("flowlet", "flowlet")])
def test_routing_variants_differ_from_the_raw_quickstart_fabric_only_in_routing(name, policy):
    base = prepare(SCENARIOS / "leaf_spine_32_raw.yaml")[0].scenario.model_dump(mode="json")
    other = prepare(SCENARIOS / f"{name}.yaml")[0].scenario.model_dump(mode="json")
    assert other["routing"]["policy"] == policy
    for key in ("topology", "traffic", "receiver", "congestion_control", "simulation", "outputs"):
        assert other[key] == base[key], key


def test_flowlet_gap():
    sc = prepare(SCENARIOS / "flowlet.yaml")[0].scenario
    assert sc.routing.params.gap == 5 * 10**6  # 5 us in ps


def test_csv_scenario_dependencies_are_honoured():
    loaded, sim = prepare(SCENARIOS / "messages_csv.yaml")
    with_deps = [m for m in sim.messages if m.deps]
    assert len(sim.messages) >= 8 and len(with_deps) == 2
    res = fabricsim.run(loaded)
    msgs = res.messages.set_index("message_id")
    for m in with_deps:
        assert msgs.loc[m.id, "release_ps"] >= max(msgs.loc[d, "end_ps"] for d in m.deps) + m.gap_ps
