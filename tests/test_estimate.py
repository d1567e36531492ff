"""The cost estimate of a packet-level run (engine/estimate.py) and the warning before a long one."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import fabricsim
from fabricsim.api import prepare
from fabricsim.cli import main
from fabricsim.engine import estimate as est

ROOT = Path(__file__).resolve().parents[1]


def test_packets_hops_and_wall_time_follow_from_sizes_and_paths():
    _l, sim = prepare({"topology": {"hosts_per_leaf": 4, "leaves": 2, "spines": 2},
                       "traffic": {"pattern": "all_to_all", "message_size": "10000B"}})
    e = est.estimate(sim)
    assert e["messages"] == 8 * 7
    assert e["data_packets"] == 8 * 7 * 3                    # ceil(10000 / 4096) = 3 per message
    # 24 of 56 pairs share a leaf (2 hops), 32 cross the spines (4 hops); every pair is sampled
    assert e["mean_hops"] == pytest.approx((24 * 2 + 32 * 4) / 56)
    assert e["packet_hops"] == int(e["data_packets"] * e["mean_hops"] * 2)       # one ACK per packet
    assert e["wall_s"] == pytest.approx(e["packet_hops"] / est.PACKET_HOPS_PER_S)
    _l, cells = prepare({"topology": {"hosts_per_leaf": 4, "leaves": 2, "spines": 2},
                         "traffic": {"pattern": "all_to_all", "message_size": "10000B"},
                         "simulation": {"cell_packets": 2}})
    assert est.estimate(cells)["data_packets"] == 8 * 7 * 2   # 2-packet cells


def test_a_576_gpu_all_to_all_warns_and_names_the_flow_engine():
    sc = {"topology": {"kind": "file", "path": str(ROOT / "topologies" / "su_576.yaml")},
          "traffic": {"pattern": "all_to_all", "message_size": "4MiB"}}
    cache: dict = {}
    _l, sim = prepare(sc, topologies=cache)
    e = est.estimate(sim)
    assert e["messages"] == 576 * 575 and e["wall_s"] > est.LONG_RUN_S
    w = est.long_run_warning(sim)
    assert w is not None and "simulation.engine=flow" in w and " h " in w
    _l, flow = prepare({**sc, "simulation": {"engine": "flow"}}, topologies=cache)
    assert est.long_run_warning(flow) is None                 # only packet runs are estimated


def test_the_cli_prints_the_estimate_before_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(est, "LONG_RUN_S", 0.0)              # every packet run counts as long
    r = CliRunner().invoke(main, ["run", str(ROOT / "scenarios" / "quickstart.yaml"), "-o", str(tmp_path / "out"),
                                  "-q"])
    assert r.exit_code == 0, r.output
    assert r.stderr.count("packet-hops") == 1 and "simulation.engine=flow" in r.stderr
    res = fabricsim.run(str(ROOT / "scenarios" / "quickstart.yaml"), estimate_warning=None)
    assert not any("packet-hops" in w for w in res.summary["warnings"])
