"""The transport against theory and the issue's validation cases: receivers under spraying,
reorder statistics on a two-path fabric, DCQCN and telemetry fairness on one bottleneck, and the
32 -> 1 incast under lossy, PFC and telemetry operation."""
from __future__ import annotations

import numpy as np
import pytest

import fabricsim
from fabricsim.errors import ConfigError


def _permutation(routing, receiver, seed=1):
    return {"name": "rx", "topology": {"hosts_per_leaf": 4, "leaves": 2, "spines": 4, "buffer": {"size": "unbounded"}},
            "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "1MiB"},
            "routing": {"policy": routing}, "receiver": {"model": receiver}, "simulation": {"seed": seed}}


# ---------------------------------------------------------------------------------------------
# receivers


def test_go_back_n_collapses_under_spraying_and_all_receivers_agree_without_reordering():
    spray = {rx: fabricsim.run(_permutation("spray", rx)).summary for rx in ("ddp", "reorder_buffer", "go_back_n")}
    gp = {rx: s["effective_bandwidth"]["goodput_fraction"] for rx, s in spray.items()}
    assert gp["go_back_n"] < 0.2 * gp["ddp"]
    assert spray["go_back_n"]["transport"]["retransmitted_bytes_by_cause"]["nak"] > 0
    assert spray["ddp"]["transport"]["retransmitted_bytes"] == 0
    assert spray["ddp"]["transport"]["out_of_order_fraction"] > 0.3
    # ECMP keeps every flow on one path: no reordering, so the three receivers behave identically
    ecmp = {rx: fabricsim.run(_permutation("ecmp", rx)) for rx in ("ddp", "reorder_buffer", "go_back_n")}
    ref = ecmp["ddp"].messages["fct_ps"].tolist()
    for rx, res in ecmp.items():
        assert res.messages["fct_ps"].tolist() == ref, rx
        assert res.summary["transport"]["out_of_order_fraction"] == 0
        assert res.summary["transport"]["retransmitted_bytes"] == 0


def test_a_small_reorder_buffer_overflows_and_recovers_selectively():
    sc = _permutation("spray", "reorder_buffer")
    sc["receiver"]["buffer"] = "8KiB"
    res = fabricsim.run(sc)
    m = res.messages
    assert m["completed"].all()
    assert m["reorder_overflow_bytes"].sum() > 0
    assert m["rtx_sack_bytes"].sum() + m["rtx_timeout_bytes"].sum() >= m["reorder_overflow_bytes"].sum()
    assert (res.nics["peak_reorder_bytes"] <= 8 * 1024).all()
    assert m["rtx_nak_bytes"].sum() == 0


# 400G: one 4178 B packet every 83.56 ns. The second path is longer by 2 x 229.79 ns = 5.5
# packet times, so a packet sent on it at PSN k is overtaken by every packet sent on the short
# path up to PSN k + 5: its reorder distance (highest PSN received before it minus its own) is
# k + 5 - k = 5 when packet k + 5 took the short path, and never more.
SER_PS = 83_560
EXTRA_PS = 229_790


def _two_paths():
    nodes = [{"name": "src", "type": "host"}, {"name": "dst", "type": "host"},
             {"name": "a", "type": "switch", "tier": 1}, {"name": "b", "type": "switch", "tier": 1},
             {"name": "s0", "type": "switch", "tier": 2}, {"name": "s1", "type": "switch", "tier": 2}]
    links = [{"a": "src", "b": "a", "rate": "400Gbps", "delay": "500ns"},
             {"a": "dst", "b": "b", "rate": "400Gbps", "delay": "500ns"},
             {"a": "a", "b": "s0", "rate": "400Gbps", "delay": "500ns"},
             {"a": "s0", "b": "b", "rate": "400Gbps", "delay": "500ns"},
             {"a": "a", "b": "s1", "rate": "400Gbps", "delay": f"{500_000 + EXTRA_PS}ps"},
             {"a": "s1", "b": "b", "rate": "400Gbps", "delay": f"{500_000 + EXTRA_PS}ps"}]
    return {"kind": "explicit", "nodes": nodes, "links": links}


def test_reorder_distance_on_two_paths_matches_the_delay_difference(tmp_path):
    (tmp_path / "m.csv").write_text("id,src,dst,size_bytes\n0,0,1,4194304\n")
    res = fabricsim.run({"name": "two", "topology": _two_paths(), "routing": {"policy": "spray"},
                         "traffic": {"pattern": "csv", "path": str(tmp_path / "m.csv")}})
    row = res.messages.iloc[0]
    assert row["completed"]
    m = int(2 * EXTRA_PS // SER_PS)            # 5 packet times
    assert m == 5
    assert row["reorder_distance_max_packets"] == m
    assert row["reorder_distance_p99_packets"] == m
    # a packet on the long path is late unless all of the next m packets also took it:
    # P = 1/2 x (1 - 2^-m) = 0.484 with a fair coin per packet
    assert abs(row["out_of_order_fraction"] - 0.5 * (1 - 2.0 ** -m)) < 0.04
    # a late packet waits for nothing (direct placement), but the ones after a gap wait for it:
    # about the long path's extra delay, plus the jitter where the two paths merge (the last
    # switch's port to the receiver briefly gets packets from both at once)
    assert 0 < row["reorder_delay_max_ps"] <= 2 * EXTRA_PS + 5 * SER_PS
    assert row["reorder_delay_mean_ps"] < EXTRA_PS
    assert row["retransmitted_bytes"] == 0
    nic = res.nics.set_index("host").loc[1]
    assert nic["reorder_distance_max_packets"] == m
    assert nic["peak_reorder_bytes"] > 0


# ---------------------------------------------------------------------------------------------
# congestion control on one bottleneck: 4 flows from one leaf, starting 1 ms apart, share its
# 40 Gbps uplink (the DCQCN paper's link speed). Throughput per flow is measured between 15 and
# 25 ms as the difference of two deterministic runs stopped at those times.


def _fair(tmp_path, cc, t_ms):
    rows = ["id,src,dst,size_bytes,start_ps"] + [f"{i},{i},4,{2**33},{i * 10**9}" for i in range(4)]
    (tmp_path / "f.csv").write_text("\n".join(rows) + "\n")
    return fabricsim.run({
        "name": "fair", "topology": {"hosts_per_leaf": 4, "leaves": 2, "spines": 1,
                                     "host_link": {"rate": "40Gbps", "delay": "1us"},
                                     "fabric_link": {"rate": "40Gbps", "delay": "1us"}, "buffer": {"size": "16MiB"}},
        "traffic": {"pattern": "csv", "path": str(tmp_path / "f.csv")}, "congestion_control": {"algorithm": cc},
        "simulation": {"time_limit": f"{t_ms}ms"}, "outputs": {"link_sample_interval": "100us"}})


def _converged(tmp_path, cc):
    early, late = _fair(tmp_path, cc, 15), _fair(tmp_path, cc, 25)
    rates = (late.messages["delivered_bytes"].to_numpy() - early.messages["delivered_bytes"].to_numpy()) * 8 / 10e-3
    jain = rates.sum() ** 2 / (len(rates) * (rates ** 2).sum())
    L = late.links
    up = int(L[(L["src_name"] == "leaf0") & (L["dst_name"] == "spine0")]["link_id"].iloc[0])
    lt = late.link_timeseries
    window = lt[(lt["link_id"] == up) & (lt["bin_start_ps"] >= 15 * 10**9)]
    return jain, window, late


def test_dcqcn_converges_to_fair_shares_with_a_bounded_queue(tmp_path):
    jain, window, res = _converged(tmp_path, "dcqcn")
    assert jain >= 0.95
    assert window["utilisation"].mean() > 0.9
    # the queue stays around the ECN band (150 KB - 1500 KB), far below the 16 MiB buffer
    assert window["queue_bytes"].max() <= 1_500_000
    assert res.summary["transport"]["cnps"] > 0
    assert res.summary["drops"]["packets"] == 0


def test_telemetry_holds_utilisation_near_eta_with_a_standing_queue_of_a_few_packets(tmp_path):
    jain, window, res = _converged(tmp_path, "telemetry")
    assert window["utilisation"].mean() >= 0.9
    assert window["queue_bytes"].mean() <= 2 * 4178
    assert window["queue_bytes"].max() <= 5 * 4178
    assert jain >= 0.95
    assert res.summary["transport"]["cnps"] == 0


# ---------------------------------------------------------------------------------------------
# incast 32 -> 1 on a 48-host 400G leaf-spine (6 leaves x 8 hosts, 8 spines, 16 MiB per port;
# a full port drains in 335 us, so the retransmission timeout is 1 ms, see the warning test below):
# hosts 9-39 and 47 send 4 MiB each to host 0 (leaf 0). A victim, host 8 (leaf 1, next to 7
# incast senders) sends 1 MiB to host 44 (leaf 5) from 300 us: it shares leaf 1 and the spines
# with the incast but not its receiver, and on its own path nothing is congested.


def _incast(tmp_path, qps, **kw):
    rows = ["id,src,dst,size_bytes,start_ps,qps"]
    senders = list(range(9, 40)) + [47]
    rows += [f"{i},{h},0,4194304,0,{qps}" for i, h in enumerate(senders)]
    rows.append("100,8,44,1048576,300000000,1")
    (tmp_path / "incast.csv").write_text("\n".join(rows) + "\n")
    sc = {"name": "incast", "topology": {"hosts_per_leaf": 8, "leaves": 6, "spines": 8, "buffer": {"size": "16MiB"}},
          "traffic": {"pattern": "csv", "path": str(tmp_path / "incast.csv")}, "routing": {"policy": "ecmp"},
          "receiver": {"model": "ddp", "rto_low": "1ms", "rto_high": "1ms"}, "simulation": {"time_limit": "20ms"}}
    sc.update(kw)
    return fabricsim.run(sc)


def _victim_slowdown(res):
    m = res.messages.set_index("message_id").loc[100]
    return m["fct_ps"] / m["ideal_fct_ps"]


def test_incast_lossy_drops_pfc_pauses_spread_and_hit_a_victim(tmp_path):
    # 8 queue pairs per sender: the incast covers every spine, as a collective's many flows do
    lossy = _incast(tmp_path, 8)
    pfc = _incast(tmp_path, 8, switch={"pfc": {"enabled": True}})
    ls, ps = lossy.summary, pfc.summary
    assert ls["drops"]["packets"] > 1000
    m = lossy.messages
    # every loss is recovered: each message completes, each dropped byte was resent
    assert m["completed"].all()
    assert (m["retransmitted_bytes"] >= m["dropped_bytes"]).all()
    assert ls["transport"]["retransmitted_bytes_by_cause"]["sack"] > 0
    assert ls["warnings"] == []
    assert _victim_slowdown(lossy) < 1.2
    # lossless: no drops, pauses on every tier back to the senders' NICs
    assert ps["drops"]["packets"] == 0 and ps["drops"]["control_packets"] == 0
    L = pfc.links
    paused = L[L["pfc_pause_events"] > 0]
    tiers = set(zip(paused["src_name"].str.rstrip("0123456789"), paused["dst_name"].str.rstrip("0123456789")))
    assert {("spine", "leaf"), ("leaf", "spine"), ("h", "leaf")} <= tiers
    assert paused["pfc_paused_ps"].sum() > 0
    # head-of-line blocking: the victim waits behind paused incast traffic in leaf 1's uplinks
    assert _victim_slowdown(pfc) > 5
    assert pfc.messages["completed"].all()


def test_incast_telemetry_keeps_queues_and_tail_latency_down_without_drops(tmp_path):
    lossy = _incast(tmp_path, 1)
    pfc = _incast(tmp_path, 1, switch={"pfc": {"enabled": True}})
    tel = _incast(tmp_path, 1, congestion_control={"algorithm": "telemetry"})
    ts = tel.summary
    assert ts["drops"]["packets"] == 0 and ts["transport"]["retransmitted_bytes"] == 0
    assert ts["transport"]["pfc_pause_events"] == 0
    p99 = {k: r.summary["packet_latency"]["p99_ps"] for k, r in (("lossy", lossy), ("pfc", pfc), ("tel", tel))}
    assert p99["tel"] < 0.6 * p99["pfc"]
    assert p99["tel"] < 0.4 * p99["lossy"]
    # the peak queue is the first round trip's burst (32 senders x one BDP each), below the
    # lossy buffer-filling peak; PFC's per-hop thresholds cap its peak lower still (see docs)
    assert ts["links"]["max_peak_queue_bytes"] < 0.7 * lossy.summary["links"]["max_peak_queue_bytes"]
    assert ts["pattern"]["duration_ps"] < 1.05 * ts["pattern"]["ideal_duration_ps"]
    assert _victim_slowdown(tel) < 1.2


# ---------------------------------------------------------------------------------------------
# determinism and bad input


def test_same_seed_same_transport_results():
    a = fabricsim.run(_permutation("spray", "ddp", seed=3))
    b = fabricsim.run(_permutation("spray", "ddp", seed=3))
    assert a.messages.equals(b.messages) and a.nics.equals(b.nics) and a.links.equals(b.links)


@pytest.mark.parametrize("section,bad,field", [
    ("congestion_control", {"algorithm": "dcqcn", "g": 2}, "g"),
    ("congestion_control", {"algorithm": "telemetry", "eta": 1.5}, "eta"),
    ("congestion_control", {"algorithm": "hpcc"}, "algorithm"),
    ("receiver", {"model": "go_back_n", "ack_every": 0}, "ack_every"),
    ("receiver", {"model": "reorder_buffer", "buffer": "-4KiB"}, "buffer"),
    ("switch", {"ecn": {"kmin": "2MB", "kmax": "1MB"}}, "kmin"),
    ("switch", {"pfc": {"enabled": True, "xoff": "100KB", "xon": "200KB"}}, "xon"),
])
def test_bad_transport_parameters_are_rejected_with_the_field_named(section, bad, field):
    sc = _permutation("ecmp", "ddp")
    sc[section] = bad
    with pytest.raises(ConfigError) as e:
        fabricsim.run(sc)
    assert field in str(e.value) and section in str(e.value)


def test_a_timeout_shorter_than_a_full_queue_is_warned_about_and_causes_spurious_resends(tmp_path):
    # 16 MiB at 400 Gbps drains in 335 us; with the default 320 us timeout, packets still queued
    # time out and are resent although they were not lost (the duplicates arrive later)
    short = _incast(tmp_path, 1, receiver={"model": "ddp"})
    assert len(short.summary["warnings"]) == 1 and "rto_high" in short.summary["warnings"][0]
    assert short.summary["transport"]["duplicate_bytes"] > 0
    long = _incast(tmp_path, 1)
    assert long.summary["warnings"] == [] and long.summary["transport"]["duplicate_bytes"] == 0


# ----------------------------------------------------------------------------- NIC wake-ups
@pytest.mark.parametrize("routing,pfc", [("spray", False), ("adaptive", True), ("ecmp", False)])
def test_nic_transmit_attempts_send_and_share_the_wire_with_acks(routing, pfc):
    # every host sends 1 MiB across the spine and receives 1 MiB, so its NIC serialises the ACKs
    # of the flow it receives between its own data packets: each ACK used to push the wire's free
    # time past the pending attempt, which then ran once more for nothing (45 % of attempts)
    from fabricsim.analysis.recorder import Recorder
    from fabricsim.api import prepare
    from fabricsim.engine.interface import ENGINES
    from fabricsim.net.packet import DATA
    sc = {"name": "wake", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 2,
                                       "buffer": {"size": "unbounded"}},
          "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "1MiB"},
          "routing": {"policy": routing}, "switch": {"pfc": {"enabled": pfc}}, "simulation": {"seed": 2}}
    _loaded, sim = prepare(sc)
    eng = ENGINES.get("packet")(sim, Recorder())
    seen = []
    for ns in eng.nics.values():                 # what leaves each host port, in wire order
        for nic in ns:
            port = nic.port
            inner = port.deliver
            port.deliver = (lambda t, pkt, inner=inner, seen=seen, port=port:
                            (seen.append((port, t, pkt.kind, pkt.wire)), inner(t, pkt))[1])
    out = eng.run()
    assert out.status == "complete"
    calls = sum(n.tx_calls for ns in eng.nics.values() for n in ns)
    sent = sum(n.tx_sent for ns in eng.nics.values() for n in ns)
    # 256 MTU units per host, nothing lost (adaptive routing reorders: a few spurious resends)
    assert sent == 8 * 256 + out.counters["retransmitted_payload_bytes"] // 4096
    # an attempt pending when a PFC pause arrives finds the port paused: at most one per pause
    assert calls - sent <= out.counters["pfc_pause_events"] + 0.01 * sent
    # control packets share the wire with data: on each host port a packet arrives at the leaf
    # no sooner than its own serialisation after the one before it
    assert any(k != DATA for _, _, k, _ in seen)
    by_port = {}
    for port, t, _k, wire in seen:
        by_port.setdefault(port, []).append((t, wire))
    for port, ts in by_port.items():
        assert all(b - a >= port.ser_ps(w) for (a, _), (b, w) in zip(ts, ts[1:]))
