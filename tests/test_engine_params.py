"""Per-engine parameters: ``simulation.packet`` (the packet engine's ``Params``: kernel,
cell_packets) beside ``simulation.flow``, through the one registry mechanism
(``SimulationConfig.engine_params``); the top-level ``simulation.kernel`` / ``cell_packets`` as
documented aliases; another engine's parameters warned about once."""
from __future__ import annotations

import json

import pytest
import yaml

import fabricsim
from fabricsim.cli import main
from fabricsim.config import load_scenario
from fabricsim.engine import ENGINES
from fabricsim.engine.packet import PacketParams

from conftest import BASE_SCENARIO, parse_error_line

SMALL = {"name": "p", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 2, "leaves": 2, "spines": 2},
         "traffic": {"pattern": "permutation", "message_size": "64KiB"}, "simulation": {"seed": 1}}


def _sim(**simulation):
    return load_scenario({**SMALL, "simulation": {"seed": 1, **simulation}}).scenario.simulation


def test_the_packet_engine_has_its_params_through_the_registry():
    assert ENGINES.get("packet").Params is PacketParams
    assert set(PacketParams.model_fields) == {"kernel", "cell_packets"}
    sim = _sim(packet={"kernel": "simpy", "cell_packets": 2})
    assert isinstance(sim.engine_params, PacketParams)
    assert (sim.engine_params.kernel, sim.engine_params.cell_packets) == ("simpy", 2)
    # the read-side aliases
    assert (sim.kernel, sim.cell_packets) == ("simpy", 2)


@pytest.mark.parametrize("given", [{"kernel": "simpy"}, {"packet": {"kernel": "simpy"}},
                                   {"kernel": "simpy", "packet": {"kernel": "simpy"}}])
def test_alias_and_block_give_the_same_scenario(given):
    """Either spelling resolves to one ``simulation.packet`` block (the resolved scenario, and so
    the results folder's hash, do not depend on the spelling)."""
    sc = load_scenario({**SMALL, "simulation": {"seed": 1, **given}}).scenario
    dumped = sc.model_dump(mode="json")["simulation"]
    assert dumped["packet"] == {"kernel": "simpy", "cell_packets": 1}
    assert "kernel" not in dumped and "cell_packets" not in dumped
    # the resolved scenario loads back to itself
    assert load_scenario(sc.model_dump(mode="json")).scenario.model_dump(mode="json") == sc.model_dump(mode="json")


def test_a_packet_run_takes_its_kernel_from_the_block():
    r = fabricsim.run({**SMALL, "simulation": {"seed": 1, "packet": {"kernel": "simpy"}}})
    assert r.summary["kernel"] == "simpy" and r.summary["run"]["kernel"]["requested"] == "simpy"
    assert r.summary["status"] == "complete"


@pytest.mark.parametrize("alias, block, value", [("kernel", "kernel", "compiled"), ("cell_packets", "cell_packets", 4)])
def test_alias_and_block_disagreeing_is_one_error_naming_both(runner, write, tmp_path, alias, block, value):
    other = {"kernel": "heap", "cell_packets": 2}[block]
    p = write("s.yaml", BASE_SCENARIO + f"  {alias}: {value}\n  packet: {{{block}: {other}}}\n")
    res = runner.invoke(main, ["validate", str(p)])
    assert res.exit_code == 2, res.output
    err = parse_error_line(res.output.strip(), p)
    assert err["field"] == f"simulation.{alias}" and f"simulation.packet.{block}" in err["msg"], err
    # the same through --set
    p2 = write("s2.yaml", BASE_SCENARIO + f"  packet: {{{block}: {other}}}\n")
    res = runner.invoke(main, ["validate", str(p2), "--set", f"simulation.{alias}={value}"])
    assert res.exit_code == 2 and f"simulation.packet.{block}" in res.output, res.output


def test_the_packet_block_checks_its_fields(runner, write):
    p = write("s.yaml", BASE_SCENARIO + "  packet: {kernl: simpy}\n")
    res = runner.invoke(main, ["validate", str(p)])
    assert res.exit_code == 2, res.output
    err = parse_error_line(res.output.strip(), p)
    assert err["field"] == "simulation.packet.kernl" and "allowed: kernel, cell_packets" in err["msg"], err
    p = write("s2.yaml", BASE_SCENARIO + "  packet: {cell_packets: 0}\n")
    res = runner.invoke(main, ["validate", str(p)])
    assert res.exit_code == 2 and "simulation.packet.cell_packets" in res.output, res.output


@pytest.mark.parametrize("given, named", [
    ({"kernel": "compiled"}, ["simulation.kernel"]),
    ({"packet": {"kernel": "simpy", "cell_packets": 4}}, ["simulation.packet.cell_packets", "simulation.packet.kernel"]),
])
def test_a_flow_run_given_packet_parameters_warns_once_naming_them(runner, tmp_path, given, named):
    sc = {**SMALL, "simulation": {"seed": 1, "engine": "flow", **given}}
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(sc))
    res = runner.invoke(main, ["run", str(p), "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    lines = [ln for ln in res.output.splitlines() if "packet engine" in ln and "ignores" in ln]
    assert len(lines) == 1, res.output
    assert all(n in lines[0] for n in named), lines
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    hits = [w for w in summary["warnings"] if "ignores" in w and "packet engine" in w]
    assert len(hits) == 1 and all(n in hits[0] for n in named), summary["warnings"]
    # the flow run has no event kernel: it does not report one
    assert summary["kernel"] is None


def test_defaults_given_explicitly_or_no_packet_parameters_do_not_warn():
    for given in ({}, {"packet": {"kernel": "heap", "cell_packets": 1}}):
        r = fabricsim.run({**SMALL, "simulation": {"seed": 1, "engine": "flow", **given}})
        assert not [w for w in r.summary["warnings"] if "ignores" in w], r.summary["warnings"]


def test_mtu_and_header_stay_shared():
    """The flow engine frames with them (they change its result), so they are not packet-only."""
    a = fabricsim.run({**SMALL, "simulation": {"seed": 1, "engine": "flow"}})
    b = fabricsim.run({**SMALL, "simulation": {"seed": 1, "engine": "flow", "header": "200B"}})
    assert b.summary["pattern"]["duration_ps"] > a.summary["pattern"]["duration_ps"]
    assert not [w for w in b.summary["warnings"] if "ignores" in w]
