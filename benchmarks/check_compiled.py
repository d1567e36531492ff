#!/usr/bin/env python3
"""Randomised equivalence check of ``simulation.kernel: compiled`` against ``heap``.

Draws small scenarios inside the compiled slice (docs/compiled-core.md, "Status") from a seeded
generator: leaf-spine fabrics of 2-4 leaves, 2-5 hosts per leaf, 1-3 spines and 1-2 links per
spine, 100/200/300/333/400G links (300 and 333 do not divide 8e12 bit-ps per byte), per-port buffers from 16 KiB to unbounded, ECN on or off and sampled at
enqueue or dequeue, ECMP / spraying / adaptive routing (remote grades on or off, refresh and report
periods), permutation / all-to-all / incast traffic of 4-256 KiB with 1-3 queue pairs, short and
long timeouts and retry limits, fixed or adaptive timeouts (``rto_mode: adaptive`` in half the cases:
``rto_min`` 1-20 us, ``rto_max`` 50 us or 1 ms, jitter 0-4, ``rto_rttvar_mult`` default / 0 / 4, retry
limits 2-50; the
adaptive draws come after every other, so a seed's fabric, traffic and routing are those it drew
before adaptive timeouts joined), the ``go_back_n`` receiver in 40% of the cases (drawn after
those, so a seed's other draws are those it drew before go-back-N joined), and PFC in 40% (drawn
last of all: ``xoff`` 9, 20, 40 or 135 KB, ``xon`` half of it or 4 KB below, the response IEEE's
bound, 200 ns or 1 us; lossless switches then enforce no buffer), and ACK coalescing in 40% (drawn after
PFC: ``ack_every`` 2, 4, 8 or 64, ``sack_bitmap`` 8, 16 or 256, ``ack_delay`` 500 ns or 2 us, and in
half of them a 200 ns ``reorder_window``, under which late units are acknowledged by name). The
``telemetry`` congestion control is drawn in 40% of the cases, after coalescing (its defaults or,
in half of them, the estimator, spans, window scaling, ``max_stage`` and ``global_base_rtt``
drawn), and INT without a controller (``switch.telemetry: on``) in 10%; the two draws are
independent, so about 16% of the cases run telemetry with coalesced ACKs and 4% INT alone with
them. After those, in 35% of the cases the fabric becomes a multi-plane cluster of 24 GPUs (3
nodes of 8, 2 or 4 NIC ports of 200 or 400G, per packet or per flow, a failed plane in a quarter,
HGX nodes whose NVLink chips run as RoCE switches in a third), 60% of whose HGX clusters then get
NVLink with credit flow control (striped or adaptive, 600 B to 64 KiB of credit, 1 or 4 KiB units),
half of those with PXN (pieces of 4, 20 or 64 KiB); the coalescing and telemetry draws apply to
them as to the leaf-spine cases. DCQCN is drawn after those (the cluster draws keep the seeds
they had before it joined), exclusive of telemetry: in 60% of the cases without the telemetry
controller (36% of all), ``dcqcn`` or ``dcqcn_cx`` alike, each with its defaults or, in half of
them, short timers and drawn parameters (CNP spacing, periods, byte counter, steps, clamps, a rate
at the first CNP), and in 70% of them ECN marking from 2-4 KB queued, so that these small runs send
CNPs; and last of all ``switch.strict_priority``: ``control`` (ACK and NAK in the strict-priority
class too) in 20% of all cases, ``none`` in 10%; and after that slice 2's routing policies replace the
drawn one in 45% of the cases: ``flowlet`` in 25% (a gap of 300 ns to 10 us, metric ``queue``,
``util`` or ``queue_util``, the port-quality keys drawn as for adaptive plus a utilisation window and
thresholds), ``adaptive`` with ``metric: util`` or ``queue_util`` in 10%, ``adaptive`` with ``exact:
true`` in 5% and ``pinned`` in 5%. After that, the ``reorder_buffer`` receiver in 30%
of the cases (in place of the receiver drawn before; a buffer per host of 1, 2, 4, 12 or 64 KiB, so that
in about two fifths of them no unit beyond a gap fits), and last of all cells in 30%
(``simulation.cell_packets`` 2, 3 or 4; at most 3 with 16 KiB switch buffers). After all of those (slice 4): persistent connections
in 40% of the cases (the traffic becomes a message list of 2-6 pairs of hosts with 2-6 messages each,
mostly on connections 0 and 1, some after the source's previous message, written to a temporary file
named by the seed) and a shared switch buffer in 40% (a plain pool, or the dynamic threshold with
``alpha`` 0.25-4, a ``reserve`` and in half of them a pool size of its own). The last lines count
the cases with each feature and with each pair of them, the DCQCN cases by what they ran with, the
reorder-buffer cases that overflowed, with each other feature, and how often the connections'
lifecycle and the pools' refusals fired. Each runs on both kernels;
every table, the summary and the event count must be identical, and the compiled run must really be
compiled.

    python3 benchmarks/check_compiled.py --cases 200         # prints one line per case
    python3 benchmarks/check_compiled.py --cases 50 --seed 7

tests/test_compiled_core.py runs a few of these cases in CI (:func:`scenario`, :func:`compare`).
"""
from __future__ import annotations

import argparse
import random
import sys
import time

#: 300 and 333 Gbit/s do not divide 8e12 bit-ps per byte (the compiled core's reduced-fraction arithmetic)
RATES = ["100Gbps", "200Gbps", "300Gbps", "333Gbps", "400Gbps"]


def scenario(seed: int) -> dict:
    """One random scenario inside the compiled slice, a function of ``seed`` only."""
    r = random.Random(seed)
    leaves, per_leaf = r.randint(2, 4), r.randint(2, 5)
    topo = {"kind": "leaf_spine", "hosts_per_leaf": per_leaf, "leaves": leaves, "spines": r.randint(1, 3),
            "links_per_spine": r.choice([1, 1, 2]),
            "host_link": {"rate": r.choice(RATES), "delay": r.choice(["200ns", "500ns", "1us"])},
            "fabric_link": {"rate": r.choice(RATES), "delay": r.choice(["200ns", "500ns", "1us"])},
            "switch_latency": r.choice(["300ns", "600ns"]),
            "buffer": {"size": r.choice(["16KiB", "64KiB", "256KiB", "2MiB", "unbounded"])}}
    hosts = leaves * per_leaf
    size = r.choice(["4KiB", "17KiB", "64KiB", "256KiB"])
    qps = r.randint(1, 3)
    kind = r.choice(["permutation", "all_to_all", "incast"])
    if kind == "permutation":
        traffic = {"pattern": "permutation", "message_size": size, "qps_per_message": qps}
    elif kind == "all_to_all":
        traffic = {"pattern": "all_to_all", "message_size": r.choice(["4KiB", "17KiB", "32KiB"]), "qps_per_message": qps}
    else:
        traffic = {"pattern": "incast", "senders": r.randint(2, hosts - 1), "receiver": r.randrange(hosts),
                   "message_size": size, "qps_per_message": qps}
    policy = r.choice(["ecmp", "spray", "adaptive"])
    routing = {"policy": policy}
    if policy == "adaptive":
        routing.update(remote=r.random() < 0.7, refresh=r.choice(["100ns", "1us"]),
                       remote_period=r.choice(["500ns", "1us"]), remote_delay=r.choice(["500ns", "1us", "3us"]),
                       queue_ref=r.choice(["64KiB", "2MiB"]), remote_ref=r.choice(["128KiB", "4MiB"]))
    ecn = {"enabled": r.random() < 0.8, "sample": r.choice(["enqueue", "dequeue"]),
           "kmin": r.choice(["4KB", "20KB", "150KB"])}
    ecn["kmax"] = {"4KB": "16KB", "20KB": "100KB", "150KB": "1500KB"}[ecn["kmin"]]
    short = r.random() < 0.4
    receiver = {"model": "ddp", "rto_low": "6us" if short else "100us", "rto_high": "10us" if short else "320us",
                "retry_limit": r.choice([0, 2, 7]), "reorder_window": r.choice(["2us", "5us"])}
    sc = {"name": f"check_compiled_{seed}", "topology": topo, "traffic": traffic, "routing": routing,
          "receiver": receiver, "switch": {"ecn": ecn},
          "simulation": {"seed": r.randint(1, 1000), "time_limit": r.choice(["30us", "5ms"])},
          "outputs": {"link_sample_interval": r.choice(["off", "2us", "10us"])}}
    if r.random() < 0.5:
        # (a retry limit of 0 would fail a queue pair at its first timeout, before any probe)
        receiver.update(rto_mode="adaptive", rto_min=r.choice(["1us", "4us", "20us"]),
                        rto_max=r.choice(["50us", "1ms"]), rto_jitter=r.choice([0, 0.5, 4]),
                        retry_limit=r.choice([2, 7, 50]))
        k = r.choice([None, 0, 4])
        if k is not None:
            receiver["rto_rttvar_mult"] = k
    if r.random() < 0.4:
        # (drawn last: a seed's other draws are those it drew before go-back-N joined)
        receiver["model"] = "go_back_n"
    if r.random() < 0.4:
        # PFC (drawn after everything else, for the same reason): thresholds from two packets to the
        # 135 KB default, xon below them, and the pause response IEEE's bound or a fixed time; the
        # low ones pause NIC and switch ports in most cases with contention
        xoff = r.choice([9, 20, 40, 135])
        sc["switch"]["pfc"] = {"enabled": True, "xoff": f"{xoff}KB", "xon": f"{r.choice([xoff // 2, xoff - 4])}KB",
                               "response": r.choice(["auto", "200ns", "1us"])}
    if r.random() < 0.4:
        # ACK coalescing (drawn after everything else, for the same reason): AckReq spacing, a SACK bitmap
        # shorter than the window or not, the delayed-ACK timer; a tight reorder window acknowledges late
        # units by name
        receiver.update(ack_every=r.choice([2, 4, 8, 64]), sack_bitmap=r.choice([8, 16, 256]),
                        ack_delay=r.choice(["500ns", "2us"]))
        if r.random() < 0.5:
            receiver["reorder_window"] = "200ns"
    u = r.random()
    if u < 0.4:
        # the telemetry controller with INT (drawn last, for the same reason): the defaults or HPCC's
        # rules, each multipath deviation on or off, one T for every flow or each flow's own
        cc = {"algorithm": "telemetry"}
        if r.random() < 0.5:
            cc.update(estimator=r.choice(["per_hop", "hpcc"]), rate_interval_rtts=r.choice([0, 1, 2]),
                      qlen_window_rtts=r.choice([0, 2]), window_rtt_max=r.choice([1.0, 1.25, 2.0]),
                      max_stage=r.choice([0, 5]), global_base_rtt=r.random() < 0.3)
        sc["congestion_control"] = cc
    elif u < 0.5:
        sc["switch"]["telemetry"] = "on"           # INT stamped, no controller reading it
    if r.random() < 0.35:
        # hosts with several NIC ports (drawn after everything else, for the same reason): the
        # fabric becomes a multi-plane cluster of 24 GPUs (3 nodes of 8; the traffic drawn above
        # names at most 20 hosts) whose NICs have 2 or 4 ports, one per plane, split per packet or
        # per flow; sometimes a plane has failed (hosts keep fewer ports) or the nodes' NVLink chips
        # run as RoCE switches (transport roce: NVLink and NIC ports on every GPU)
        topo = sc["topology"]
        sc["topology"] = {"kind": "cluster", "domain": r.choice(["none", "none", "hgx8"]), "nodes": 3,
                          "nic": {"ports": r.choice([2, 4]), "rate": r.choice(["200Gbps", "400Gbps"])},
                          "switch": {"latency": topo["switch_latency"], "buffer": topo["buffer"]},
                          "delays": {"host_leaf": topo["host_link"]["delay"], "leaf_spine": topo["fabric_link"]["delay"]}}
        if sc["topology"]["domain"] == "hgx8":
            sc["topology"]["nvlink"] = {"transport": "roce", "buffer": topo["buffer"]}
        if r.random() < 0.25:
            sc["topology"]["failed"] = {"planes": [1]}
        sc["nic"] = {"plane_split": r.choice(["per_packet", "per_flow"])}
        if sc["topology"]["domain"] == "hgx8" and r.random() < 0.6:
            # NVLink with credit flow control inside each node (drawn last of all): striped or adaptive
            # over the 2 chips, a credit buffer from about one unit per NVLink to the default, 1 or 4 KiB
            # units; the GPUs' NIC ports carry the traffic between nodes
            sc["topology"]["nvlink"] = {"transport": "credit", "spread": r.choice(["stripe", "adaptive"]),
                                        "credit_buffer": r.choice(["600B", "4KiB", "64KiB"]),
                                        "unit": r.choice(["1KiB", "4KiB"])}
            if r.random() < 0.5:
                # PXN (drawn last of all): messages to another node's GPU on another rail relayed through
                # the sender's peer on that rail, in pieces of 4-64 KiB
                sc["nic"].update(pxn=True, pxn_chunk=r.choice(["4KiB", "20KiB", "64KiB"]))
    if r.random() < 0.6 and "congestion_control" not in sc:
        # DCQCN (drawn after the cluster features, for the same reason; exclusive of telemetry): the paper's
        # reaction point or
        # the ConnectX firmware's, with their defaults or short timers so that cuts and recoveries happen
        # in these short runs
        short = r.random() < 0.5
        if r.random() < 0.5:
            cc = {"algorithm": "dcqcn"}
            if short:
                cc.update(cnp_interval=r.choice(["2us", "4us", "50us"]), alpha_timer=r.choice(["5us", "10us", "55us"]),
                          rate_increase_timer=r.choice(["3us", "5us", "55us"]),
                          byte_counter=r.choice(["16KB", "64KB", "10MB"]), fast_recovery_steps=r.choice([1, 5]),
                          clamp_target_rate=r.random() < 0.5, min_rate=r.choice(["100Mbps", "50Gbps"]),
                          g=r.choice([1 / 256, 1 / 16]), initial_alpha=r.choice([1.0, 0.5]))
                if r.random() < 0.5:
                    cc.update(rate_ai=r.choice(["1Gbps", "5Gbps"]), rate_hai=r.choice(["5Gbps", "20Gbps"]))
        else:
            cc = {"algorithm": "dcqcn_cx"}
            if short:
                cc.update(min_time_between_cnps=r.choice(["2us", "4us"]),
                          rpg_time_reset=r.choice(["5us", "20us", "300us"]),
                          rpg_byte_reset=r.choice(["0B", "16KB", "32767B"]),
                          rpg_ai_rate=r.choice(["5Mbps", "5Gbps"]), rpg_hai_rate=r.choice(["50Mbps", "20Gbps"]),
                          rpg_threshold=r.choice([1, 3]), dce_tcp_rtt=r.choice(["1us", "2us"]),
                          rate_reduce_monitor_period=r.choice(["4us", "6us"]), clamp_tgt_rate=r.random() < 0.3,
                          dce_tcp_g=r.choice([1019, 1000]))
                if r.random() < 0.3:
                    cc["rate_to_set_on_first_cnp"] = r.choice(["50Gbps", "150Gbps"])
                if r.random() < 0.3:
                    cc["rpg_max_rate"] = "200Gbps"
        sc["congestion_control"] = cc
        if r.random() < 0.7:
            # marking at shallow queues in most of them, so that these small runs send CNPs
            sc["switch"]["ecn"].update(enabled=True, kmin=r.choice(["2KB", "4KB"]), kmax=r.choice(["8KB", "16KB"]))
    w = r.random()
    if w < 0.3:
        # the strict-priority class (drawn last of all): ACK and NAK in it too, or no strict class at all
        sc["switch"]["strict_priority"] = "control" if w < 0.2 else "none"
    v = r.random()
    if v < 0.45:
        # slice 2's routing policies (drawn last of all): flowlet in 25% of all cases (gaps from a few packets
        # to htsim's 10 us, each metric), adaptive graded by utilisation in 10%, adaptive exact in 5%, pinned in 5%
        quality = dict(remote=r.random() < 0.7, refresh=r.choice(["100ns", "1us"]),
                       remote_period=r.choice(["500ns", "1us"]), remote_delay=r.choice(["500ns", "1us", "3us"]),
                       queue_ref=r.choice(["64KiB", "2MiB"]), remote_ref=r.choice(["128KiB", "4MiB"]),
                       util_window=r.choice(["1us", "5us", "30us"]),
                       util_thresholds=r.choice([[0.15, 0.5], [0.3, 0.6, 0.9]]))
        if v < 0.25:
            sc["routing"] = {"policy": "flowlet", "gap": r.choice(["300ns", "1us", "2us", "10us"]),
                             "metric": r.choice(["queue", "queue", "util", "queue_util"]), **quality}
        elif v < 0.35:
            sc["routing"] = {"policy": "adaptive", "metric": r.choice(["util", "queue_util"]), **quality}
        elif v < 0.40:
            sc["routing"] = {"policy": "adaptive", "exact": True, "metric": r.choice(["queue", "queue_util"]),
                             "util_window": quality["util_window"], "util_weight": r.choice([1.0, 0.3])}
        else:
            sc["routing"] = {"policy": "pinned"}
    if r.random() < 0.3:
        # the reorder_buffer receiver (drawn after everything else, for the same reason; in place of the
        # receiver drawn above): a buffer per receiving host from less than one unit (every unit beyond a
        # gap overflows) to the default
        receiver.update(model="reorder_buffer", buffer=r.choice(["1KiB", "2KiB", "4KiB", "12KiB", "64KiB"]))
    if r.random() < 0.3:
        # cells (drawn last of all): data units of 2-4 MTU packets (a 16 KiB switch buffer holds at most 3)
        buf = (sc["topology"]["buffer"] if sc["topology"]["kind"] == "leaf_spine"
               else sc["topology"]["switch"]["buffer"])["size"]
        sc["simulation"]["cell_packets"] = r.choice([2, 3] if buf == "16KiB" else [2, 3, 4])
    # slice 4 (drawn after every other draw, so a seed's other draws are those it drew before they joined):
    # persistent connections in 40% of the cases, a shared switch buffer in 40%
    if r.random() < 0.4:
        hosts = sc["topology"]["leaves"] * sc["topology"]["hosts_per_leaf"] if sc["topology"]["kind"] == "leaf_spine" \
            else 24
        sc["traffic"] = _connection_traffic(r, seed, hosts)
    v = r.random()
    if v < 0.4:
        # a plain shared pool (the topology's buffer, mode shared) or the dynamic threshold over a pool of
        # the topology's size or its own; an unbounded buffer gets a size, so that the pool exists
        where = sc["topology"] if sc["topology"]["kind"] == "leaf_spine" else sc["topology"]["switch"]
        buf = where["buffer"] = dict(where["buffer"])
        if buf["size"] == "unbounded":
            buf["size"] = r.choice(["64KiB", "256KiB"])
        if v < 0.2:
            buf["mode"] = "shared"
        else:
            if r.random() < 0.5:
                buf["mode"] = "shared"
            sc["switch"]["buffer"] = {"admission": "dynamic", "alpha": r.choice([0.25, 1.0, 4.0]),
                                      "reserve": r.choice(["0B", "4KB", "20KB"])}
            if r.random() < 0.5:
                sc["switch"]["buffer"]["size"] = r.choice(["64KiB", "160KiB", "1MiB"])
    return sc


def _connection_traffic(r: random.Random, seed: int, hosts: int) -> dict:
    """A message list (written to a temporary file, a function of ``seed``) of 2-6 pairs of hosts with
    2-6 messages each, mostly on persistent connections (conn 0 or 1, 15% fresh queue pairs), posted
    at 0, 2 or 10 us, a third of them after the source's previous message (and a gap): messages wait
    behind the one sending on their connection, complete deferred behind an earlier one, or are
    flushed when a queue pair gives up."""
    import os
    import tempfile
    rows = ["id,src,dst,size_bytes,start_ps,gap_ps,deps,conn"]
    mid = 0
    last: dict = {}
    for _ in range(r.randint(2, 6)):
        s = r.randrange(hosts)
        d = r.randrange(hosts - 1)
        d += d >= s
        conn = r.choice([0, 0, 1])
        for _k in range(r.randint(2, 6)):
            dep = last.get(s) if r.random() < 0.3 else None
            rows.append(f"{mid},{s},{d},{r.choice([1000, 4096, 17408, 65536])},{r.choice([0, 0, 2_000_000, 10_000_000])},"
                        f"{r.choice([0, 500_000]) if dep is not None else 0},{'' if dep is None else dep},"
                        f"{conn if r.random() < 0.85 else -1}")
            last[s] = mid
            mid += 1
    where = os.path.join(tempfile.gettempdir(), "fabricsim_check_compiled")
    os.makedirs(where, exist_ok=True)
    path = os.path.join(where, f"conn_{seed}.csv")
    with open(path, "w") as fh:
        fh.write("\n".join(rows) + "\n")
    return {"pattern": "csv", "path": path, "qps_per_connection": r.randint(1, 3), "qps_per_message": r.randint(1, 2)}


#: the features the last lines count, alone and in pairs (:func:`features`)
FEATURES = ("coalescing", "telemetry", "int_alone", "multiport", "nvlink", "pxn", "dcqcn", "strict_control",
            "lossless", "flowlet", "util_metric", "exact", "pinned", "go_back_n", "adaptive_rto",
            "reorder_buffer", "cells", "connections", "shared_buffer")


def features(sc: dict) -> set:
    """The features of :data:`FEATURES` that scenario ``sc`` has: ACK coalescing, the telemetry
    controller, INT without a controller, hosts with several NIC ports (a cluster whose GPUs keep two
    or more NIC ports, or have NVLink ports beside them), NVLink with credit flow control, PXN, DCQCN
    (``dcqcn`` or ``dcqcn_cx``), ACK and NAK in the strict-priority class (``strict_priority:
    control``), PFC (lossless switches); slice 2's routing: ``flowlet``, a utilisation metric
    (``util`` or ``queue_util``, of adaptive or flowlet), adaptive ``exact: true``, ``pinned``; the
    ``go_back_n`` receiver, adaptive timeouts, the ``reorder_buffer`` receiver, cells
    (``simulation.cell_packets > 1``), persistent connections, a shared switch buffer (a plain pool or
    the dynamic threshold; under PFC a lossless switch has none)."""
    out = set()
    rt = sc["routing"]
    if rt["policy"] in ("flowlet", "pinned"):
        out.add(rt["policy"])
    if rt.get("exact"):
        out.add("exact")
    elif rt.get("metric", "queue") != "queue":
        out.add("util_metric")
    model = sc["receiver"]["model"]
    if model in ("go_back_n", "reorder_buffer"):
        out.add(model)
    if sc["receiver"].get("rto_mode") == "adaptive":
        out.add("adaptive_rto")
    if sc["simulation"].get("cell_packets", 1) > 1:
        out.add("cells")
    if sc["traffic"]["pattern"] == "csv":
        out.add("connections")
    buf = (sc["topology"] if sc["topology"]["kind"] == "leaf_spine" else sc["topology"]["switch"])["buffer"]
    if (buf.get("mode") == "shared" or sc["switch"].get("buffer", {}).get("admission") == "dynamic") \
            and "pfc" not in sc["switch"]:
        out.add("shared_buffer")
    if "ack_every" in sc["receiver"]:
        out.add("coalescing")
    alg = sc.get("congestion_control", {}).get("algorithm")
    if alg == "telemetry":
        out.add("telemetry")
    elif sc["switch"].get("telemetry") == "on":
        out.add("int_alone")
    if alg in ("dcqcn", "dcqcn_cx"):
        out.add("dcqcn")
    if sc["switch"].get("strict_priority") == "control":
        out.add("strict_control")
    if "pfc" in sc["switch"]:
        out.add("lossless")
    topo = sc["topology"]
    if topo["kind"] == "cluster":
        if topo["nic"]["ports"] - len(topo.get("failed", {}).get("planes", [])) >= 2 or topo["domain"] != "none":
            out.add("multiport")
        if topo.get("nvlink", {}).get("transport") == "credit":
            out.add("nvlink")
        if sc["nic"].get("pxn"):
            out.add("pxn")
    return out


def compare(sc: dict, status: list | None = None) -> list[str]:
    """Run ``sc`` on both kernels; the differences found (empty: identical). The heap run's
    status, its ``summary["run"]``, its NAK count, its PFC pause events, its control packets sent, the
    CNPs its senders received, its new flowlets (None without flowlet) and the payload its reorder buffers
    discarded are appended to ``status`` if given."""
    import pandas as pd

    import fabricsim
    res = {}
    for k in ("heap", "compiled"):
        res[k] = fabricsim.run({**sc, "simulation": {**sc["simulation"], "kernel": k}})
    a, b = res["heap"], res["compiled"]
    if status is not None:
        status.extend((a.summary["status"], a.summary["run"], int(a.messages["naks"].sum()),
                       int(a.links["pfc_pause_events"].sum()), a.summary["conservation"]["control"]["sent_packets"],
                       int(a.messages["cnps"].sum()), a.summary["run"].get("new_flowlets"),
                       int(a.messages["reorder_overflow_bytes"].sum())))
    out = []
    if b.summary["run"]["kernel"].get("ran") != "compiled":
        out.append(f"did not run compiled: {b.summary['run']['kernel']}")
    for t in ("messages", "links", "latency", "goodput", "link_timeseries", "nics"):
        try:
            pd.testing.assert_frame_equal(getattr(a, t), getattr(b, t))
        except AssertionError as e:
            out.append(f"{t}: {str(e).splitlines()[0]}")
    sa, sb = _comparable(a.summary), _comparable(b.summary)
    for key in sorted(set(sa) | set(sb)):
        if sa.get(key) != sb.get(key):
            out.append(f"summary.{key} differs")
    if a.summary["run"]["events"] != b.summary["run"]["events"]:
        out.append(f"events {a.summary['run']['events']} != {b.summary['run']['events']}")
    return out


def _count_slice4() -> dict:
    """Counters of the slice-4 features firing, by wrapping the Python methods both kernels call
    (the connections' lifecycle) or heap alone calls (a shared pool's admission, the estimator of a
    queue pair with an heir); and of slice 6's completions recorded from the core's log."""
    from fabricsim.engine.packet import PacketEngine
    from fabricsim.flows.replay import Connections
    from fabricsim.net import port as port_mod
    from fabricsim.net.sender import Sender
    from fabricsim.engine.compiled import CompiledKernel
    from fabricsim.engine.compiled import core as C
    n = {k: 0 for k in ("handed", "waited", "deferred", "flushed", "refused", "pool_full", "threshold", "heir",
                        "quiet")}
    drain = CompiledKernel._drain

    def drain_(self):
        n["quiet"] += int(self.X.g[C.G_CL_N])
        return drain(self)
    CompiledKernel._drain = drain_
    est = Sender._estimator
    nxt, post, done, admits = (PacketEngine._next_on_connection, Connections.post, Connections.done,
                               port_mod.SharedBuffer.admits)

    def next_on_connection(self, t, st):
        n["handed"] += st.on_sent is not False
        return nxt(self, t, st)

    def post_(self, row):
        how = post(self, row)
        n["waited"] += how == "wait"
        n["refused"] += how == "error"
        return how

    def done_(self, row, failed=False):
        out = done(self, row, failed)
        n["deferred"] += not out[1]
        n["flushed"] += len(out[2])
        return out

    def admits_(self, q, wire, used):
        ok = admits(self, q, wire, used)
        if not ok:
            n["pool_full" if used + wire > self.size else "threshold"] += 1
        return ok
    def estimator(qp):
        n["heir"] += 1
        return est(qp)
    Sender._estimator = staticmethod(estimator)
    PacketEngine._next_on_connection = next_on_connection
    Connections.post, Connections.done = post_, done_
    port_mod.SharedBuffer.admits = admits_      # (not pool_admits: the compiled core compiles that one)
    return n


def _comparable(summary: dict) -> dict:
    out = {}
    for k, v in summary.items():
        if isinstance(v, dict):
            v = _comparable(v)
        if "wall" in k or k.endswith("_per_s") or k == "kernel":
            continue
        out[k] = v
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1, help="first case's seed (cases use seed, seed+1, ...)")
    args = ap.parse_args(argv)
    fired = _count_slice4()
    t0 = time.perf_counter()
    bad = 0
    tally = {f: 0 for f in FEATURES}
    dc: dict = {}                            # DCQCN cases by what they ran with
    strict = {"control": 0, "none": 0}       # cases with ACK/NAK in the strict-priority class too, or no class
    routes: dict = {}                        # slice 2's routing cases by what they ran with
    rb: dict = {}                            # reorder_buffer cases whose buffer overflowed, with each other feature
    pairs = {(a, b): 0 for i, a in enumerate(FEATURES) for b in FEATURES[i + 1:]}
    for s in range(args.seed, args.seed + args.cases):
        sc = scenario(s)
        have = features(sc)
        for f in have:
            tally[f] += 1
        for a, b in pairs:
            if a in have and b in have:
                pairs[(a, b)] += 1
        st: list = []
        diffs = compare(sc, st)
        rt = sc["routing"]
        for k, on in (("flowlet", rt["policy"] == "flowlet"), ("flowlet with new flowlets", bool(st[6])),
                      ("util metric", "util_metric" in have), ("exact", "exact" in have),
                      ("exact queue_util", "exact" in have and rt["metric"] == "queue_util"),
                      ("pinned", rt["policy"] == "pinned")):
            routes[k] = routes.get(k, 0) + on
        routes["new flowlets"] = routes.get("new flowlets", 0) + (st[6] or 0)
        bad += bool(diffs)
        if sc["switch"].get("strict_priority") in strict:
            strict[sc["switch"]["strict_priority"]] += 1
        alg = sc.get("congestion_control", {}).get("algorithm")
        if alg in ("dcqcn", "dcqcn_cx"):
            for k, on in ((alg, True), (f"{alg} with CNPs", st[5] > 0), ("coalesced", "ack_every" in sc["receiver"]),
                          ("pfc", "pfc" in sc["switch"]), ("go_back_n", sc["receiver"]["model"] == "go_back_n"),
                          ("strict control", sc["switch"].get("strict_priority") == "control"),
                          ("strict none", sc["switch"].get("strict_priority") == "none")):
                dc[k] = dc.get(k, 0) + on
            dc["cnps"] = dc.get("cnps", 0) + st[5]
            if st[5]:
                for f in have - {"dcqcn"}:
                    dc[f"cnps+{f}"] = dc.get(f"cnps+{f}", 0) + 1
        if st[7]:
            rb["overflow"] = rb.get("overflow", 0) + 1
            for f in have - {"reorder_buffer"}:
                rb[f] = rb.get(f, 0) + 1
        t = sc["traffic"]
        print(f"{'DIFFERENT' if diffs else 'same     '} case {s}: {sc['routing']['policy']:8s} {t['pattern']:11s} "
              f"rto {sc['receiver'].get('rto_mode', 'fixed'):8s} {sc['receiver']['model']:9s} "
              + (f"{sc['topology']['leaves']}x{sc['topology']['hosts_per_leaf']} buffer {sc['topology']['buffer']['size']:9s} "
                 if sc["topology"]["kind"] == "leaf_spine" else
                 f"{sc['topology']['domain']} {sc['topology']['nic']['ports']} ports {sc['nic']['plane_split']:10s} "
                 + (f"nvlink {sc['topology']['nvlink']['spread']} credit {sc['topology']['nvlink']['credit_buffer']} "
                    if sc["topology"].get("nvlink", {}).get("transport") == "credit" else "")
                 + (f"pxn {sc['nic']['pxn_chunk']} " if sc["nic"].get("pxn") else "")
                 + f"{'failed ' if 'failed' in sc['topology'] else ''}buffer {sc['topology']['switch']['buffer']['size']:9s} ")
              + f"{st[0]}"
              + (f" timeouts {st[1]['retransmission_timeouts']} probes {st[1]['timeout_probes']} "
                 f"dsacks {st[1]['dsacks_received']}" if sc["receiver"].get("rto_mode") == "adaptive" else "")
              + (f" naks {st[2]} stale {st[1]['stale_naks_ignored']}" if sc["receiver"]["model"] == "go_back_n" else "")
              + (f" pfc xoff {sc['switch']['pfc']['xoff']} pauses {st[3]}" if "pfc" in sc["switch"] else "")
              + (f" ack_every {sc['receiver']['ack_every']} sack {sc['receiver']['sack_bitmap']} ctrl {st[4]}"
                 if "ack_every" in sc["receiver"] else "")
              + (" telemetry" + ("" if len(sc["congestion_control"]) == 1 else
                                 f" {sc['congestion_control']['estimator']}")
                 if sc.get("congestion_control", {}).get("algorithm") == "telemetry" else "")
              + (" int" if sc["switch"].get("telemetry") == "on" else "")
              + (f" {sc['congestion_control']['algorithm']} cnps {st[5]}"
                 if "congestion_control" in sc and sc["congestion_control"]["algorithm"] != "telemetry" else "")
              + (f" strict {sc['switch']['strict_priority']}" if "strict_priority" in sc["switch"] else "")
              + (f" flowlet gap {sc['routing']['gap']} {sc['routing']['metric']} new {st[6]}"
                 if sc["routing"]["policy"] == "flowlet" else "")
              + (f" metric {sc['routing']['metric']}" if sc["routing"]["policy"] == "adaptive"
                 and sc["routing"].get("metric", "queue") != "queue" else "")
              + (" exact" if sc["routing"].get("exact") else "")
              + (f" buffer {sc['receiver']['buffer']} overflow {st[7]}" if sc["receiver"]["model"] == "reorder_buffer"
                 else "")
              + (f" cells {sc['simulation']['cell_packets']}" if "cell_packets" in sc["simulation"] else "")
              + (f"  {'; '.join(diffs)}" if diffs else ""), flush=True)
    print("cases with each feature: " + ", ".join(f"{f} {n}" for f, n in tally.items()))
    print("cases with each pair: " + ", ".join(f"{a}+{b} {n}" for (a, b), n in pairs.items()))
    dcn = dc.get("dcqcn", 0) + dc.get("dcqcn_cx", 0)
    print(f"DCQCN in {dcn} cases: dcqcn {dc.get('dcqcn', 0)} ({dc.get('dcqcn with CNPs', 0)} with CNPs), dcqcn_cx "
          f"{dc.get('dcqcn_cx', 0)} ({dc.get('dcqcn_cx with CNPs', 0)} with CNPs), {dc.get('cnps', 0)} CNPs in all; "
          f"{dc.get('coalesced', 0)} with coalesced ACKs, {dc.get('pfc', 0)} PFC, {dc.get('go_back_n', 0)} go-back-N, "
          f"{dc.get('strict control', 0)} strict_priority control, {dc.get('strict none', 0)} none")
    print("DCQCN cases with CNPs, with each other feature: "
          + ", ".join(f"{f} {dc.get(f'cnps+{f}', 0)}" for f in FEATURES if f != "dcqcn"))
    print(f"strict_priority control in {strict['control']} cases, none in {strict['none']} (every algorithm)")
    print(f"routing (slice 2): {routes}")
    print(f"reorder_buffer in {tally['reorder_buffer']} cases, {rb.get('overflow', 0)} of them overflowing; those with "
          "each other feature: " + ", ".join(f"{f} {rb.get(f, 0)}" for f in FEATURES if f != "reorder_buffer"))
    print("connections (both kernels' runs, counted in the engine's Python lifecycle): "
          f"{fired['handed']} messages handed their connection on when their last byte left, {fired['waited']} "
          f"waited behind one sending, {fired['deferred']} completed deferred behind an earlier one, "
          f"{fired['flushed']} flushed after a queue pair gave up, {fired['refused']} posted to a connection in "
          f"error, {fired['heir']} RTT estimators found through the heir chain (heap runs); shared buffers (heap runs): {fired['pool_full']} packets refused by a full pool, "
          f"{fired['threshold']} by the dynamic threshold")
    print(f"completions in the core (slice 6, compiled runs): {fired['quiet']} messages' completions logged by the core "
          "and recorded from its log")
    print(f"{args.cases - bad}/{args.cases} identical in {time.perf_counter() - t0:.1f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
