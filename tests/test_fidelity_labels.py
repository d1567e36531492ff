"""Estimates are labelled as estimates in the outputs: ``summary["fidelity"]`` names the model and
the figures that are its estimates, the text summary marks them, and a flow run of a scenario
whose profile configures packet-level models (telemetry CC, PFC, a receiver) says once that the
flow engine does not simulate them, instead of reporting them silently."""
from __future__ import annotations

import json

import fabricsim
from fabricsim.cli import main
from fabricsim.engine.interface import TIMED_FIGURES

from conftest import SCENARIOS

SMALL = {"name": "f", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 2, "leaves": 2, "spines": 2},
         "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "256KiB"},
         "simulation": {"seed": 1, "time_limit": "1ms"}}


def _warned(summary) -> list[str]:
    return [w for w in summary["warnings"] if "does not simulate" in w]


def test_a_flow_run_labels_its_estimates_and_the_models_it_does_not_simulate():
    r = fabricsim.run({**SMALL, "profile": "spectrum_x", "simulation": {**SMALL["simulation"], "engine": "flow"}})
    fid = r.summary["fidelity"]
    assert fid["engine"] == "flow" and fid["model"].startswith("fluid: max-min fair rates")
    assert set(TIMED_FIGURES) <= set(fid["estimated"])
    assert {"fct", "slowdown", "pattern.duration_ps", "effective_bandwidth.completion_time_ratio",
            "messages.fct_ps"} <= set(fid["estimated"])
    # exact in both engines: not labelled
    assert not {"pattern.ideal_duration_ps", "bytes", "messages", "effective_bandwidth.sender_capacity_bps"} \
        & set(fid["estimated"])
    assert fid["not_simulated"]["congestion_control"] == "telemetry"
    assert fid["not_simulated"]["receiver"] == "ddp" and "pfc" in fid["not_simulated"]["switch"]
    assert "ideal" in fid["assumptions"]["congestion_control"]
    w = _warned(r.summary)
    assert len(w) == 1 and "congestion_control telemetry" in w[0] and "pfc" in w[0] and "ideal" in w[0], w
    # no event kernel behind a flow run
    assert r.summary["kernel"] is None


def test_a_flow_run_of_default_models_does_not_warn_but_still_says_what_it_assumes():
    r = fabricsim.run({**SMALL, "simulation": {**SMALL["simulation"], "engine": "flow"}})
    assert not _warned(r.summary)
    assert r.summary["fidelity"]["not_simulated"] == {"congestion_control": "none", "receiver": "ddp",
                                                      "switch": "defaults"}
    assert "fct" in r.summary["fidelity"]["estimated"]


def test_a_packet_run_estimates_nothing_unless_it_moves_cells():
    p = fabricsim.run({**SMALL, "profile": "spectrum_x"}).summary
    assert p["fidelity"]["engine"] == "packet" and p["fidelity"]["estimated"] == []
    assert not _warned(p) and p["kernel"] == "heap"
    c = fabricsim.run({**SMALL, "simulation": {**SMALL["simulation"], "packet": {"cell_packets": 4}}}).summary
    assert set(c["fidelity"]["estimated"]) == set(TIMED_FIGURES) and "cells of 4" in c["fidelity"]["model"]


def test_the_text_summary_marks_estimates_and_the_warning_once(runner, tmp_path):
    """``fabricsim run scenarios/quickstart.yaml`` with the flow engine (profile spectrum_x)."""
    res = runner.invoke(main, ["run", str(SCENARIOS / "quickstart.yaml"), "--set", "simulation.engine=flow",
                               "-o", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert "cc telemetry (not simulated)" in lines[0]
    for head in ("effective bw", "slowdown", "message FCT"):
        (line,) = [ln for ln in lines if ln.startswith(head)]
        assert line.endswith("[estimate]"), line
    assert any(ln.startswith("fidelity") and "flow engine" in ln for ln in lines)
    assert len([ln for ln in lines if "does not simulate" in ln]) == 1, res.output
    s = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert s["fidelity"]["not_simulated"]["congestion_control"] == "telemetry"
    # the packet engine's summary has no such marks
    res = runner.invoke(main, ["run", str(SCENARIOS / "quickstart.yaml"), "--set", "simulation.time_limit=2ms",
                               "--set", "traffic.message_size=64KiB", "-o", str(tmp_path / "pkt")])
    assert res.exit_code == 0, res.output
    assert "[estimate]" not in res.output and "not simulated" not in res.output
