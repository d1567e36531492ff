"""The engine contract's declared results schema (fabricsim/engine/interface.py): a third engine,
written here and registered through ``ENGINES``, that hands over only what every engine must
(the core message columns, the required link columns, how the run ended) gets a complete results
folder: every declared column, NA where it reported nothing, and each group it left out named in
``summary["not_modelled"]`` with its own reason or the declared default."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

import fabricsim
from fabricsim.analysis.load import load_results
from fabricsim.analysis.writer import TABLES
from fabricsim.engine import ENGINES, RunOutcome
from fabricsim.engine import interface
from fabricsim.errors import SimulationError

SCENARIO = {"name": "toy", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 2, "leaves": 2, "spines": 2},
            "traffic": {"pattern": "permutation", "message_size": "64KiB"},
            "simulation": {"seed": 1, "engine": "toy"}}


class _Ended:
    """What ``Recorder.on_message`` reads of a message that ended (architecture.md, "An engine")."""

    def __init__(self, msg, release, end):
        self.msg, self.release, self.end = msg, release, end
        self.delivered, self.dropped, self.done, self.reason = msg.size_bytes, 0, True, ""


class ToyEngine:
    """Every message released at its start time and finished after its idle-fabric time (a
    permutation: no two share a port), its wire bytes put on the links of one shortest path.
    ``mode`` picks how the messages are handed over; ``not_modelled`` what the engine states."""

    name = "toy"
    mode = "rows"
    not_modelled: dict = {}

    def __init__(self, sim, recorder):
        self.sim, self.recorder = sim, recorder

    def run(self, progress=None) -> RunOutcome:
        sim, rec = self.sim, self.recorder
        model = sim.ideal_model()
        links = sim.link_table()
        tx = np.zeros(len(links), dtype=np.int64)
        ended = []
        for m in sim.messages:
            end = m.start_ps + model.fct(m)
            rec.on_release(None, m.start_ps)
            path = sim.paths.one_path(m.src, m.dst)
            wire = m.size_bytes + -(-m.size_bytes // sim.scenario.simulation.mtu) * sim.scenario.simulation.header
            for a, b in zip(path, path[1:]):
                tx[links.between(a, b)[0]] += wire
            ended.append(_Ended(m, m.start_ps, end))
        if self.mode == "rows":
            for st in sorted(ended, key=lambda s: s.end):
                rec.on_message(st)
        else:
            rec.stream_only()
            cols = {"message_id": [s.msg.id for s in ended], "src": [s.msg.src for s in ended],
                    "dst": [s.msg.dst for s in ended], "size_bytes": [s.msg.size_bytes for s in ended],
                    "qps": [s.msg.qps for s in ended], "start_ps": [s.msg.start_ps for s in ended],
                    "release_ps": [s.release for s in ended], "end_ps": [s.end for s in ended],
                    "fct_ps": [s.end - s.release for s in ended], "delivered_bytes": [s.delivered for s in ended],
                    "dropped_bytes": [0] * len(ended), "completed": [True] * len(ended),
                    "incomplete_reason": [""] * len(ended)}
            if self.mode == "columns_nan":        # transport columns handed over, NaN throughout
                cols.update({c: [np.nan] * len(ended) for c in interface.TRANSPORT_COLUMNS})
            if self.mode == "columns_short":      # a core column missing: a contract breach
                cols.pop("qps")
            rec.hand_over(pd.DataFrame(cols))
        link_cols = {"link_id": np.arange(len(links)), "src": links.src, "dst": links.dst, "kind": links.kind,
                     "rate_bps": links.rate_bps, "delay_ps": links.delay_ps, "tx_bytes": tx, "tx_data_bytes": tx}
        return RunOutcome(status="complete", end_ps=max(s.end for s in ended), events=len(ended), packet_hops=0,
                          links=link_cols, not_modelled=dict(self.not_modelled))


@pytest.fixture
def toy(monkeypatch):
    """ToyEngine registered as ``toy`` through ``ENGINES.register`` for one test (into a copy of
    the registry's table, restored afterwards, so no other test sees it)."""
    monkeypatch.setattr(ENGINES, "_items", dict(ENGINES._items))
    ENGINES.register("toy")(ToyEngine)
    yield ToyEngine
    ToyEngine.mode, ToyEngine.not_modelled = "rows", {}


OPTIONAL_GROUPS = {"transport", "nics", "drops", "queues", "control_bytes", "packets", "packet_latency",
                   "link_timeseries"}


def test_declarations_are_consistent():
    groups = {c.group for c in (*interface.TRANSPORT_COLUMNS.values(), *interface.LINK_COLUMNS.values())}
    assert groups - {""} <= set(interface.NOT_MODELLED_KEYS)
    assert set(interface.NOT_MODELLED_KEYS) == OPTIONAL_GROUPS
    assert interface.REQUIRED_LINK_COLUMNS == ("link_id", "src", "dst", "kind", "rate_bps", "delay_ps", "tx_bytes",
                                               "tx_data_bytes")
    assert not any(c.group for c in interface.MESSAGE_COLUMNS.values())
    assert all(c.group == "transport" for c in interface.TRANSPORT_COLUMNS.values())


@pytest.mark.parametrize("mode", ["rows", "columns", "columns_nan"])
def test_a_third_engine_gets_a_complete_results_folder(toy, tmp_path, mode):
    toy.mode = mode
    out = tmp_path / "out"
    r = fabricsim.run(SCENARIO, output_dir=out)
    s = r.summary
    assert s["status"] == "complete" and s["engine"] == "toy"
    nm = s["not_modelled"]
    assert set(nm) == OPTIONAL_GROUPS, nm
    for key in OPTIONAL_GROUPS - {"nics"}:
        assert nm[key] == interface.not_reported("toy", key)
    assert "transport" in nm["nics"]
    # every declared column, NA (typed, never 0) where the engine reported nothing
    m = r.messages
    assert [c for c in m.columns if c in interface.MESSAGE_COLUMNS] == list(interface.MESSAGE_COLUMNS)
    for col, c in interface.TRANSPORT_COLUMNS.items():
        assert m[col].isna().all() and str(m[col].dtype) == c.dtype, col
    L = r.links
    for col, c in interface.LINK_COLUMNS.items():
        assert col in L.columns
        if c.group:
            assert L[col].isna().all() and str(L[col].dtype) == c.dtype, col
    assert int(L["tx_bytes"].sum()) > 0
    # the summary's figures of the groups left out are null, the rest computed
    assert s["drops"]["packets"] is None and s["links"]["max_peak_queue_bytes"] is None
    assert all(v is None for v in s["transport"].values())
    assert s["packet_latency"]["count"] == 0 and s["packet_latency"]["p99_ps"] is None
    assert s["effective_bandwidth"]["completion_time_ratio"] == pytest.approx(1.0)
    # the folder: every table the run has, no nics or link time series (said above), loads back
    files = {p.name for p in out.iterdir()}
    for t in ("messages", "links", "latency_histogram", "goodput_timeseries"):
        assert {f"{t}.parquet", f"{t}.csv"} <= files, files
    assert not {f for f in files if f.startswith(("nics.", "link_timeseries."))}
    assert set(TABLES) >= {"nics", "link_timeseries"}
    back = load_results(out)
    assert json.loads((out / "summary.json").read_text())["not_modelled"] == nm
    assert back.messages["retransmitted_bytes"].isna().all() and len(back.messages) == len(m)


def test_an_engine_s_own_reasons_win(toy):
    toy.not_modelled = {"transport": "toy transport: none", "packet_latency": "toy: no packets"}
    s = fabricsim.run(SCENARIO).summary
    assert s["not_modelled"]["transport"] == "toy transport: none"
    assert s["not_modelled"]["packet_latency"] == "toy: no packets"
    assert s["not_modelled"]["drops"] == interface.not_reported("toy", "drops")
    assert "toy transport: none" in s["not_modelled"]["nics"]


@pytest.mark.parametrize("mode, not_modelled, says", [
    ("columns_short", {}, "handed over messages without qps"),
    ("rows", {"reordering": "?"}, "states not_modelled 'reordering' (allowed: packet_latency, transport"),
])
def test_a_contract_breach_is_one_clear_error(toy, mode, not_modelled, says):
    toy.mode, toy.not_modelled = mode, not_modelled
    with pytest.raises(SimulationError, match=says.replace("(", r"\(")):
        fabricsim.run(SCENARIO)


def test_a_group_stated_not_modelled_must_hold_no_value():
    """The packet engine reports drops (zeros); stating them not modelled as well is a breach."""
    from fabricsim.analysis.result import declared_tables
    r = fabricsim.run({**SCENARIO, "simulation": {"seed": 1}})
    out = RunOutcome(status="complete", end_ps=1, events=0, packet_hops=0, not_modelled={"drops": "?"})

    class Rec:
        latency = type("H", (), {"count": 1})()
    with pytest.raises(SimulationError, match="states drops not modelled but reports links.drops_buffer_full"):
        declared_tables(r.messages[list(interface.MESSAGE_COLUMNS)].copy(), r.links.copy(), out, Rec, "packet", False)


def test_the_built_in_engines_state_their_groups():
    """The packet engine reports every group; the flow engine states a reason for each it leaves
    out (nothing falls back to the generic 'not reported')."""
    sc = {**SCENARIO, "simulation": {"seed": 1}}
    assert fabricsim.run(sc).summary["not_modelled"] == {}
    nm = fabricsim.run({**sc, "simulation": {"seed": 1, "engine": "flow"}}).summary["not_modelled"]
    assert set(nm) == OPTIONAL_GROUPS - {"link_timeseries"}
    assert not [k for k, v in nm.items() if v.startswith("not reported")], nm
