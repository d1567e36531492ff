"""Metric fixes: the PFC link time series, the all-active goodput window, the slowdown headline.

Each test fails on the code before the fix (see docs/fidelity/metrics.md for the measured
before/after figures).
"""
from __future__ import annotations

import json

import pytest

import fabricsim
from fabricsim.cli import main

PFC_INCAST = {"name": "pfc",
              "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 2,
                           "buffer": {"size": "4MiB"}},
              "traffic": {"pattern": "incast", "senders": 7, "receiver": 0, "message_size": "512KiB"},
              "switch": {"pfc": {"enabled": True}},
              "outputs": {"link_sample_interval": "2us"},
              "simulation": {"seed": 1, "time_limit": "5ms"}}


# ----------------------------------------------------------------------------- PFC time series
def test_pfc_link_timeseries_utilisation_is_a_fraction_of_line_rate():
    r = fabricsim.run(PFC_INCAST)
    assert r.summary["run"]["pfc_pause_events"] > 0
    ts = r.link_timeseries
    assert len(ts)
    assert ts["utilisation"].min() >= 0.0
    # a lossless switch port counts a packet when its last bit is out: at most one packet
    # (4178 B, 84 ns at 400G) beyond the line rate in a 2 us bin
    assert ts["utilisation"].max() <= 1.0 + 4178 * 8 / (400e9 * 2e-6) + 1e-9
    # the congested port towards the receiver runs at line rate while the incast lasts
    links = r.links.set_index("link_id")
    hot = links[(links["dst"] == 0)].index[0]
    assert ts[ts["link_id"] == hot]["utilisation"].max() > 0.95
    # the bins add up to what each port has finished sending (whole packets on lossless ports)
    per_link = ts.groupby("link_id")["tx_bytes"].sum()
    for lid, row in links.iterrows():
        sent = int(per_link.get(lid, 0))
        assert row["tx_bytes"] - 4178 <= sent <= row["tx_bytes"], (lid, sent, row["tx_bytes"])


def test_lossy_link_timeseries_still_counts_partial_packets_pro_rata():
    sc = dict(PFC_INCAST, switch={"pfc": {"enabled": False}})
    r = fabricsim.run(sc)
    ts = r.link_timeseries
    assert ts["utilisation"].min() >= 0.0 and ts["utilisation"].max() <= 1.0 + 1e-9
    per_link = ts.groupby("link_id")["tx_bytes"].sum()
    links = r.links.set_index("link_id")
    # the run ends at the last completion; what has not left a port by then is its queue
    assert (per_link <= links.loc[per_link.index, "tx_bytes"]).all()


# ----------------------------------------------------------------------------- all-active window
def _all_to_all(size, routing="ecmp", seed=1):
    return {"name": "a2a", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 4},
            "traffic": {"pattern": "all_to_all", "message_size": size}, "routing": {"policy": routing},
            "simulation": {"seed": seed}}


def test_all_active_goodput_is_null_with_a_reason_when_its_window_is_shorter_than_a_base_rtt():
    r = fabricsim.run(_all_to_all("4KiB"))      # one packet per message: the window is a burst
    eb = r.summary["effective_bandwidth"]
    assert eb["goodput_while_all_active_fraction"] is None
    assert eb["goodput_while_all_active_min_window_ps"] > 0
    w = eb["goodput_while_all_active_window_ps"]
    assert w is None or w < eb["goodput_while_all_active_min_window_ps"]
    assert eb["goodput_while_all_active_null_reason"]


def test_all_active_goodput_when_reported_has_a_window_of_at_least_one_base_rtt_and_is_at_most_1():
    seen = 0
    for size in ("64KiB", "256KiB"):
        for routing in ("ecmp", "spray", "adaptive"):
            eb = fabricsim.run(_all_to_all(size, routing)).summary["effective_bandwidth"]
            f = eb["goodput_while_all_active_fraction"]
            if f is None:
                assert eb["goodput_while_all_active_null_reason"]
                continue
            seen += 1
            assert eb["goodput_while_all_active_null_reason"] is None
            assert eb["goodput_while_all_active_window_ps"] >= eb["goodput_while_all_active_min_window_ps"]
            assert 0 < f <= 1.0
            assert 0 < eb["goodput_fraction"] <= 1.0
    assert seen >= 3


def test_min_window_is_the_longest_base_rtt_the_engine_gives_the_flows():
    from fabricsim.api import prepare
    from fabricsim.analysis.ideal import IdealModel
    from fabricsim.analysis.recorder import Recorder
    from fabricsim.engine.packet import PacketEngine
    sc = _all_to_all("64KiB")
    _, sim = prepare(sc)
    eng = PacketEngine(sim, Recorder())
    model = IdealModel(sim)
    pairs = {(m.src, m.dst) for m in sim.messages}
    assert all(eng.base_rtt(a, b) == model.base_rtt(a, b) for a, b in pairs)
    eb = fabricsim.run(sc).summary["effective_bandwidth"]
    assert eb["goodput_while_all_active_min_window_ps"] == max(model.base_rtt(a, b) for a, b in pairs)


# ----------------------------------------------------------------------------- slowdown headline
def victim_scenario(write):
    """Three 2 MiB elephants into host 0, then a 64 KiB mouse: the pattern's completion time is
    set by host 0's downlink (ratio ~1), the mouse waits behind the queue the elephants built
    (slowdown >> 4)."""
    csv = write("victim.csv", "id,src,dst,size,start,deps\n0,4,0,2MiB,0us,\n1,5,0,2MiB,0us,\n"
                              "2,6,0,2MiB,0us,\n3,7,0,64KiB,40us,\n")
    return {"name": "victim",
            "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 2,
                         "buffer": {"size": "unbounded"}},
            "traffic": {"pattern": "csv", "path": str(csv)}, "routing": {"policy": "ecmp"},
            "simulation": {"seed": 1}}


def test_headline_shows_the_victim_flow_beside_the_completion_ratio(write):
    r = fabricsim.run(victim_scenario(write))
    h = r.headline()
    slow = r.messages["slowdown"].astype("float64")
    assert h["completion_time_ratio"] > 0.9                  # the pattern looks fine ...
    assert h["messages_over_4x"] == int((slow > 4).sum()) == 1    # ... but one message is a victim
    assert h["slowdown_p99"] == r.summary["slowdown"]["p99"] > 4
    assert h["messages_completed"] == h["messages_total"] == 4
    assert "over_4x=1" in repr(r)


def test_cli_summary_and_report_show_slowdown_p99_and_victims(write, runner, tmp_path):
    sc = write("victim.yaml", json.dumps(victim_scenario(write)))
    out = tmp_path / "res"
    res = runner.invoke(main, ["run", str(sc), "-o", str(out), "--report"])
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if ln.startswith("slowdown"))
    assert "1 message slower than 4x ideal" in line and "p99" in line
    html = (out / "report.html").read_text()
    assert "messages slower than 4x ideal" in html and "message slowdown p99" in html
    summary = json.loads((out / "summary.json").read_text())
    assert summary["slowdown"]["messages_over_4x"] == 1


def test_compare_reports_slowdown_p99_and_victims(write):
    df = fabricsim.compare(victim_scenario(write), vary={"routing": ["ecmp", "spray"]})
    assert {"slowdown_p99", "messages_over_4x"} <= set(df.columns)
    assert (df["messages_over_4x"] >= 1).all()


# ----------------------------------------------------------------------------- PXN capacity
def test_pxn_goodput_fraction_counts_the_relays_ports_and_stays_at_most_1(tmp_path):
    """GPU 0 sends to four GPUs of the other rack on four rails: with PXN the payload leaves by
    four relay GPUs' NICs. Counting only GPU 0's own NIC as capacity gave a fraction of 2.8 and
    a completion-time ratio of 2.9."""
    path = tmp_path / "m.csv"
    path.write_text("src,dst,size_bytes\n" + "".join(f"0,{d},{2**21}\n" for d in (36, 37, 38, 39)))
    for pxn in (False, True):
        r = fabricsim.run({"name": "pxn", "topology": {"kind": "cluster", "domain": "nvl36", "racks": 2,
                                                      "nic": {"ports": 2, "rate": "400Gbps"}},
                          "traffic": {"pattern": "csv", "path": str(path)}, "routing": {"policy": "adaptive"},
                          "nic": {"plane_split": "per_packet", "pxn": pxn, "pxn_chunk": "256KiB"}})
        eb = r.summary["effective_bandwidth"]
        assert r.summary["messages"]["completed"] == 4
        assert 0 < eb["goodput_fraction"] <= 1.0
        assert 0 < eb["completion_time_ratio"] <= 1.0
        f = eb["goodput_while_all_active_fraction"]
        assert f is None or 0 < f <= 1.0
        # NIC ports in use: GPU 0's two without PXN, the four relays' two each with it
        assert eb["sender_capacity_bps"] == (4 if pxn else 1) * 2 * 400 * 10**9


# ----------------------------------------------------------------------------- ideal references
def _cluster(domain, pattern, plane_split, pxn, ports, seed=1):
    size = {"nodes": 2} if domain == "hgx8" else {"racks": 2}
    traffic = {"pattern": pattern, "message_size": "64KiB"}
    if pattern == "incast":
        traffic.update(senders=4, receiver=0)
    return {"name": "ideal", "topology": {"kind": "cluster", "domain": domain, **size,
                                          "nic": {"ports": ports, "rate": "400Gbps"}},
            "traffic": traffic, "routing": {"policy": "adaptive"},
            "nic": {"plane_split": plane_split, "pxn": pxn, "pxn_chunk": "128KiB"},
            "simulation": {"seed": seed}}


@pytest.mark.parametrize("domain,pattern,split,pxn,ports,seed", [
    ("hgx8", "incast", "per_flow", False, 2, 56),     # two NIC flows in parallel on two ports: was 1.143
    ("hgx8", "permutation", "per_packet", True, 1, 38),   # relayed messages: was 1.574
    ("hgx8", "permutation", "per_flow", True, 2, 31),
    ("nvl36", "incast", "per_packet", True, 2, 13),
])
def test_ideal_references_are_lower_bounds(domain, pattern, split, pxn, ports, seed):
    """Every message's ideal FCT is at most its FCT (slowdown >= 1) and the pattern's ideal
    duration at most its duration (completion-time ratio <= 1), PXN or not."""
    r = fabricsim.run(_cluster(domain, pattern, split, pxn, ports, seed))
    assert r.summary["messages"]["completed"] == r.summary["messages"]["total"]
    assert (r.messages["slowdown"].astype("float64") >= 1.0).all()
    assert 0 < r.summary["effective_bandwidth"]["completion_time_ratio"] <= 1.0


# ----------------------------------------------------------------------------- packet hops split
@pytest.mark.parametrize("pfc", [False, True])
def test_packet_hops_split_into_data_and_control(pfc, tmp_path):
    # one 1 MiB message across the spine: 256 MTU packets over 4 links each; the ACKs come back
    # over 4 links each (the last ones may still be on their way when the run ends)
    csv = tmp_path / "one.csv"
    csv.write_text("src,dst,size_bytes\n0,1,1048576\n")
    sc = {"name": "hops", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 1, "leaves": 2, "spines": 1},
          "traffic": {"pattern": "csv", "path": str(csv)},
          "switch": {"pfc": {"enabled": pfc}}, "simulation": {"seed": 1}}
    r = fabricsim.run(sc)
    run = r.summary["run"]
    ctrl = r.summary["conservation"]["control"]
    sent, arrived = ctrl["sent_packets"], ctrl["arrived_packets"]
    assert arrived > 0 and ctrl["dropped_packets"] == 0
    assert run["packet_hops_data"] == 4 * 256
    assert run["packet_hops_data"] + run["packet_hops_control"] == run["packet_hops"]
    assert run["packet_hops_control"] == int(r.links["tx_control_packets"].sum())
    # an arrived ACK crossed 4 links; one in flight 0 to 4 (0: still held by the NIC; 4: on the
    # last link, counted when it was serialised there)
    assert 4 * arrived <= run["packet_hops_control"] <= 4 * sent
    back = int(r.links.loc[r.links["src"] == 1, "tx_control_packets"].sum())   # the receiver's NIC
    assert arrived <= back <= sent
    assert (r.links.loc[r.links["src"] == 0, "tx_control_packets"] == 0).all()
    assert (r.links["tx_control_packets"] <= r.links["tx_packets"]).all()


@pytest.mark.parametrize("pfc", [False, True])
def test_control_packets_are_counted_on_the_strict_priority_lane_too(pfc):
    # DCQCN's CNPs go by a lossy switch's strict-priority lane (Switch.priority), a lossless
    # port's control queue with PFC; every control packet (ACK, NAK, CNP) is 86 B on the wire
    # here, so each link's control bytes are 86 x its control packets, lane or not
    r = fabricsim.run("scenarios/incast_dcqcn.yaml", overrides=[f"switch.pfc.enabled={str(pfc).lower()}"])
    assert r.summary["transport"]["cnps"] > 0
    L = r.links
    assert (L["tx_control_bytes"] == 86 * L["tx_control_packets"]).all()
    assert r.summary["run"]["packet_hops_control"] == int(L["tx_control_packets"].sum())


def _degraded_fabric(slow_rate):
    """Two leaves of two hosts, two spines; the leaf0-s0 link (on the first shortest path any
    walk finds) at ``slow_rate``, every other link 400G."""
    link = {"rate": "400Gbps", "delay": "500ns"}
    nodes = ([{"name": f"h{i}", "type": "host"} for i in range(4)]
             + [{"name": f"leaf{i}", "type": "switch", "tier": 1} for i in range(2)]
             + [{"name": f"s{i}", "type": "switch", "tier": 2} for i in range(2)])
    links = [{"a": f"h{i}", "b": f"leaf{i // 2}", **link} for i in range(4)]
    links += [{"a": f"leaf{a}", "b": f"s{s}", **link, "rate": slow_rate if (a, s) == (0, 0) else "400Gbps"}
              for a in range(2) for s in range(2)]
    return {"kind": "explicit", "nodes": nodes, "links": links, "switch_latency": "600ns"}


@pytest.mark.parametrize("engine", ["packet", "flow"])
def test_the_ideal_takes_the_fastest_link_at_each_hop_not_the_first_path(engine, tmp_path):
    """A message alone, adaptively routed, around a degraded first spine link: its ideal is the
    intact fabric's (the best the idle fabric offers), not the time through the 100G link the
    first shortest path holds (which was 4x too long, and the flow engine's floor). The flow
    engine's adaptive split routes around the slow link (slowdown about 1, as intact); the packet
    engine's per-packet AR pays for the packets it sent there before that link queued.""" 
    csv = tmp_path / "one.csv"
    csv.write_text(f"id,src,dst,size_bytes,release_ps\n0,0,2,{1 << 20},0\n")

    def run(rate):
        return fabricsim.run({"name": "ideal_degraded", "topology": _degraded_fabric(rate),
                              "traffic": {"pattern": "csv", "path": str(csv)},
                              "routing": {"policy": "adaptive"},
                              "simulation": {"engine": engine, "seed": 1}})
    fast, slow = run("400Gbps"), run("100Gbps")
    ideal = int(fast.messages["ideal_fct_ps"].iloc[0])
    assert int(slow.messages["ideal_fct_ps"].iloc[0]) == ideal
    assert ideal < 1.3 * (1 << 20) * 8 * 10**12 // (400 * 10**9)   # 1 MiB at 400G (at 100G: 4x that)
    if engine == "flow":       # the fluid adaptive split routes around the slow link
        assert slow.messages["slowdown"].iloc[0] == pytest.approx(fast.messages["slowdown"].iloc[0], rel=0.05)
    else:                      # per-packet AR sends to the idle slow link until it queues: slower, never faster
        assert 1.0 < slow.messages["slowdown"].iloc[0] < 4.0
