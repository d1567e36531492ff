"""Both engines against theory: exact latencies, line rate, bottleneck sharing, ECMP
balls-into-bins, adaptive and spray near ideal, conservation and determinism.

Tests whose statement is engine-neutral run on the packet and on the flow engine
(``simulation.engine``); packet-only statements (ACK overload, kernels, cells, flowlet
stickiness, finite buffers) run on the packet engine alone."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import fabricsim
from fabricsim.units import serialisation_ps

G = 10**9


def leaf_spine(n_per_leaf=4, leaves=2, spines=2, host_rate="400Gbps", fabric_rate="400Gbps",
               host_delay="500ns", fabric_delay="700ns", latency="600ns", **extra):
    return {"kind": "leaf_spine", "hosts_per_leaf": n_per_leaf, "leaves": leaves, "spines": spines,
            "host_link": {"rate": host_rate, "delay": host_delay},
            "fabric_link": {"rate": fabric_rate, "delay": fabric_delay}, "switch_latency": latency,
            "buffer": {"size": "unbounded"}, **extra}


def csv_traffic(tmp_path, rows, name="m.csv"):
    p = tmp_path / name
    lines = ["id,src,dst,size_bytes,start_ps,deps,gap_ps"]
    for r in rows:
        r = {"start_ps": 0, "deps": "", "gap_ps": 0, **r}
        lines.append(f"{r['id']},{r['src']},{r['dst']},{r['size_bytes']},{r['start_ps']},{r['deps']},{r['gap_ps']}")
    p.write_text("\n".join(lines) + "\n")
    return {"pattern": "csv", "path": str(p)}


def scenario(topology, traffic, routing="ecmp", seed=1, engine="packet", **sim):
    return {"name": "t", "topology": topology, "traffic": traffic, "routing": {"policy": routing},
            "simulation": {"seed": seed, "engine": engine, **sim}}


ENGINES = pytest.mark.parametrize("engine", ["packet", "flow"])


# ---------------------------------------------------------------------------------------------
# one packet, one flow, one bottleneck


@ENGINES
@pytest.mark.parametrize("host_rate,fabric_rate", [("400Gbps", "400Gbps"), ("200Gbps", "800Gbps")])
def test_one_packet_latency_is_sum_of_serialisation_propagation_and_switch_delays(tmp_path, host_rate,
                                                                                  fabric_rate, engine):
    payload = 1000
    res = fabricsim.run(scenario(leaf_spine(host_rate=host_rate, fabric_rate=fabric_rate),
                                 csv_traffic(tmp_path, [{"id": 0, "src": 0, "dst": 5, "size_bytes": payload}]),
                                 engine=engine))
    wire = payload + 82
    hr, fr = fabricsim.units.parse_rate(host_rate), fabricsim.units.parse_rate(fabric_rate)
    # host -> leaf -> spine -> leaf -> host: 4 serialisations, 4 propagations, 3 switches
    expected = (2 * serialisation_ps(wire, hr) + 2 * serialisation_ps(wire, fr)
                + 2 * 500_000 + 2 * 700_000 + 3 * 600_000)
    row = res.messages.iloc[0]
    assert row["fct_ps"] == expected
    assert row["ideal_fct_ps"] == expected
    assert row["slowdown"] == 1.0
    if engine == "flow":
        # no packets: the latency histogram is not produced, and says why
        assert "packet_latency" in res.summary["not_modelled"]
        return
    # the latency histogram holds that one packet within its documented relative error
    lat = res.summary["packet_latency"]
    assert lat["count"] == 1
    assert abs(lat["p50_ps"] - expected) / expected <= lat["relative_error"]


@ENGINES
def test_one_long_flow_reaches_line_rate_times_payload_efficiency(tmp_path, engine):
    size = 32 * 2**20
    res = fabricsim.run(scenario(leaf_spine(), csv_traffic(tmp_path, [{"id": 0, "src": 0, "dst": 6,
                                                                       "size_bytes": size}]), engine=engine))
    row = res.messages.iloc[0]
    goodput = size * 8 / (row["fct_ps"] / 1e12)
    expected = 400 * G * 4096 / (4096 + 82)
    assert abs(goodput - expected) / expected < 0.01
    # and the idle-fabric reference agrees with the simulation exactly
    assert row["fct_ps"] == row["ideal_fct_ps"]


@ENGINES
def test_two_flows_share_one_bottleneck_at_its_rate(tmp_path, engine):
    size = 8 * 2**20
    # hosts 0 and 1 (leaf 0) both send to host 4 (leaf 1): its downlink is the bottleneck
    res = fabricsim.run(scenario(leaf_spine(), csv_traffic(tmp_path, [
        {"id": 0, "src": 0, "dst": 4, "size_bytes": size}, {"id": 1, "src": 1, "dst": 4, "size_bytes": size}]),
        routing="adaptive", engine=engine))
    m = res.messages
    assert m["completed"].all()
    # steady state: goodput in the 10us bins strictly inside the transfer (first and last are partial)
    series = res.goodput["goodput_bps"].to_numpy()[1:-1]
    throughput = series.mean()
    bottleneck = 400 * G * 4096 / (4096 + 82)
    assert abs(throughput - bottleneck) / bottleneck < 0.01
    assert series.min() > 0.98 * bottleneck
    assert res.goodput["delivered_bytes"].sum() == 2 * size
    # FIFO without congestion control: both flows get about half while both run
    assert abs(int(m["end_ps"].iloc[0]) - int(m["end_ps"].iloc[1])) / int(m["end_ps"].max()) < 0.05
    down = res.links[(res.links["dst"] == 4)]
    assert 0.98 < down["utilisation"].iloc[0] <= 1.0  # busy for (almost) the whole run


# ---------------------------------------------------------------------------------------------
# ECMP and balls into bins


def _uplink_fraction(res):
    L = res.links
    up = L[(L["kind"] == "leaf-spine") & L["src_name"].str.startswith("leaf")]
    return float((up["tx_data_bytes"] > 0).mean()), up


@ENGINES
def test_ecmp_uplink_usage_matches_balls_into_bins_and_sets_throughput(engine):
    """n flows hashed onto n uplinks: E[used fraction] = 1 - (1 - 1/n)^n. With two leaves the
    spine downlinks carry exactly the uplinks' flows, so the aggregate goodput while all flows
    run is that fraction of capacity (times payload efficiency)."""
    n = 8
    expected = 1 - (1 - 1 / n) ** n
    fractions, all_active = [], []
    for seed in range(1, 21):
        res = fabricsim.run(scenario(leaf_spine(n_per_leaf=n, leaves=2, spines=n),
                                     {"pattern": "permutation", "locality": "cross_leaf",
                                      "message_size": "1MiB"}, routing="ecmp", seed=seed,
                                     engine=engine))
        f, _ = _uplink_fraction(res)
        fractions.append(f)
        all_active.append(res.summary["effective_bandwidth"]["goodput_while_all_active_fraction"])
    assert abs(np.mean(fractions) - expected) < 0.03
    all_active = [x / (4096 / 4178) for x in all_active]
    assert abs(np.mean(all_active) - expected) < 0.05


@ENGINES
def test_ecmp_completion_is_set_by_the_most_collided_link(engine):
    for seed in (1, 2, 3):
        res = fabricsim.run(scenario(leaf_spine(n_per_leaf=8, leaves=2, spines=8),
                                     {"pattern": "permutation", "locality": "cross_leaf",
                                      "message_size": "2MiB"}, routing="ecmp", seed=seed,
                                     engine=engine))
        _, up = _uplink_fraction(res)
        wire_per_msg = 512 * 4178
        k_max = int(round(up["tx_data_bytes"].max() / wire_per_msg))
        ratio = res.summary["effective_bandwidth"]["completion_time_ratio"]
        all_active = res.summary["effective_bandwidth"]["goodput_while_all_active_fraction"]
        assert ratio < all_active
        assert abs(ratio - 1 / k_max) < 0.1 / k_max


# 9 spines for 8 hosts per leaf: the data alone would fill 8, and the ACKs coming back (86 B per
# 4178 B packet, 2 %) need the slack. On exactly 8 spines the spine->leaf downlinks run at 102 %
# and adaptive falls from ~0.96 to 0.92-0.94 (a real effect, covered by the next test).
FABRIC = leaf_spine(n_per_leaf=8, leaves=4, spines=9)


def test_acks_overload_a_fabric_sized_for_data_alone():
    # compared on the mean of three seeds: one seed's ratio moves by about 0.01 with the
    # placement (seeds 1-4: 0.935-0.941 on 8 spines, 0.955-0.967 on 9)
    def ratio(spines):
        topo = leaf_spine(n_per_leaf=8, leaves=4, spines=spines)
        return np.mean([fabricsim.run(scenario(topo, {"pattern": "permutation", "locality": "cross_leaf",
                                                      "message_size": "4MiB"}, routing="adaptive", seed=seed)
                                      ).summary["effective_bandwidth"]["completion_time_ratio"]
                        for seed in (1, 2, 3)])
    assert ratio(8) < ratio(9) - 0.02


@ENGINES
@pytest.mark.parametrize("policy,floor", [("adaptive", 0.93), ("spray", 0.85)])
def test_adaptive_and_spray_approach_ideal_completion(policy, floor, engine):
    for seed in (1, 2, 3):
        res = fabricsim.run(scenario(FABRIC, {"pattern": "permutation", "locality": "cross_leaf",
                                              "message_size": "4MiB"}, routing=policy, seed=seed,
                                      engine=engine))
        assert res.summary["messages"]["completed"] == 32
        assert res.summary["effective_bandwidth"]["completion_time_ratio"] >= floor
        ecmp = fabricsim.run(scenario(FABRIC, {"pattern": "permutation", "locality": "cross_leaf",
                                               "message_size": "4MiB"}, routing="ecmp", seed=seed,
                                       engine=engine))
        assert ecmp.summary["effective_bandwidth"]["completion_time_ratio"] < 0.6


@ENGINES
def test_more_queue_pairs_help_ecmp(engine):
    ratios = {}
    for qps in (1, 16):
        r = []
        for seed in range(1, 6):
            res = fabricsim.run(scenario(leaf_spine(n_per_leaf=8, leaves=2, spines=8),
                                         {"pattern": "permutation", "locality": "cross_leaf",
                                          "message_size": "2MiB", "qps_per_message": qps},
                                         routing="ecmp", seed=seed, engine=engine))
            r.append(res.summary["effective_bandwidth"]["completion_time_ratio"])
        ratios[qps] = np.mean(r)
    assert ratios[16] > ratios[1] + 0.15


def test_flowlet_keeps_a_line_rate_flow_on_one_path():
    # a back-to-back flow never pauses longer than the gap, so it is never re-pathed
    res = fabricsim.run(scenario(leaf_spine(n_per_leaf=4, leaves=2, spines=4),
                                 {"pattern": "permutation", "locality": "cross_leaf", "message_size": "1MiB"},
                                 routing="flowlet"))
    _, up = _uplink_fraction(res)
    per_msg = 256 * 4178
    assert set((up["tx_data_bytes"] % per_msg).tolist()) == {0}
    # one flowlet per flow and direction: only the source leaf has a choice of port for the data
    # (spines have one way down), only the destination leaf for its ACKs
    assert res.summary["run"]["new_flowlets"] == 8 + 8


# ---------------------------------------------------------------------------------------------
# conservation, determinism, cells, dependencies


def test_finite_buffers_drop_and_the_transport_recovers_every_byte():
    topo = leaf_spine(n_per_leaf=8, leaves=2, spines=2, buffer={"mode": "per_port", "size": "64KiB"})
    res = fabricsim.run(scenario(topo, {"pattern": "incast", "senders": 8, "receiver": 0,
                                        "message_size": "256KiB"}))
    b = res.summary["bytes"]
    tr = res.summary["transport"]
    assert res.summary["drops"]["packets"] > 0
    # every message completes: what was dropped was detected and resent
    assert res.messages["completed"].all()
    assert b["delivered_payload_bytes"] == b["offered_payload_bytes"] == b["injected_payload_bytes"]
    assert b["in_flight_payload_bytes"] == 0
    # each dropped byte was resent at least once; resent bytes either arrived or were dropped again
    assert tr["retransmitted_bytes"] >= b["dropped_payload_bytes"]
    m = res.messages
    assert (m["retransmitted_bytes"] == m["rtx_sack_bytes"] + m["rtx_timeout_bytes"] + m["rtx_nak_bytes"]).all()
    assert (m["retransmitted_bytes"] >= m["dropped_bytes"]).all()
    assert int(m["retransmitted_bytes"].sum()) - int(m["duplicate_bytes"].sum()) <= b["dropped_payload_bytes"]
    # drops are counted where they happened: on the receiver's downlink (and congested uplinks)
    dropped_links = res.links[res.links["drops_buffer_full"] > 0]
    assert 0 in set(dropped_links["dst"])
    drops = res.summary["drops"]
    assert dropped_links["drops_buffer_full"].sum() == drops["packets"] + drops["control_packets"]
    assert (res.links["peak_queue_bytes"] <= 64 * 1024).all()


@ENGINES
def test_time_limit_reports_in_flight_and_unfinished_messages(engine):
    res = fabricsim.run(scenario(leaf_spine(), {"pattern": "permutation", "message_size": "4MiB"},
                                 time_limit="20us", engine=engine))
    assert res.summary["run"]["status"] == "time_limit"
    assert set(res.messages["incomplete_reason"]) == {"time_limit"}
    b = res.summary["bytes"]
    assert b["injected_payload_bytes"] == (b["delivered_payload_bytes"] + b["dropped_payload_bytes"]
                                           + b["in_flight_payload_bytes"])
    assert 0 < b["delivered_payload_bytes"] < b["offered_payload_bytes"]
    if engine == "packet":
        # packets queued, being serialised or propagating when the run stopped
        assert b["in_flight_payload_bytes"] > 0
    else:
        # the fluid has no pipeline: what left a sender has arrived, so 'in flight' (sent, not
        # delivered) is only the truncation of fractional fluid bytes per message (< 1 B each)
        assert 0 <= b["in_flight_payload_bytes"] < len(res.messages)
        assert b["dropped_payload_bytes"] == 0


@ENGINES
def test_same_seed_same_results_other_seed_other_collisions(engine):
    sc = scenario(FABRIC, {"pattern": "permutation", "locality": "cross_leaf", "message_size": "512KiB"},
                  engine=engine)
    a, b = fabricsim.run(sc), fabricsim.run(sc)
    pd.testing.assert_frame_equal(a.messages, b.messages)
    pd.testing.assert_frame_equal(a.links, b.links)
    c = fabricsim.run({**sc, "simulation": {"seed": 2, "engine": engine}})
    _, ua = _uplink_fraction(a)
    _, uc = _uplink_fraction(c)
    assert not np.array_equal(ua["tx_data_bytes"].to_numpy(), uc["tx_data_bytes"].to_numpy())
    assert a.summary["seed"] == 1 and c.summary["seed"] == 2


def test_heap_and_simpy_kernels_agree():
    sc = scenario(leaf_spine(n_per_leaf=4, leaves=2, spines=2),
                  {"pattern": "permutation", "message_size": "256KiB"}, routing="spray")
    a = fabricsim.run(sc)
    b = fabricsim.run({**sc, "simulation": {"seed": 1, "kernel": "simpy"}})
    pd.testing.assert_frame_equal(a.messages, b.messages)
    pd.testing.assert_frame_equal(a.links, b.links)


def test_cells_converge_to_packet_results_as_they_shrink():
    errors = []
    base = None
    for cell in (1, 2, 4, 16):
        # routing held at the exact least-backlog policy: its equalised queues keep 16-packet
        # (64 KiB) cells in order, while graded AR lets queues differ by up to a grade (105 KB),
        # enough to reorder such cells beyond RACK's 5 us window (spurious retransmissions)
        sc = scenario(FABRIC, {"pattern": "permutation", "locality": "cross_leaf", "message_size": "1MiB"},
                      routing="adaptive", cell_packets=cell)
        sc["routing"]["exact"] = True
        res = fabricsim.run(sc)
        fct = res.messages["fct_ps"].astype("int64").to_numpy()
        if base is None:
            base = fct
            continue
        errors.append(float(np.mean(np.abs(fct - base) / base)))
        assert res.summary["packet_latency"]["count"] == 32 * 256   # counted in MTU packets
    assert errors[0] < errors[-1]
    assert errors[0] < 0.05


@ENGINES
def test_dependencies_release_after_the_gap(tmp_path, engine):
    tr = csv_traffic(tmp_path, [{"id": 0, "src": 0, "dst": 5, "size_bytes": 65536},
                                {"id": 1, "src": 5, "dst": 1, "size_bytes": 65536, "deps": "0",
                                 "gap_ps": 3_000_000},
                                {"id": 2, "src": 2, "dst": 6, "size_bytes": 1000, "start_ps": 100}])
    res = fabricsim.run(scenario(leaf_spine(), tr, engine=engine))
    m = res.messages.set_index("message_id")
    assert m.loc[1, "release_ps"] == m.loc[0, "end_ps"] + 3_000_000
    assert m.loc[2, "release_ps"] == 100
    assert m["completed"].all()


@ENGINES
def test_effective_bandwidth_of_a_lone_message_is_ideal(tmp_path, engine):
    res = fabricsim.run(scenario(leaf_spine(), csv_traffic(tmp_path, [{"id": 0, "src": 0, "dst": 6,
                                                                       "size_bytes": 4 * 2**20}]),
                                 engine=engine))
    eb = res.summary["effective_bandwidth"]
    assert eb["completion_time_ratio"] == pytest.approx(1.0)
    assert eb["goodput_fraction"] == pytest.approx(
        4 * 2**20 * 8 / (res.messages["fct_ps"].iloc[0] / 1e12) / (400 * G))
