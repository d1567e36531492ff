"""Routing-policy and buffer behaviour on small fabrics."""
from __future__ import annotations

import numpy as np

import fabricsim
from fabricsim.routing import ROUTING


def _sc(routing, buffer=None, pattern=None, seed=1):
    topo = {"hosts_per_leaf": 8, "leaves": 2, "spines": 8}
    # unbounded buffers unless a test is about them: these tests are about where packets go
    topo["buffer"] = buffer or {"size": "unbounded"}
    return {"name": "p", "topology": topo,
            "traffic": pattern or {"pattern": "permutation", "locality": "cross_leaf", "message_size": "512KiB"},
            "routing": routing, "simulation": {"seed": seed}}


def test_registry_lists_every_builtin_policy():
    # a superset check: a newly registered (or plug-in) policy must not break this test
    assert {"adaptive", "ecmp", "flowlet", "pinned", "spray"} <= set(ROUTING.names())
    assert ROUTING.names() == sorted(ROUTING.names())


def test_exact_adaptive_spreads_each_flow_over_all_uplinks_evenly():
    res = fabricsim.run(_sc({"policy": "adaptive", "exact": True}))
    L = res.links
    up = L[(L["kind"] == "leaf-spine") & L["src_name"].str.startswith("leaf")]
    per_leaf = 8 * 128 * 4178          # 8 flows of 128 packets leave each leaf
    assert up["tx_data_bytes"].sum() == 2 * per_leaf
    # the exact least-queued choice keeps the uplinks within a few packets of each other
    assert up["tx_data_bytes"].max() - up["tx_data_bytes"].min() <= 8 * 4178


def test_graded_adaptive_spreads_packets_like_a_uniform_draw():
    # backlogs stay below the first grade boundary (5 % of 2 MiB) here, so every uplink has the
    # best grade and each packet is a uniform draw: the spread is a multinomial one (as spray)
    res = fabricsim.run(_sc({"policy": "adaptive"}, pattern={"pattern": "permutation", "locality": "cross_leaf",
                                                             "message_size": "2MiB"}))
    L = res.links
    up = L[(L["kind"] == "leaf-spine") & L["src_name"].str.startswith("leaf")]
    pk = up["tx_packets"].to_numpy()
    expected = pk.sum() / len(pk)
    chi2 = float(((pk - expected) ** 2 / expected).sum())
    assert chi2 < 40   # 15 degrees of freedom: p ~ 0.0005 if uniform


def test_adaptive_utilisation_metric_also_balances():
    res = fabricsim.run(_sc({"policy": "adaptive", "metric": "queue_util", "util_window": "2us"}))
    assert res.summary["effective_bandwidth"]["completion_time_ratio"] > 0.85
    ecmp = fabricsim.run(_sc({"policy": "ecmp"}))
    assert res.summary["effective_bandwidth"]["completion_time_ratio"] > \
        ecmp.summary["effective_bandwidth"]["completion_time_ratio"]


def test_spray_is_uniform_over_ports():
    res = fabricsim.run(_sc({"policy": "spray"}, pattern={"pattern": "permutation", "locality": "cross_leaf",
                                                          "message_size": "2MiB"}))
    L = res.links
    up = L[(L["kind"] == "leaf-spine") & L["src_name"].str.startswith("leaf")]
    pk = up["tx_packets"].to_numpy()
    expected = pk.sum() / len(pk)
    chi2 = float(((pk - expected) ** 2 / expected).sum())
    assert chi2 < 40   # 15 degrees of freedom: p ~ 0.0005 if uniform


def test_shared_buffer_drops_when_the_switch_pool_is_full():
    incast = {"pattern": "incast", "senders": 8, "receiver": 0, "message_size": "256KiB"}
    shared = fabricsim.run(_sc({"policy": "ecmp"}, buffer={"mode": "shared", "size": "256KiB"}, pattern=incast))
    big = fabricsim.run(_sc({"policy": "ecmp"}, buffer={"mode": "shared", "size": "64MiB"}, pattern=incast))
    assert shared.summary["drops"]["packets"] > 0
    assert big.summary["drops"]["packets"] == 0
    assert big.summary["messages"]["completed"] == 8
    # a switch never holds more than its pool: the peak of any one port is below it too
    assert shared.links["peak_queue_bytes"].max() <= 256 * 1024


def test_ecmp_is_per_flow_so_each_message_stays_on_one_path():
    res = fabricsim.run(_sc({"policy": "ecmp"}))
    L = res.links
    up = L[(L["kind"] == "leaf-spine") & L["src_name"].str.startswith("leaf")]
    per_msg = 128 * 4178
    assert (up["tx_data_bytes"] % per_msg == 0).all()
    counts = np.bincount((up["tx_data_bytes"] // per_msg).to_numpy())
    assert counts.sum() == 16


def test_flowlet_repaths_after_gaps_longer_than_its_threshold():
    # consecutive packets of a queue pair are at least one packet time (84 ns at 400G) apart, so a
    # 1 ns threshold makes every packet a new flowlet (least loaded per packet), while 10 us keeps
    # one flowlet per queue pair at the source leaf (the only switch with a choice).
    pattern = {"pattern": "all_to_all", "message_size": "64KiB"}
    topo = {"hosts_per_leaf": 2, "leaves": 2, "spines": 4}
    runs = {}
    for gap in ("1ns", "10us"):
        runs[gap] = fabricsim.run({"name": "fl", "topology": topo, "traffic": pattern,
                                   "routing": {"policy": "flowlet", "gap": gap}})
    cross_leaf_packets = 8 * 16          # 8 of the 12 messages cross the spines, 16 packets each
    # ... and each data packet's ACK crosses back (the destination leaf has the choice): with 1 ns
    # every packet a leaf sends up to a spine was a routing choice, hence a new flowlet. The run
    # stops at the last completion, so the last ACKs still in flight then are not routed.
    links = runs["1ns"].links
    up = links[(links["kind"] == "leaf-spine") & links["src_name"].str.startswith("leaf")]
    assert up["tx_packets"].sum() > cross_leaf_packets
    assert runs["1ns"].summary["run"]["new_flowlets"] == up["tx_packets"].sum()
    assert runs["10us"].summary["run"]["new_flowlets"] == 2 * 8
