"""DCQCN on the compiled packet core (docs/compiled-core.md 4.5, slice 5): ``dcqcn`` (the paper's
reaction point) and ``dcqcn_cx`` (the ConnectX firmware's, which the ``ethernet`` profile uses),
bit-identical to ``heap``.

What the algorithms bring is compiled with them: the receiver's CNPs (one per queue pair per CNP
interval, ``Receiver._marked``), CNPs on the wire in the strict-priority class (the lane of a lossy
port, ``Switch.priority``; the strict FIFO of a lossless one, ``LosslessPort.cq``), and with
``switch.strict_priority: control`` ACKs and NAKs in it too, the sender's ``on_cnp``, the byte
counter (``on_send``), the alpha, rate-increase and rate-cut-check timers with their generations,
and the NIC's pacing at the algorithm's rate.

Every case compares the output tables and the event count, every queue pair's final congestion
state float for float (``DcqcnState`` / ``DcqcnCxState``, the flow's rate and its type, the pacing
time, the receiver's last CNP) and every port's strict-priority state, and asserts that what it is
for happened on heap (counted by wrapping the Python model's methods): CNPs sent and received,
rates cut, the timers fired and rates recovered. The matrix covers both algorithms, lossy and PFC
switches, ``ddp`` and ``go_back_n``, one ACK per unit and coalesced ACKs; ``COMBOS`` runs both
algorithms with the cluster features (several NIC ports per packet and per flow, NVL36 racks and HGX
nodes with NVLink beside the NIC planes, PXN; merge of ``dcqcn`` into main), and the ``ethernet``
profile runs on a multi-plane cluster. The float arithmetic the
core compiles from fabricsim/cc/dcqcn.py and dcqcn_cx.py is checked against CPython on 10^5 random
inputs per function.
"""
from __future__ import annotations

import collections
import itertools
import random
import struct

import pandas as pd
import pytest

import fabricsim
from fabricsim.cc import dcqcn as dcqcn_mod
from fabricsim.cc import dcqcn_cx as cx_mod
from fabricsim.cc.dcqcn import Dcqcn
from fabricsim.cc.dcqcn_cx import DcqcnConnectX
from fabricsim.engine.packet import PacketEngine
from fabricsim.net.lossless import LosslessPort
from fabricsim.net.nic import Nic
from fabricsim.net.switch import Switch

from test_compiled_core import _PLANES_INCAST, _RACKS, _both_kernels, _collect_engines, _planes, _pxn, _two_racks
from test_kernel_equivalence import FABRIC, _comparable

pytest.importorskip("numba")
from fabricsim.engine.compiled import core  # noqa: E402  (numba present)

#: six senders into host 0, of 64 KiB to 4 MiB (the big ones run on alone and recover), and a second
#: wave of four at 100-130 us (cuts after a recovery: dcqcn's parked alpha timer catches up)
MESSAGES = ("src,dst,size,start\n"
            + "".join(f"{i},0,{s},0us\n" for i, s in zip(range(1, 7), ("64KiB", "128KiB", "256KiB", "512KiB",
                                                                         "1MiB", "4MiB")))
            + "".join(f"{i},0,256KiB,{s}\n" for i, s in zip(range(1, 5), ("100us", "110us", "120us", "130us"))))
#: short timers, so that the cuts and recoveries happen within these small runs
PARAMS = {"dcqcn": {"cnp_interval": "4us", "alpha_timer": "10us", "rate_increase_timer": "5us",
                    "byte_counter": "64KB"},
          "dcqcn_cx": {"min_time_between_cnps": "4us", "rpg_time_reset": "5us", "rpg_byte_reset": "16KB",
                       "rpg_ai_rate": "5Gbps", "rpg_hai_rate": "20Gbps"}}


@pytest.fixture(scope="module")
def messages(tmp_path_factory):
    path = tmp_path_factory.mktemp("dcqcn") / "incast.csv"
    path.write_text(MESSAGES)
    return str(path)


def _scenario(path, cc, lossless, model="ddp", ack_every=1, routing="ecmp", **over):
    """The incast of MESSAGES with ``cc``; ``over``: sections merged into (``traffic`` and ``topology``
    replaced)."""
    sc = {"name": "dcqcn", "topology": {**FABRIC, "buffer": {"mode": "per_port", "size": "256KiB"}},
          "traffic": {"pattern": "csv", "path": path}, "routing": {"policy": routing},
          "receiver": {"model": model, "ack_every": ack_every},
          "congestion_control": {"algorithm": cc, **PARAMS[cc]},
          "switch": {"ecn": {"enabled": True, "kmin": "10KB", "kmax": "60KB"}, "pfc": {"enabled": lossless}},
          "simulation": {"seed": 1, "time_limit": "5ms"}, "outputs": {"link_sample_interval": "off"}}
    for k, v in over.items():
        sc[k] = {**sc[k], **v} if isinstance(v, dict) and k not in ("traffic", "topology") else v
    return sc


# the matrix: both algorithms, lossy and PFC switches, ddp and go-back-N, one ACK per unit or every 8th;
# go-back-N under PFC sprays (reordering: NAKs and rewinds, with nothing dropped)
MATRIX = {f"{cc}-{'pfc' if pfc else 'lossy'}-{rcv}-ack{ae}": (cc, pfc, rcv, ae)
          for cc, pfc, rcv, ae in itertools.product(("dcqcn", "dcqcn_cx"), (False, True), ("ddp", "go_back_n"),
                                                    (1, 8))}

EXTRA = {
    # every parameter branch of dcqcn: no clamp (Rt kept unless an increase happened), one fast-recovery
    # step and a small byte counter (hyper increases), explicit steps, a high floor (cuts stop at it)
    "dcqcn-parameters": lambda p: _scenario(p, "dcqcn", False, congestion_control={
        "clamp_target_rate": False, "fast_recovery_steps": 1, "byte_counter": "8KB", "rate_ai": "2Gbps",
        "rate_hai": "10Gbps", "min_rate": "150Gbps", "g": 0.0625, "initial_alpha": 0.5}),
    # dcqcn_cx's: a rate set at the first CNP, a maximum rate below line, Rt clamped at every cut, a
    # gentler cut (rpg_gd 12, at most 20 % of Rc), another alpha gain and period, a small byte counter
    # and a short increase timer (hyper increases); and no byte counter at all (rpg_byte_reset 0)
    "dcqcn_cx-parameters": lambda p: _scenario(p, "dcqcn_cx", False, congestion_control={
        "rate_to_set_on_first_cnp": "300Gbps", "rpg_max_rate": "350Gbps", "clamp_tgt_rate": True,
        "rpg_byte_reset": "4KB", "rpg_gd": 12, "rpg_min_dec_fac": 80, "dce_tcp_g": 1000, "dce_tcp_rtt": "2us",
        "rate_reduce_monitor_period": "6us", "rpg_threshold": 1, "rpg_time_reset": "2us",
        "initial_alpha_value": 512}),
    "dcqcn_cx-no-byte-counter": lambda p: _scenario(p, "dcqcn_cx", False, congestion_control={
        "rpg_byte_reset": "0B", "rpg_time_reset": "1us", "rpg_hai_rate": "50Gbps",
        "clamp_tgt_rate_after_time_inc": False}),
    # ACK and NAK in the strict-priority class too (switch.strict_priority: control): lanes of lossy
    # ports, the strict FIFO of lossless ones; and none (CNPs queue with the data, and may be dropped)
    "strict-control-lossy-gbn": lambda p: _scenario(p, "dcqcn", False, "go_back_n", routing="spray",
                                                    switch={"strict_priority": "control"}),
    "strict-control-pfc-coalesced": lambda p: _scenario(p, "dcqcn_cx", True, "go_back_n", 8, routing="spray",
                                                        switch={"strict_priority": "control"}),
    "strict-none-lossy": lambda p: _scenario(p, "dcqcn_cx", False, topology={**FABRIC, "buffer": {
        "mode": "per_port", "size": "64KiB"}}, switch={"strict_priority": "none"}),
    # ECN sampled at enqueue, adaptive routing, adaptive timeouts
    "enqueue-adaptive": lambda p: _scenario(p, "dcqcn", False, routing="adaptive", receiver={
        "rto_mode": "adaptive", "rto_min": "20us"}, switch={"ecn": {"enabled": True, "kmin": "10KB", "kmax": "60KB",
                                                 "sample": "enqueue"}}),
    # cut mid-flight: CNPs and ACKs on lanes and in strict FIFOs (an all-to-all, where ACKs wait behind
    # data), pending timers, written back
    "time-limit-cut-lossy": lambda p: _scenario(p, "dcqcn", False, simulation={"time_limit": "40us"},
                                                switch={"strict_priority": "control"}),
    "time-limit-cut-pfc": lambda p: _scenario(p, "dcqcn_cx", True, simulation={"time_limit": "15us"},
                                              switch={"strict_priority": "control"},
                                              traffic={"pattern": "all_to_all", "message_size": "256KiB"}),
}


@pytest.fixture
def watch(monkeypatch):
    """Count what the Python model does on heap (a compiled run calls none of it but ``start``) and
    keep every engine built: ``(counts, engines)``."""
    counts: collections.Counter = collections.Counter()
    engines: list = []

    def count(cls, name, key):
        orig = getattr(cls, name)

        def f(self, *a):
            counts[key] += 1
            return orig(self, *a)
        monkeypatch.setattr(cls, name, f)

    def recoveries(cls, key):
        orig = cls._increase

        def f(self, flow, s, *a):
            was = s.inc_running
            orig(self, flow, s, *a)
            if was and not s.inc_running:
                counts[key] += 1               # back at line (or the maximum) rate
        monkeypatch.setattr(cls, "_increase", f)

    for cls, k in ((Dcqcn, "dcqcn"), (DcqcnConnectX, "dcqcn_cx")):
        count(cls, "on_cnp", f"{k}.on_cnp")
        count(cls, "_increase_timer", f"{k}.increase_timer")
        recoveries(cls, f"{k}.recovered")
    count(Dcqcn, "_alpha_timer", "dcqcn.alpha_timer")
    count(DcqcnConnectX, "_rate_check", "dcqcn_cx.rate_check")

    def shared(mod, name, key, test):
        orig = getattr(mod, name)

        def f(*a):
            r = orig(*a)
            if test(a, r):
                counts[key] += 1
            return r
        monkeypatch.setattr(mod, name, f)

    shared(dcqcn_mod, "alpha_catch_up", "dcqcn.alpha_catch_up", lambda a, r: True)
    shared(dcqcn_mod, "rate_cut", "dcqcn.floor", lambda a, r: r[0] == a[3])
    shared(dcqcn_mod, "rate_increase", "dcqcn.hyper", lambda a, r: min(a[2], a[3]) >= a[4])
    shared(cx_mod, "rate_increase", "dcqcn_cx.hyper", lambda a, r: min(a[2], a[3]) > a[4])
    shared(cx_mod, "first_rate", "dcqcn_cx.first_rate", lambda a, r: True)
    orig_prio = Switch.priority

    def priority(self, t, port, pkt):
        counts[f"lane.{pkt.kind}"] += 1
        return orig_prio(self, t, port, pkt)
    monkeypatch.setattr(Switch, "priority", priority)
    orig_enq = LosslessPort.enqueue

    def enqueue(self, t, pkt, strict=None):
        if strict:
            counts[f"cq.{pkt.kind}"] += 1
        return orig_enq(self, t, pkt, strict)
    monkeypatch.setattr(LosslessPort, "enqueue", enqueue)
    orig_ctrl = Nic.send_ctrl

    def send_ctrl(self, t, pkt):
        if pkt.kind == 3:
            counts[f"cnp_nic.{self.host}.{self.port.index}"] += 1      # the port a CNP left by
        return orig_ctrl(self, t, pkt)
    monkeypatch.setattr(Nic, "send_ctrl", send_ctrl)
    _collect_engines(monkeypatch, engines)
    return counts, engines


def _bits(v):
    """A value with every float as its bits (and its type: an int rate is not a float one)."""
    if isinstance(v, float):
        return ("f", struct.pack("<d", v))
    if isinstance(v, (list, tuple)):
        return [_bits(x) for x in v]
    if isinstance(v, dict):
        return {k: _bits(x) for k, x in v.items()}
    return v


def _cc_state(eng):
    """Every queue pair's congestion state: the flow's rate (and its type), window and pacing time, the
    algorithm's state object slot by slot, and the receiver's last CNP."""
    out = []
    for st in list(eng._rows) + list(eng.pieces):         # (PXN pieces' queue pairs too)
        for qp in st.qps:
            f = qp.flow
            row = {"rate": f.rate_bps, "rate_type": type(f.rate_bps).__name__, "win": f.window_bytes,
                   "next_ok": qp.next_ok, "r_last_cnp": qp.r_last_cnp, "active": f.active}
            s = f.state
            if s is None:                                  # an NVLink queue pair: no controller
                row["state"] = None
            else:
                row.update({k: getattr(s, k) for k in type(s).__slots__})
            out.append(_bits(row))
    return out


def _ports(eng):
    """Every port's strict-priority state and the counters around it."""
    return [(p.busy_until, p.prio_bytes, p.ctrl_bytes, p.lane.busy_until,
             [e[:2] for e in p.lane.inflight]) for p in eng.ports]


def _in_flight(eng):
    """Every packet in the network at the end, and where: a port (its index) or a port's lane."""
    lanes = {id(p.lane): p.index for p in eng.ports}

    def where(h):
        return None if h is None else ("lane", lanes[id(h)]) if id(h) in lanes else h.index
    return [(p.kind, p.qp.uid, p.seq, p.wire, p.ce, p.t_data, where(p.hop), p.sacks if p.kind else None)
            for p in eng.in_flight()]


def _check(sc, counts, engines):
    """Run ``sc`` on both kernels, compare everything (:func:`test_compiled_core._both_kernels`: with
    every flow's final CC state bit for bit, the ports, the packets in flight and each message's CNPs
    sent); the heap run's result, engine and counts."""
    return _both_kernels(sc, counts, engines, _cc_state, _ports, _in_flight, _cnps_sent)


def _cnps_sent(eng):
    return [st.cnps_sent for st in list(eng._rows) + list(eng.pieces)]


def _fired(a, ea, seen, cc):
    """CNPs were sent and reached their senders, rates were cut, the timers fired, rates recovered."""
    assert sum(st.cnps_sent for st in ea._rows) > 0 and a.messages["cnps"].sum() > 0
    assert seen[f"{cc}.on_cnp"] > 0 and seen[f"{cc}.increase_timer"] > 0 and seen[f"{cc}.recovered"] > 0
    states = [qp.flow.state for st in ea._rows for qp in st.qps]
    if cc == "dcqcn":
        assert seen["dcqcn.alpha_timer"] > 0 and sum(s.cnps for s in states) > 0
    else:
        assert seen["dcqcn_cx.rate_check"] > 0 and sum(s.cuts for s in states) > 0   # (its cuts happen there)


@pytest.mark.parametrize("case", list(MATRIX))
def test_dcqcn_runs_compiled_with_the_heap_kernels_results(case, messages, watch):
    cc, pfc, rcv, ae = MATRIX[case]
    routing = "spray" if pfc and rcv == "go_back_n" else "ecmp"
    a, ea, seen = _check(_scenario(messages, cc, pfc, rcv, ae, routing), *watch)
    _fired(a, ea, seen, cc)
    assert seen["lane.3" if not pfc else "cq.3"] > 0                  # CNPs in the strict-priority class
    run = a.summary["run"]
    if pfc:
        assert run["dropped_packets"] == 0
    else:
        assert run["dropped_packets"] > 0
    if rcv == "go_back_n" and (pfc or ae == 1):
        assert a.messages["naks"].sum() > 0
    if ae > 1:
        assert a.summary["conservation"]["control"]["sent_packets"] < a.messages["received_packets"].sum()
    if case == "dcqcn-lossy-ddp-ack1":
        assert seen["dcqcn.alpha_catch_up"] > 0         # a parked alpha timer caught up at a later cut


@pytest.mark.parametrize("case", list(EXTRA))
def test_dcqcn_extra_cases_run_compiled_with_the_heap_kernels_results(case, messages, watch):
    sc = EXTRA[case](messages)
    a, ea, seen = _check(sc, *watch)
    cc = sc["congestion_control"]["algorithm"]
    assert a.messages["cnps"].sum() > 0 and seen[f"{cc}.on_cnp"] > 0
    if not case.startswith("time-limit"):
        _fired(a, ea, seen, cc)
    if case == "dcqcn-parameters":
        assert seen["dcqcn.hyper"] > 0 and seen["dcqcn.floor"] > 0
    if case == "dcqcn_cx-parameters":
        assert seen["dcqcn_cx.first_rate"] > 0 and seen["dcqcn_cx.hyper"] > 0
        assert all(qp.flow.state.max_rate == 350e9 for st in ea._rows for qp in st.qps)
    if case == "dcqcn_cx-no-byte-counter":
        assert all(qp.flow.state.b_stage == 0 for st in ea._rows for qp in st.qps)
    if case == "strict-control-lossy-gbn":
        assert seen["lane.1"] > 0 and seen["lane.2"] > 0                      # ACKs and NAKs on the lanes
    if case == "strict-control-pfc-coalesced":
        assert seen["cq.1"] > 0 and seen["cq.2"] > 0 and seen["cq.3"] > 0
    if case == "strict-none-lossy":
        assert not any(k.startswith(("lane", "cq")) for k in seen) and a.summary["run"]["dropped_packets"] > 0
    if case.startswith("time-limit"):
        assert a.summary["status"] == "time_limit"
        flying = [p for p in ea.in_flight() if p.kind]
        assert flying
        if case.endswith("lossy"):
            assert any(p.hop is port.lane for port in ea.ports for p in flying)          # on a lane
        else:
            assert any(port.cq for port in ea.ports if isinstance(port, LosslessPort))  # in a strict FIFO
        assert any(qp.r_last_cnp is not None for st in ea._rows for qp in st.qps)


@pytest.mark.parametrize("shipped, over", [("scenarios/quickstart.yaml", ["profile=ethernet"]),
                                           ("scenarios/incast_dcqcn.yaml", [])])
def test_the_shipped_dcqcn_scenarios_run_compiled_with_identical_results(shipped, over):
    """``fabricsim run scenarios/quickstart.yaml --set profile=ethernet --set simulation.kernel=compiled``
    (dcqcn_cx, go-back-N with ACK coalescing, PFC, ECMP) and scenarios/incast_dcqcn.yaml (dcqcn)."""
    a = fabricsim.run(shipped, overrides=over)
    b = fabricsim.run(shipped, overrides=over + ["simulation.kernel=compiled"])
    assert b.summary["run"]["kernel"] == {"requested": "compiled", "ran": "compiled"}
    assert not [w for w in b.summary.get("warnings", []) if w.startswith("kernel: ")]
    for table in ("messages", "links", "latency", "goodput", "link_timeseries", "nics"):
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table))
    assert _comparable(a.summary) == _comparable(b.summary)
    assert a.summary["run"]["events"] == b.summary["run"]["events"]
    assert a.messages["cnps"].sum() > 0


#: ECN from 4 KB queued, marking every packet beyond 16 KB: these cluster runs send CNPs
_MARK = {"ecn": {"enabled": True, "kmin": "4KB", "kmax": "16KB", "pmax": 1.0}}
#: an incast over the planes long enough for the cut rates to pace what is left (1 MiB per sender, 2 queue
#: pairs each, into 32 KiB buffers)
_INCAST = {**_PLANES_INCAST, "traffic": {**_PLANES_INCAST["traffic"], "message_size": "1MiB"}, "switch": _MARK}
_DC = {"algorithm": "dcqcn", **PARAMS["dcqcn"]}
_CX = {"algorithm": "dcqcn_cx", **PARAMS["dcqcn_cx"]}


def _hgx_mixed(tmp_path):
    """2 HGX nodes with 2 NIC planes: every GPU of node 1 sends 2 MiB to GPU 0 (RoCE over the planes,
    an incast) and every GPU of node 0 but GPU 0 sends 256 KiB to GPU 0 (NVLink, credit)."""
    path = tmp_path / "hgx_mixed.csv"
    path.write_text("src,dst,size_bytes\n" + "".join(f"{i},0,{2**21}\n" for i in range(8, 16))
                    + "".join(f"{i},0,{2**18}\n" for i in range(1, 8)))
    return {"pattern": "csv", "path": str(path)}


#: DCQCN with the cluster features (several NIC ports, NVLink with credit flow control, PXN; merge of
#: ``dcqcn`` into main): CNPs leave by reply_nic's port, the rate paces a queue pair over all its ports,
#: NVLink queue pairs have no controller (their chips never mark), PXN pieces are reaction points
COMBOS = {
    # 2 planes per packet, a lossy incast: CNPs spread over the receiver's ports, each queue pair's rate
    # cut and paced over both of its ports
    "dcqcn-planes-per-packet": lambda tmp: _planes(**_INCAST, congestion_control=_DC),
    # ... with ACK and NAK in the strict class too and coalesced ACKs (lanes of the planes' switches)
    "dcqcn_cx-planes-per-packet-strict-control-coalesced": lambda tmp: _planes(
        **{**_INCAST, "switch": {**_MARK, "strict_priority": "control"}}, congestion_control=_CX,
        receiver={"ack_every": 8, "ack_delay": "2us"}),
    # 4 planes per flow under PFC: CNPs, ACKs and NAKs in the strict FIFOs of lossless plane switches
    "dcqcn_cx-planes-4-per-flow-pfc-strict-control": lambda tmp: _planes(
        ports=4, split="per_flow", **{**_INCAST, "switch": {**_MARK, "pfc": {"enabled": True},
                                                                   "strict_priority": "control"}},
        congestion_control=_CX, receiver={"model": "go_back_n"}),
    # 2 NVL36 racks with 2 NIC planes: RoCE between the racks under dcqcn, NVLink inside them
    "dcqcn-nvl36-racks": lambda tmp: {
        "name": "dcqcn_racks", "topology": {**_RACKS, "switch": {"buffer": {"size": "64KiB"}}},
        "traffic": _two_racks(tmp), "routing": {"policy": "spray"}, "congestion_control": _DC,
        "switch": _MARK, "simulation": {"seed": 3}, "outputs": {"link_sample_interval": "off"}},
    # 2 HGX nodes: an incast into GPU 0 from the other node (RoCE, dcqcn_cx) and from its own (NVLink)
    "dcqcn_cx-hgx-nvlink-pfc": lambda tmp: _planes(topology={"domain": "hgx8"}, traffic=_hgx_mixed(tmp),
                                                   congestion_control=_CX,
                                                   switch={**_MARK, "pfc": {"enabled": True}}),
    # PXN: a relayed incast from 30 GPUs of one NVL36 rack into GPU 40 of the other
    "dcqcn-pxn-incast": lambda tmp: _pxn(traffic={"pattern": "incast", "senders": 30, "receiver": 40,
                                                  "message_size": "256KiB"},
                                         topology={**_RACKS, "nodes": None, "switch": {"buffer": {"size": "64KiB"}}},
                                         chunk="64KiB", congestion_control=_DC, switch=_MARK),
    "dcqcn_cx-pxn-incast-pfc-coalesced": lambda tmp: _pxn(
        traffic={"pattern": "incast", "senders": 30, "receiver": 40, "message_size": "256KiB"},
        topology={**_RACKS, "nodes": None}, chunk="20KiB", congestion_control=_CX,
        switch={**_MARK, "pfc": {"enabled": True}}, receiver={"ack_every": 8}),
}


@pytest.mark.parametrize("case", list(COMBOS))
def test_dcqcn_with_the_cluster_features_runs_compiled_identically(case, tmp_path, watch):
    sc = COMBOS[case](tmp_path)
    a, ea, seen = _check(sc, *watch)
    cc = sc["congestion_control"]["algorithm"]
    states = list(ea._rows) + list(ea.pieces)
    qps = [qp for st in states for qp in st.qps]
    roce = [qp for qp in qps if not qp.nics[0].nvlink]
    nvl = [qp for qp in qps if qp.nics[0].nvlink]
    assert any(len(nics) > 1 for nics in ea.nics.values())                     # hosts with several ports
    # CNPs sent, received and reacted to; rates cut (and paced: a queue pair's next_ok moved)
    assert sum(st.cnps_sent for st in states) > 0 and seen[f"{cc}.on_cnp"] > 0
    cut = [qp for qp in roce if (qp.flow.state.cnps if cc == "dcqcn" else qp.flow.state.cuts)]
    assert cut and any(qp.next_ok > 0 for qp in cut)
    assert seen["lane.3" if "pfc" not in case else "cq.3"] > 0               # CNPs in the strict class
    if "per-packet" in case:
        # a queue pair over two ports had its rate cut, and one receiving host sent CNPs by two ports
        assert any(len(qp.nics) == 2 for qp in cut)
        by_host = collections.Counter(k.split(".")[1] for k in seen if k.startswith("cnp_nic."))
        assert max(by_host.values()) >= 2
    if "strict-control" in case:
        assert seen["lane.1" if "pfc" not in case else "cq.1"] > 0            # ACKs in the strict class
    if "4-per-flow" in case:
        assert max(len(qp.nics) for qp in qps) == 1 and a.messages["naks"].sum() >= 0
    if "pfc" in case:
        assert a.summary["run"]["dropped_packets"] == 0
    if nvl:
        # NVLink queue pairs: no controller, never paced, no CNP (their chips never mark)
        assert all(qp.flow.state is None and qp.flow.rate_bps == qp.flow.line_bps and not qp.next_ok
                   and qp.r_last_cnp is None for qp in nvl)
    if "nvl36" in case or "hgx" in case or "pxn" in case:
        assert nvl and roce
    if "pxn" in case:
        assert ea.pieces and any(not p.final for p in ea.pieces)
        assert sum(p.cnps_sent for p in ea.pieces) > 0                       # pieces' receivers sent CNPs
        assert any(qp.flow.state is not None and qp.r_last_cnp is not None for p in ea.pieces for qp in p.qps)


def test_the_ethernet_profile_runs_compiled_on_a_multi_plane_cluster(watch):
    """The ``ethernet`` profile (dcqcn_cx with its DOCA defaults, go-back-N with ack_every 64, PFC, CNPs
    in the strict class, ECMP) on a cluster of 2 nodes with 2 NIC planes per GPU, an incast."""
    sc = {**_planes(traffic={"pattern": "incast", "senders": 10, "receiver": 0, "message_size": "1MiB",
                             "qps_per_message": 2}, routing={"policy": "ecmp"}), "profile": "ethernet"}
    a, ea, seen = _check(sc, *watch)
    assert ea.sim.scenario.congestion_control.name == "dcqcn_cx" and ea.pfc is not None
    assert ea.receiver.ack_every == 64 and not ea.receiver.selective
    assert any(len(qp.nics) == 2 for st in ea._rows for qp in st.qps)
    assert a.messages["cnps"].sum() > 0 and seen["cq.3"] > 0 and seen["dcqcn_cx.rate_check"] > 0
    assert a.summary["run"]["dropped_packets"] == 0


def test_dcqcn_timer_spans_beyond_int64_fall_back(messages):
    """Coverage: a DCQCN timer set past 2^62 ps (the time limit plus its longest period) runs on heap
    and says why."""
    sc = _scenario(messages, "dcqcn", False, congestion_control={"alpha_timer": "5000000s"})
    info = fabricsim.run(sc, overrides=["simulation.kernel=compiled"]).summary["run"]["kernel"]
    assert info["ran"] == "heap" and "congestion_control: dcqcn with simulation.time_limit" in info["fallback"], info


def _f64(x):
    return struct.pack("<d", x)


def test_the_compiled_dcqcn_arithmetic_is_the_algorithms_own():
    """Every function of cc/dcqcn.py and cc/dcqcn_cx.py's shared arithmetic, compiled by numba from its
    source, gives the same bits as CPython on 10^5 random inputs each, edge values included (alpha
    catch-ups over 0 to 2^62 periods, cuts at and around the floor, increases at the line rate and
    within the recovery tolerance, every stage branch, alpha at 0 and 1023, every gain)."""
    from numba import njit

    @njit(_nrt=False)
    def dc_cut(rc, rt, alpha, mn, decay, g, clamp):
        return core.dc_rate_cut(rc, rt, alpha, mn, decay, g, clamp)

    @njit(_nrt=False)
    def dc_inc(rc, rt, tc, bc, f, rai, rhai, line):
        return core.dc_rate_increase(rc, rt, tc, bc, f, rai, rhai, line)

    @njit(_nrt=False)
    def cx_inc(rc, rt, ts, bs, f, ai, hai, top):
        return core.cx_rate_increase(rc, rt, ts, bs, f, ai, hai, top)

    rng = random.Random(7)
    lines = [400e9, 100e9, 333e9, 800e9, 8e12, 1e6]
    tol = dcqcn_mod.RECOVERED_TOLERANCE
    for i in range(100_000):
        line = rng.choice(lines)
        # dcqcn: the parked alpha timer's catch-up
        alpha = rng.choice([1.0, 0.5, 0.0, rng.random(), 5e-324])
        g = rng.choice([1 / 256, 0.0625, 1.0, rng.random()])
        decay = 1.0 - g
        n = rng.choice([0, 1, 2, rng.randrange(1000), rng.randrange(1 << 62)])
        assert _f64(core.dc_alpha_catch_up(alpha, decay, n)) == _f64(dcqcn_mod.alpha_catch_up(alpha, decay, n))
        # dcqcn: the cut
        rc = rng.choice([line, line * rng.random(), rng.uniform(1e8, line)])
        rt = rng.choice([line, rc, rng.uniform(rc, line)])
        mn = rng.choice([1e8, line, rc, rc * (1 - alpha / 2), rng.uniform(0, line)])
        args = (rc, rt, alpha, mn, decay, g, bool(i & 1))
        assert [_f64(v) for v in dc_cut(*args)] == [_f64(v) for v in dcqcn_mod.rate_cut(*args)], args
        # dcqcn: an increase
        f = rng.choice([1, 5, rng.randrange(1, 20)])
        tc, bc = rng.randrange(3 * f), rng.randrange(3 * f)
        rc = rng.choice([line, line * (1 - tol), line * (1 - tol) * (1 - 1e-16), line * rng.random()])
        rt = rng.choice([line, rc, rng.uniform(rc, line), line - 1.0])
        rai, rhai = rng.choice([line / 1000, 4e7, rng.uniform(0, line)]), rng.choice([line / 200, 2e8, 0.0])
        args = (rc, rt, tc, bc, f, rai, rhai, line)
        want = dcqcn_mod.rate_increase(*args)
        got = dc_inc(*args)
        assert (_f64(got[0]), _f64(got[1]), got[2]) == (_f64(want[0]), _f64(want[1]), want[2]), args
        # dcqcn_cx: alpha over some periods (integers)
        gg = rng.choice([1019, 1023, 0, 1000, rng.randrange(1024)])
        a10 = rng.choice([0, 1, 1023, rng.randrange(1024)])
        periods = rng.choice([1, 2, 3, rng.randrange(1, 2000), rng.randrange(1, 1 << 62)])
        cnp = bool(i & 2)
        assert core.cx_alpha_periods(a10, cnp, gg, periods) == cx_mod.alpha_periods(a10, cnp, gg, periods)
        # dcqcn_cx: the first rate, the cut, an increase
        top = rng.choice([line, rng.uniform(1e6, line)])
        r = rng.choice([top, line, rng.uniform(1e6, 2 * line)])
        assert _f64(core.cx_first_rate(r, top)) == _f64(cx_mod.first_rate(r, top))
        shift = 1 << rng.randrange(10, 21)
        keep = rng.randrange(1, 101) / 100.0
        minr = rng.choice([1e6, top, rng.uniform(1e6, 2 * line)])
        rc = rng.choice([top, rng.uniform(1e6, top), minr])
        args = (rc, a10, shift, keep, minr, top)
        assert _f64(core.cx_rate_cut(*args)) == _f64(cx_mod.rate_cut(*args)), args
        ff = rng.choice([1, 2, rng.randrange(1, 10)])
        ts, bs = rng.randrange(3 * ff), rng.randrange(3 * ff)
        rc = rng.choice([top, top * (1 - tol), rng.uniform(1e6, top)])
        rt = rng.choice([top, rc, rng.uniform(rc, top)])
        ai, hai = rng.choice([5e6, rng.uniform(0, top)]), rng.choice([5e7, rng.uniform(0, top)])
        args = (rc, rt, ts, bs, ff, ai, hai, top)
        want = cx_mod.rate_increase(*args)
        got = cx_inc(*args)
        assert (_f64(got[0]), _f64(got[1]), got[2]) == (_f64(want[0]), _f64(want[1]), want[2]), args


def _built(sc):
    """``sc``'s packet engine, built on heap and not run, and its compiled state."""
    from fabricsim.analysis.recorder import Recorder
    from fabricsim.api import prepare
    from fabricsim.engine.compiled import state
    _loaded, sim = prepare(sc)
    s = sim.scenario
    eng = PacketEngine(sim, Recorder(s.outputs.latency_rel_error, s.outputs.timeseries_bin))
    return eng, state.build(eng, {})


def test_the_strict_lane_places_a_packet_as_switch_priority_does(messages):
    """``_priority`` against ``Switch.priority`` on one port, at random instants around the data
    packets on it: a data packet whose last bit leaves at ``t`` exactly is no longer on the wire, one
    leaving a ps later is; the lane's previous packet, an idle port, several packets queued."""
    from collections import deque

    from fabricsim.net.packet import CNP, Packet
    from fabricsim.net.port import PriorityLane

    eng, X0 = _built(_scenario(messages, "dcqcn", False))
    sw = next(iter(eng.switches.values()))
    port = sw.ports[0]
    i, off = port.index, port.offset
    qp = None                                           # (the packets' queue pair is not read)
    rng = random.Random(11)
    data = 4178
    ser = port.ser_ps(data)
    for trial in range(400):
        X = X0._replace(P=X0.P.copy(), K=X0.K.copy(), HP=X0.HP.copy(), g=X0.g.copy())
        t = 10**7 + rng.randrange(10**6)
        first_end = t + rng.choice([-2 * ser, -ser, -1, 0, 1, ser // 2, ser])
        n = rng.randrange(0, 4)
        ends = [first_end + k * ser for k in range(n)]
        bu = ends[-1] if n else t + rng.choice([-5, 0, 5])
        lbu = t + rng.choice([-ser, 0, 1, ser // 3, 2 * ser]) if rng.random() < 0.6 else 0
        # heap: the port's arrivals (entry times: last bit out + offset), its Lindley busy_until, its lane
        port.inflight = deque((e + off, k, port.deliver, Packet(qp, 0, data, 4096, k, 0, 1, port)) for k, e in
                              enumerate(ends))
        port.busy_until, port.peak_ps, port.tx_bytes, port.prio_bytes = bu, 0, 0, 0
        port.lane = PriorityLane()
        port.lane.busy_until = lbu
        cnp = Packet(qp, 0, 86, 0, 0, 0, 1, None, CNP)
        sw.priority(t, port, cnp)
        # compiled: the same arrivals through the packet pool
        X.P[i, core.P_BUSY], X.P[i, core.P_LBU] = bu, lbu
        for e in ends:
            core._enqueue_arrival(X, i, core._pkt(X, 0, 0, data, 4096, 0, 0, 1, i, core.DATA), e + off)
        c = core._pkt(X, 0, 0, 86, 0, 0, 0, 1, -1, core.CNP)
        core._priority(X, t, i, c)
        got = (X.P[i, core.P_BUSY], X.P[i, core.P_LBU], X.P[i, core.P_PEAK], X.P[i, core.P_PRIO], X.K[c, core.K_AT],
               X.K[c, core.K_LANE], X.P[i, core.P_LH] == c)
        want = (port.busy_until, port.lane.busy_until, port.peak_ps, port.prio_bytes, port.lane.inflight[-1][0],
                1, cnp.hop is port.lane)
        assert got == want, (trial, t, ends, bu, lbu)


def test_the_receiver_sends_a_cnp_as_receiver_marked_does(messages):
    """The notification point (``_arrived``) against ``Receiver._marked``: a marked unit arriving
    exactly ``cnp_interval`` after the last CNP sends one, a ps earlier it does not, the first mark
    always does; both algorithms' intervals."""
    from fabricsim.net.packet import Packet, QueuePair

    for cc in ("dcqcn", "dcqcn_cx"):
        eng, X = _built(_scenario(messages, cc, False))
        ci = eng.receiver.cnp_interval
        assert X.g[core.G_CNP_INT] == ci > 0
        st = eng._rows[0]
        qp = QueuePair(1, st, 1, 0, 0, 0, 1 << 20, 4096)
        qp.r_port = eng.nics[0][0]
        X.Q[0, core.Q_MSG], X.Q[0, core.Q_SRC], X.Q[0, core.Q_RPORT] = st.row, 1, 0
        t = 10**8
        for last in (None, t - ci, t - ci + 1, t - ci - 1, t, t - 1):
            qp.r_last_cnp, before = last, st.cnps_sent
            eng.receiver._marked(t, qp, st, 1)
            X.Q[0, core.Q_RLCNP] = core.ABSENT if last is None else last
            sent = X.M[st.row, core.M_CNPS_SENT]
            pkt = core._pkt(X, 0, 0, 4178, 4096, 0, t - 10**6, 1, -1, core.DATA)
            X.K[pkt, core.K_CE] = 1
            core._arrived(X, t, pkt)
            assert X.M[st.row, core.M_CNPS_SENT] - sent == st.cnps_sent - before, (cc, last)
            assert X.Q[0, core.Q_RLCNP] == (core.ABSENT if qp.r_last_cnp is None else qp.r_last_cnp)
        assert st.cnps_sent == 3                           # None, t - ci and t - ci - 1
