"""The ``telemetry`` congestion control and in-band telemetry (INT) on the compiled packet core
(docs/compiled-core.md 4.5, slice 5): bit-identical to ``heap``.

Every case compares the output tables and the event count, and also every queue pair's
congestion state at the end of the run, float for float (``TelemetryState``: the utilisation,
windows, RTT excess, per-position EWMAs and the per-port histories; the flow's window and pacing
rate): a float that rounded differently anywhere in the run stays in these EWMAs. The cases reach
the Spectrum-X profile (adaptive routing, ``ddp``, adaptive timeouts with ``rto_rttvar_mult: 4``,
PFC, ECN at dequeue, CNP strict priority, dynamic buffer admission), INT stamped on lossy switches
at dequeue (settled samples and packets that leave at once) and at enqueue, the HPCC rules as
parameters, go-back-N's NAKs carrying INT, telemetry without INT, INT without congestion control,
a run cut with stamped packets in flight, a 5-switch route (the longest INT stack), rates that do
not divide 8e12, and D-SACKs under drops; and all of it with ACK coalescing (``ack_every > 1``,
``COALESCED``: a coalesced ACK echoes the INT of the latest-sent unit it covers, ``r_tel``, compared
with the packets in flight at the end). ``COMBOS`` runs the cluster features with them (the merge
of ``nvl``): telemetry over several NIC ports per packet and per flow (INT from every plane in one
flow's port histories, pacing at the sum of the ports' rates), coalesced ACKs spread over the
receiver's ports, telemetry and INT on NVLink racks (NVLink queue pairs: no controller, no INT), and
PXN with telemetry and with coalescing; each asserts that its features fired. The float arithmetic
the core compiles from ``fabricsim/cc/telemetry.py`` is also checked against CPython on 10^5 random
inputs per function.
"""
from __future__ import annotations

import random
import struct

import numpy as np
import pandas as pd
import pytest

import fabricsim
from fabricsim.analysis.recorder import Recorder
from fabricsim.api import prepare
from fabricsim.cc import telemetry as tel
from fabricsim.engine import ENGINES
from fabricsim.engine.compiled import core
from fabricsim.net import nic as nic_mod

from test_compiled_core import _PLANES_INCAST, _PXN_INCAST, _RACKS, _planes, _pxn, _same_results, _two_racks
from test_kernel_equivalence import FABRIC

pytest.importorskip("numba")


def _perm(**over):
    sc = {"name": "tel_perm", "topology": dict(FABRIC),
          "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "1MiB"},
          "routing": {"policy": "spray"}, "congestion_control": {"algorithm": "telemetry"},
          "simulation": {"seed": 1, "time_limit": "20ms"}, "outputs": {"link_sample_interval": "off"}}
    for k, v in over.items():
        sc[k] = {**sc.get(k, {}), **v} if isinstance(v, dict) and k not in ("traffic", "topology") else v
    return sc


def _incast(**over):
    """Six senders into one host over 32 KiB buffers: standing queues, drops under lossy switches."""
    sc = _perm(topology={**FABRIC, "buffer": {"mode": "per_port", "size": "32KiB"}},
               traffic={"pattern": "incast", "senders": 6, "receiver": 0, "message_size": "512KiB"},
               routing={"policy": "ecmp"}, switch={"ecn": {"enabled": True, "kmin": "8KB", "kmax": "24KB"}})
    for k, v in over.items():
        sc[k] = {**sc.get(k, {}), **v} if isinstance(v, dict) and k not in ("traffic", "topology") else v
    return sc


def _five_switches():
    """Two leaves in different pods: a route crosses leaf, pod spine, superspine, pod spine, leaf."""
    nodes = [{"name": f"h{i}", "type": "host"} for i in range(8)]
    nodes += [{"name": n, "type": "switch", "tier": t} for n, t in
              (("l0", 1), ("l1", 1), ("s0", 2), ("s1", 2), ("s2", 2), ("s3", 2), ("x0", 3), ("x1", 3))]
    links = [{"a": f"h{i}", "b": "l0" if i < 4 else "l1", "rate": "400Gbps"} for i in range(8)]
    links += [{"a": "l0", "b": s, "rate": "400Gbps", "count": 2} for s in ("s0", "s1")]
    links += [{"a": "l1", "b": s, "rate": "400Gbps", "count": 2} for s in ("s2", "s3")]
    links += [{"a": s, "b": x, "rate": "400Gbps", "count": 2} for s in ("s0", "s1", "s2", "s3") for x in ("x0", "x1")]
    return {"kind": "explicit", "nodes": nodes, "links": links}


CASES = {
    # the Spectrum-X profile: a permutation and an incast that pauses (PFC), queues standing at the
    # receiver's leaf
    "spectrum-x-permutation": lambda: {**_perm(routing={"policy": "adaptive"}), "profile": "spectrum_x",
                                       "congestion_control": "telemetry"},
    "spectrum-x-incast": lambda: {**_incast(routing={"policy": "adaptive"}, switch={}), "profile": "spectrum_x",
                                  "congestion_control": "telemetry"},
    # lossy switches: INT at dequeue (packets that wait are stamped when their sample is settled,
    # packets that leave at once when they arrive), at enqueue, and without ECN (pending samples for INT alone)
    "lossy-spray-dequeue": lambda: _incast(routing={"policy": "spray"}),
    "lossy-enqueue": lambda: _incast(switch={"ecn": {"enabled": True, "kmin": "8KB", "kmax": "24KB",
                                                     "sample": "enqueue"}}),
    "lossy-no-ecn": lambda: _incast(switch={"ecn": {"enabled": False}}, routing={"policy": "adaptive"}),
    # HPCC's rules as parameters (estimator hpcc: the EWMA of the max; HPCC's per-ACK deltas; no RTT scaling)
    "hpcc-rules": lambda: _incast(congestion_control={"algorithm": "telemetry", "estimator": "hpcc",
                                                      "rate_interval_rtts": 0, "qlen_window_rtts": 0,
                                                      "window_rtt_max": 1.0, "max_stage": 5},
                                  routing={"policy": "spray"}),
    "global-base-rtt": lambda: _perm(congestion_control={"algorithm": "telemetry", "global_base_rtt": True,
                                                         "initial_u": 1.0}, routing={"policy": "adaptive"}),
    "explicit-parameters": lambda: _incast(congestion_control={"algorithm": "telemetry", "base_rtt": "3us",
                                                               "w_ai": "2KB", "min_rate": "10Gbps", "eta": 0.9,
                                                               "rtt_gain": 0.5, "window_rtt_max": 2.0}),
    # go-back-N: NAKs echo the INT of the unit that triggered them (Sender._on_nak's CC hook)
    "go-back-n": lambda: _incast(receiver={"model": "go_back_n", "rto_low": "8us", "rto_high": "12us"},
                                 routing={"policy": "spray"}),
    # D-SACKs (echoing the duplicate's INT) and probes under drops with adaptive timeouts
    "rto-adaptive-drops": lambda: _incast(topology={**FABRIC, "buffer": {"mode": "per_port", "size": "16KiB"}},
                                          routing={"policy": "spray"},
                                          receiver={"rto_mode": "adaptive", "rto_min": "2us",
                                                    "reorder_window": "300ns"}),
    # telemetry with no INT (every ACK is ignored: windows stay at W_init), INT with no controller
    "telemetry-without-int": lambda: _incast(switch={"ecn": {"enabled": True, "kmin": "8KB", "kmax": "24KB"},
                                                     "telemetry": "off"}),
    "int-without-cc": lambda: _incast(congestion_control={"algorithm": "none"},
                                      switch={"ecn": {"enabled": True, "kmin": "8KB", "kmax": "24KB"},
                                              "telemetry": "on"}),
    # cut mid-flight: stamped packets and ACKs with INT in flight, written back
    "time-limit-cut": lambda: {**_incast(simulation={"time_limit": "15us"}), "profile": "spectrum_x",
                               "routing": {"policy": "spray"}},
    "five-switch-route": lambda: _perm(topology=_five_switches(), routing={"policy": "adaptive"},
                                       traffic={"pattern": "permutation", "message_size": "1MiB"}),
    "rates-not-dividing-8e12": lambda: _incast(
        topology={**FABRIC, "buffer": {"mode": "per_port", "size": "32KiB"},
                  "host_link": {"rate": "333Gbps", "delay": "500ns"}, "fabric_link": {"rate": "300Gbps",
                                                                                      "delay": "500ns"}},
        routing={"policy": "adaptive"}),
    "sampling-on": lambda: {**_perm(outputs={"link_sample_interval": "2us"}), "profile": "spectrum_x"},
}


def _engine(sc, kernel):
    """Run ``sc`` on ``kernel``; the engine (its queue pairs hold their final CC state) and the result."""
    sc = {**sc, "simulation": {**sc.get("simulation", {}), "kernel": kernel}}
    _loaded, sim = prepare(sc)
    s = sim.scenario
    eng = ENGINES.get("packet")(sim, Recorder(s.outputs.latency_rel_error, s.outputs.timeseries_bin))
    eng.run()
    return eng, fabricsim.run(sc)


def _bits(v):
    """A value with every float as its bits (so 0.0 and -0.0, or two NaNs, are told apart)."""
    if isinstance(v, float):
        return ("f", struct.pack("<d", v))
    if isinstance(v, (list, tuple)):
        return [_bits(x) for x in v]
    if isinstance(v, dict):
        return {k: _bits(x) for k, x in v.items()}
    return v


def _cc_state(eng):
    """Every queue pair's congestion state: the flow's rate and window and its TelemetryState (PXN
    pieces' queue pairs too)."""
    out = []
    for st in list(eng._rows) + list(eng.pieces):
        for qp in st.qps:
            f = qp.flow
            row = {"rate": f.rate_bps, "rate_type": type(f.rate_bps).__name__, "win": f.window_bytes,
                   "next_ok": qp.next_ok}
            s = f.state
            if s is not None:
                row.update({k: getattr(s, k) for k in ("T", "w", "wc", "w_init", "w_min", "w_ai", "u", "inc_stage",
                                                       "last_update_seq", "srtt", "rtt_scale", "rate_span",
                                                       "q_span")})
                row["hop_u"], row["hop_ts"] = list(s.hop_u), list(s.hop_ts)
                row["ports"] = {pid: (list(h.rate), list(h.qmin), h.last_ts, h.last_q)
                                for pid, h in sorted(s.ports.items())}
            out.append(_bits(row))
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_telemetry_runs_compiled_with_the_heap_kernels_results(case):
    sc = CASES[case]()
    ea, a = _engine(sc, "heap")
    eb, b = _engine(sc, "compiled")
    _same_results(a, b)
    sa, sb = _cc_state(ea), _cc_state(eb)
    assert sa == sb
    # ... and each case reaches what it is for
    run, links, m = a.summary["run"], a.links, a.messages
    tel_cc = sc.get("congestion_control", {"algorithm": "telemetry"})
    tel_cc = tel_cc if isinstance(tel_cc, str) else tel_cc["algorithm"]
    if tel_cc == "telemetry" and case != "telemetry-without-int":
        states = [qp.flow.state for st in ea._rows for qp in st.qps]
        assert any(s.ports for s in states)                                   # INT was measured
        assert any(qp.next_ok > 0 for st in ea._rows for qp in st.qps)        # ... and paced the flows
    if case == "telemetry-without-int":
        assert all(not qp.flow.state.ports and qp.flow.window_bytes == qp.flow.state.w_init
                   for st in ea._rows for qp in st.qps)
    if case == "int-without-cc" or case.startswith("lossy"):
        # stamped packets are longer: the same payload puts more bytes on the fabric than without INT
        assert links["tx_bytes"].sum() > 0
    if case in ("spectrum-x-incast", "time-limit-cut"):
        assert links["pfc_paused_ps"].sum() > 0 and run["dropped_packets"] == 0
    if case in ("lossy-spray-dequeue", "lossy-enqueue", "go-back-n", "rto-adaptive-drops"):
        assert run["dropped_packets"] > 0
    if case == "go-back-n":
        assert m["naks"].sum() > 0
    if case == "rto-adaptive-drops":
        assert run["dsacks_received"] > 0 and run["timeout_probes"] > 0
    if case == "time-limit-cut":
        assert a.summary["status"] == "time_limit" and run["in_network_payload_bytes"] > 0
        assert any(p.tel for port in eb.ports for _t, _s, _f, p in port.inflight)   # stacks written back
    if case == "five-switch-route":
        assert eb.kernel.X.g[core.G_MAXHOP] == 5
        assert max(len(qp.flow.state.hop_u) for st in ea._rows for qp in st.qps) == 5
    if case == "sampling-on":
        assert len(a.link_timeseries)
    if case == "explicit-parameters":
        assert all(qp.flow.state.T == 3e6 for st in ea._rows for qp in st.qps)


_TEL = {"algorithm": "telemetry"}
_COALESCE = {"ack_every": 8, "sack_bitmap": 64, "ack_delay": "2us"}

#: the features of the cluster slice (several NIC ports, NVLink with credit flow control, PXN) with
#: telemetry, INT and ACK coalescing (merge of ``nvl`` into ``ackco`` + ``tel``)
COMBOS = {
    # telemetry over 2 planes per packet, a lossy incast: INT from both planes' switches in one flow's
    # port histories, the flow's line rate the sum of its ports' (pacing, windows), the receiver's ACKs
    # rotated over its ports; per flow over 4 planes with coalesced ACKs (2 queue pairs a message)
    "telemetry-planes-per-packet-incast": lambda tmp: _planes(**_PLANES_INCAST, congestion_control=_TEL),
    "telemetry-planes-4-per-flow-coalesced": lambda tmp: _planes(ports=4, split="per_flow", congestion_control=_TEL,
                                                                 receiver=_COALESCE, **_PLANES_INCAST),
    # ACK coalescing over 2 planes per packet: coalesced ACKs (and D-SACKs) spread over the receiving
    # host's ports by reply_nic's rotation, adaptive timeouts whose wait allowance is at the queue
    # pair's line rate (both ports), drops and probes
    "coalesced-planes-per-packet-rto-adaptive": lambda tmp: _planes(**_PLANES_INCAST,
                                                                    receiver={**_COALESCE, "rto_mode": "adaptive"}),
    # 2 NVL36 racks: RoCE across the racks under telemetry (measured and paced), NVLink inside them (no
    # controller, no INT: the chips neither mark nor stamp); INT alone with coalesced ACKs
    "telemetry-nvlink-racks": lambda tmp: {
        "name": "tel_racks", "topology": {**_RACKS, "switch": {"buffer": {"size": "64KiB"}}},
        "traffic": _two_racks(tmp), "routing": {"policy": "adaptive"}, "congestion_control": _TEL,
        "simulation": {"seed": 3}, "outputs": {"link_sample_interval": "off"}},
    "int-nvlink-racks-coalesced": lambda tmp: {
        "name": "tel_racks", "topology": _RACKS, "traffic": _two_racks(tmp), "routing": {"policy": "spray"},
        "switch": {"telemetry": "on"}, "receiver": _COALESCE, "simulation": {"seed": 3},
        "outputs": {"link_sample_interval": "off"}},
    # PXN: a relayed incast into 16 KiB buffers under telemetry (the pieces' second hops measured, paced
    # and dropped), and a relayed all-to-all with telemetry and coalesced ACKs
    "telemetry-pxn-incast": lambda tmp: _pxn(**_PXN_INCAST, congestion_control=_TEL),
    "telemetry-pxn-coalesced": lambda tmp: _pxn(congestion_control=_TEL, receiver=_COALESCE,
                                                traffic={"pattern": "all_to_all", "message_size": "256KiB"}),
}


def _planes_of(eng, pids) -> set:
    """The planes (``p<k>.`` switch names) of the switches owning ports ``pids``."""
    names = eng.sim.topology.graph.nodes
    return {names[eng.ports[pid].owner]["name"].split(".")[0] for pid in pids}


@pytest.mark.parametrize("case", list(COMBOS))
def test_cluster_features_with_telemetry_and_coalescing_run_compiled_identically(case, tmp_path):
    sc = COMBOS[case](tmp_path)
    ea, a = _engine(sc, "heap")
    eb, b = _engine(sc, "compiled")
    _same_results(a, b)
    assert _cc_state(ea) == _cc_state(eb)
    # ... and each case reaches what it is for
    states = list(ea._rows) + list(ea.pieces)
    qps = [qp for st in states for qp in st.qps]
    roce = [qp for qp in qps if not qp.nics[0].nvlink]
    nvl = [qp for qp in qps if qp.nics[0].nvlink]
    assert any(len(nics) > 1 for nics in ea.nics.values())               # hosts with several NIC ports
    # a host whose receiver sent control packets by two or more of its ports
    assert any(sum(1 for nic in nics if nic.port.ctrl_packets) > 1 for nics in ea.nics.values())
    run = a.summary["run"]
    if "telemetry" in case:
        assert any(qp.flow.state.ports for qp in roce)                        # INT measured
        assert any(qp.next_ok > 0 for qp in roce)                             # ... and paced
    if "per-packet" in case:
        assert max(len(qp.nics) for qp in qps) == 2
        assert any(len(_planes_of(ea, qp.flow.state.ports)) == 2 for qp in roce) if "telemetry" in case else True
    if "coalesced" in case:
        assert sum(st.acks for st in states) < sum(st.rx_units for st in states) / 2     # ACKs coalesced
    if case == "coalesced-planes-per-packet-rto-adaptive":
        assert run["dropped_packets"] > 0 and run["timeout_probes"] > 0 and run["dsacks_received"] > 0
    if "nvlink" in case or "pxn" in case:
        assert nvl and roce
        # NVLink queue pairs: no controller, never paced
        assert all(qp.flow.state is None and qp.flow.rate_bps == qp.flow.line_bps and not qp.next_ok for qp in nvl)
    if case == "int-nvlink-racks-coalesced":
        assert eb.kernel.X.g[core.G_STAMP] == 1 and all(qp.flow.state is None for qp in qps)
    if "pxn" in case:
        assert ea.pieces and any(not p.final for p in ea.pieces)
        assert any(qp.flow.state.ports for p in ea.pieces for qp in p.qps if not qp.nics[0].nvlink)
    if case == "telemetry-pxn-incast":
        assert run["dropped_packets"] > 0


def test_the_shipped_quickstart_runs_compiled_with_identical_results():
    """``fabricsim run scenarios/quickstart.yaml --set simulation.kernel=compiled`` (spectrum_x)."""
    a = fabricsim.run("scenarios/quickstart.yaml")
    b = fabricsim.run("scenarios/quickstart.yaml", overrides=["simulation.kernel=compiled"])
    assert not [w for w in b.summary.get("warnings", []) if w.startswith("kernel: ")]
    _same_results(a, b)


def test_telemetry_pools_that_start_small_grow_without_losing_state(monkeypatch):
    """Telemetry's deque nodes, port histories and their hash table start at a few entries: they
    must grow (the table is rebuilt, twice its size) between events without changing a result."""
    from fabricsim.engine.compiled import state
    build = state.build

    def tiny(engine, nic_index):
        X = build(engine, nic_index)
        X = X._replace(TN=state._arr("TN", 32), TH=state._arr("TH", 4), HT=np.full(4, -1, dtype=np.int64))
        state._link_free(X.TN[:, core.TN_NEXT], 0)
        X.g[core.G_TNFREE], X.g[core.G_TNNFREE] = 0, 32
        X.g[core.G_HT_BITS] = 2
        return X

    monkeypatch.setattr(state, "build", tiny)
    sc = CASES["spectrum-x-permutation"]()
    ea, a = _engine(sc, "heap")
    eb, b = _engine(sc, "compiled")
    assert eb.kernel.X.TH.shape[0] > 4 and len(eb.kernel.X.HT) > 4
    pd.testing.assert_frame_equal(a.messages, b.messages)
    pd.testing.assert_frame_equal(a.links, b.links)
    assert _cc_state(ea) == _cc_state(eb)


def test_telemetry_time_limits_of_2_53_ps_or_more_fall_back():
    """Coverage: telemetry runs compiled; a time limit of 2^53 ps or more (where CPython's exact
    int-float comparisons and numba's conversions could differ) runs on heap and says why."""
    b = fabricsim.run({**_perm(simulation={"time_limit": "10000s"}), "outputs": {"timeseries_bin": "1s",
                                                                             "link_sample_interval": "off"}},
                      overrides=["simulation.kernel=compiled"])
    info = b.summary["run"]["kernel"]
    assert info["ran"] == "heap" and "telemetry with simulation.time_limit" in info["fallback"], info


def _f64(x):
    return struct.pack("<d", x)


def test_the_compiled_telemetry_arithmetic_is_the_controllers_own():
    """Every float function of cc/telemetry.py and the NIC's pacing gap, compiled by numba from
    their source, give the same bits as CPython on 10^5 random inputs each, edge values included
    (products of int operands near 2^53, queues and spans of 0, utilisations at and around eta,
    windows at both clamps, rates at line rate)."""
    from numba import njit

    @njit(_nrt=False)
    def window(u, wc, st, eta, ms, wai, wi, wm):
        return core.reference_window(u, wc, st, eta, ms, wai, wi, wm)

    @njit(_nrt=False)
    def limits(w, scale, T, line):
        return core.window_and_rate(w, scale, T, line)

    @njit(_nrt=False)
    def unseen(srtt, have, rtt, brtt, fwd, g, T, m):
        return core.unseen_delay(srtt, have, rtt, brtt, fwd, g, T, m)

    rng = random.Random(5)
    big = 2**53 - 1
    rates = [400 * 10**9, 100 * 10**9, 333 * 10**9, 800 * 10**9, 10**8, 1, big]
    for i in range(100_000):
        bps = rng.choice(rates + [rng.randrange(1, 2 * 10**12)])
        dt = rng.choice([1, big // bps if bps < big else 1, rng.randrange(1, 10**10), rng.randrange(1, big)])
        T = rng.choice([5e6, 1.0, float(rng.randrange(1, 10**9)), rng.uniform(1e3, 1e8)])
        ql = rng.choice([0, 1, rng.randrange(10**7), rng.randrange(big)])
        dtx = rng.choice([0, rng.randrange(10**7), rng.randrange(big)])
        assert _f64(core.hop_utilisation(ql, dtx, dt, bps, T)) == _f64(tel.hop_utilisation(ql, dtx, dt, bps, T))
        assert _f64(core.queue_delay_ps(ql, bps)) == _f64(tel.queue_delay_ps(ql, bps))
        old, u = rng.uniform(0, 3), rng.choice([0.0, rng.uniform(0, 3), rng.uniform(0, 1e6)])
        w = rng.choice([0, 1, int(T), int(T) + 1, rng.randrange(10**10)])
        assert _f64(core.ewma_over_T(old, u, w, T)) == _f64(tel.ewma_over_T(old, u, w, T))
        srtt, have = rng.uniform(-1e7, 1e7), bool(i & 1)
        rtt, brtt, fwd = rng.randrange(1, 10**9), rng.randrange(1, 10**8), rng.uniform(0, 1e8)
        g, m = rng.choice([0.125, 1.0, rng.random()]), rng.choice([1.0, 1.25, 2.0, rng.uniform(1, 4)])
        want = tel.unseen_delay(srtt, have, rtt, brtt, fwd, g, T, m)
        assert [_f64(v) for v in unseen(srtt, have, rtt, brtt, fwd, g, T, m)] == [_f64(v) for v in want]
        eta = rng.choice([0.95, 1.0, rng.uniform(0.01, 1)])
        uu = rng.choice([eta, 0.0, 1e-9, 1e-10, rng.uniform(0, 2), rng.uniform(eta - 1e-9, eta + 1e-9)])
        wi = rng.uniform(1e3, 1e6)
        wm = rng.choice([wi, rng.uniform(1, wi)])
        args = (uu, rng.choice([wi, wm, rng.uniform(0, 2 * wi)]), rng.randrange(8), eta, rng.randrange(6),
                rng.uniform(0, 1e4), wi, wm)
        wa, sa = tel.reference_window(*args)
        wb, sb = window(*args)
        assert (_f64(wa), sa) == (_f64(wb), sb), args
        line = rng.choice(rates[:5])
        scale = rng.choice([1.0, 1.25, rng.uniform(1, 2)])
        ww = rng.choice([wi, line * T / 8e12, rng.uniform(0, 2 * line * T / 8e12)])
        (wa, ra), (wb, rb) = tel.window_and_rate(ww, scale, T, line), limits(ww, scale, T, line)
        assert _f64(wa) == _f64(wb) and _f64(float(ra)) == _f64(rb) and (type(ra) is int) == (rb == line)
        wire = rng.choice([1, 86, 4178, 9082, rng.randrange(1, 1 << 20)])
        r = rng.choice([float(line) * rng.random(), 1e8, float(rng.randrange(1, line))])
        if r > 0:
            assert core.pacing_gap_ps(wire, r) == nic_mod.pacing_gap_ps(wire, r)


# ---------------------------------------------------------------------- with ACK coalescing
#: telemetry (and INT without a controller) with coalesced ACKs (``receiver.ack_every > 1``): a
#: coalesced ACK echoes ``r_tel``, the INT of the latest-sent unit it covers (Receiver.ack), a D-SACK
#: its duplicate's, an ACK naming an overtaken unit that unit's (send_now); the controller reacts once
#: per ACK with the bitmap's units among the bytes newly acknowledged and ``t - r_tack`` as its RTT
COALESCED = {
    # ddp under spraying over lossy switches: held units, SACK bitmaps shorter than the window
    "ddp-lossy-spray": lambda: _incast(routing={"policy": "spray"}, receiver={"ack_every": 8, "sack_bitmap": 16}),
    # D-SACKs and timeout probes (adaptive timeouts and the wait allowance) under drops
    "ddp-lossy-adaptive-dsacks": lambda: _incast(routing={"policy": "spray"},
                                                 receiver={"ack_every": 8, "rto_mode": "adaptive", "rto_min": "2us",
                                                           "reorder_window": "300ns"}),
    # a tight reorder window: late units acknowledged at once by name, with their own INT
    "ddp-lossy-late-units-by-name": lambda: _perm(routing={"policy": "spray"},
                                                  receiver={"ack_every": 4, "reorder_window": "100ns"}),
    # go-back-N: NAKs (the trigger's INT) and coalesced ACKs
    "gbn-lossy-naks": lambda: _incast(routing={"policy": "spray"},
                                      receiver={"model": "go_back_n", "ack_every": 8, "rto_low": "8us",
                                                "rto_high": "12us"}),
    # PFC: the Spectrum-X profile with coalescing, and go-back-N at ack_every 64 (the ethernet
    # profile's transport) under the telemetry controller
    "ddp-pfc-spectrum-x": lambda: {**_incast(routing={"policy": "adaptive"}, switch={}, receiver={"ack_every": 16}),
                                   "profile": "spectrum_x", "congestion_control": "telemetry"},
    "gbn-pfc-ack-every-64": lambda: _incast(routing={"policy": "ecmp"}, receiver={"model": "go_back_n", "ack_every": 64},
                                            switch={"ecn": {"enabled": True, "kmin": "8KB", "kmax": "24KB"},
                                                    "pfc": {"enabled": True}}),
    # INT with no controller: the stacks are echoed all the same
    "int-without-cc-ddp-lossy": lambda: _incast(congestion_control={"algorithm": "none"}, routing={"policy": "spray"},
                                                switch={"ecn": {"enabled": True, "kmin": "8KB", "kmax": "24KB"},
                                                        "telemetry": "on"},
                                                receiver={"ack_every": 4}),
    "int-without-cc-gbn-pfc": lambda: _incast(congestion_control={"algorithm": "none"}, routing={"policy": "adaptive"},
                                              switch={"ecn": {"enabled": True, "kmin": "8KB", "kmax": "24KB"},
                                                      "telemetry": "on", "pfc": {"enabled": True}},
                                              receiver={"model": "go_back_n", "ack_every": 8}),
    # cut mid-flight: r_tel held by receivers, coalesced ACKs with bitmaps and INT in flight, written back
    "time-limit-cut-telemetry": lambda: {**_incast(simulation={"time_limit": "15us"}, receiver={"ack_every": 8}),
                                         "profile": "spectrum_x", "routing": {"policy": "spray"}},
    "time-limit-cut-int-without-cc": lambda: _incast(congestion_control={"algorithm": "none"},
                                                     routing={"policy": "spray"}, simulation={"time_limit": "12us"},
                                                     switch={"ecn": {"enabled": True, "kmin": "8KB", "kmax": "24KB"},
                                                             "telemetry": "on"},
                                                     receiver={"ack_every": 8, "ack_delay": "5us"}),
}


def _in_flight(eng):
    """Every packet in the network at the end (PacketEngine.in_flight), control packets with their
    SACK bitmap, D-SACK, echoed send time and INT stack."""
    return [(p.kind, p.qp.uid, p.seq, p.wire, p.ce, p.t_data, p.tel,
             p.sacks if p.kind else None, p.dsack if p.kind else None) for p in eng.in_flight()]


@pytest.mark.parametrize("case", list(COALESCED))
def test_telemetry_with_coalesced_acks_runs_compiled_with_the_heap_kernels_results(case):
    sc = COALESCED[case]()
    ea, a = _engine(sc, "heap")
    eb, b = _engine(sc, "compiled")
    _same_results(a, b)
    assert _cc_state(ea) == _cc_state(eb)                          # every flow's final CC state, bit for bit
    qa = [(qp.r_tack, qp.r_tsent, qp.r_unacked, qp.r_tel) for st in ea._rows for qp in st.qps]
    qb = [(qp.r_tack, qp.r_tsent, qp.r_unacked, qp.r_tel) for st in eb._rows for qp in st.qps]
    assert qa == qb                                                # the receivers' coalescing state, r_tel
    assert _in_flight(ea) == _in_flight(eb)
    # ... and each case reaches what it is for: ACKs were coalesced (fewer control packets than data
    # units received), the stacks were stamped and echoed
    run, m = a.summary["run"], a.messages
    assert a.summary["conservation"]["control"]["sent_packets"] < m["received_packets"].sum()
    cc = sc.get("congestion_control", {"algorithm": "telemetry"})
    if (cc if isinstance(cc, str) else cc["algorithm"]) == "telemetry":
        states = [qp.flow.state for st in ea._rows for qp in st.qps]
        assert any(s.ports for s in states)                                   # INT was measured
        assert any(qp.next_ok > 0 for st in ea._rows for qp in st.qps)        # ... and paced the flows
        assert any(s.last_update_seq > 0 for s in states)                    # ... and moved its reference
    if case in ("ddp-lossy-spray", "ddp-lossy-adaptive-dsacks", "gbn-lossy-naks"):
        assert run["dropped_packets"] > 0
    if case == "ddp-lossy-adaptive-dsacks":
        assert run["dsacks_received"] > 0
    if case == "ddp-lossy-late-units-by-name":
        assert m["out_of_order_fraction"].max() > 0
    if case == "gbn-lossy-naks":
        assert m["naks"].sum() > 0
    if case in ("ddp-pfc-spectrum-x", "gbn-pfc-ack-every-64", "int-without-cc-gbn-pfc"):
        assert run["dropped_packets"] == 0
    if case.startswith("time-limit-cut"):
        assert a.summary["status"] == "time_limit"
        acks = [p for p in ea.in_flight() if p.kind and p.sacks is not None]   # coalesced ACKs in flight
        assert acks and any(p.tel for p in acks)
        assert any(qp.r_tel for st in ea._rows for qp in st.qps)              # stacks held for the next ACK
