"""The flat state of the compiled core: a built :class:`~fabricsim.engine.packet.PacketEngine`
flattened into numpy arrays, grown when a pool runs low, and written back onto the Python
objects (docs/compiled-core.md, sections 1 and 4.4).

Everything lives in one namedtuple, :class:`State` (``_ARRAYS``: name -> dtype, columns, pool
group). Each kind of object is one 2-D int64 array with a row per object and a column per field
(the ``*_FIELDS`` of :mod:`.core`): ``S`` switches, ``P`` ports, ``N`` NIC ports, ``Q`` queue pairs,
``QN`` their NIC slots, ``K`` packets, ``D`` list nodes (outstanding and retransmission deques),
``M`` messages, ``HO`` hosts' receive state; ``g`` holds the scalars (slots ``G_*``), ``HP`` the
agenda heap, ``salt`` the seeds, ``r_*`` the routes, ``a_*`` the per-PSN arena, ``RL`` the reply
ports' lists, the rest adaptive routing's measure and the recorder's series. Keep the number of
arrays down (docs/compiled-core.md, "The state"): a new field is a column.
Indices are int64 with -1 for None.
"""
from __future__ import annotations

import math
from collections import deque, namedtuple

import numpy as np

from ...net.lossless import PAUSED_PENALTY_PS, LosslessPort
from ...net.nvlink import NvlinkNic, NvlinkPort, NvlinkSwitch
from ...net.packet import Packet
from ...receiver.base import HostRx
from . import core as C
from .coverage import rate_fraction

_I = np.int64

#: the packet-engine causes of ``MessageState.rtx_bytes``, by column of ``m_rtx``
CAUSES = ("sack", "timeout", "nak")
#: the completions the core may log before Python reads them (X.CL; a full log returns to Python), and
#: the releases it may hand over at once (X.RB)
CL_ROWS = 4096
#: the state's arrays: name -> (dtype, fields (columns; 0: 1-D), pool group). A pool group's arrays
#: grow together along their first axis (one row per object).
_ARRAYS = {
    "g": (_I, 0, None), "f": (np.float64, 0, None),
    "HP": (_I, 5, "heap"),
    "P": (_I, len(C.PORT_FIELDS), None),
    "S": (_I, len(C.SWITCH_FIELDS), None), "s_pmax": (np.float64, 0, None), "salt": (np.uint64, 0, None),
    "r_off": (_I, 0, None), "r_cnt": (_I, 0, None), "r_ports": (_I, 0, None),
    "N": (_I, len(C.NIC_FIELDS), None),
    "Q": (_I, len(C.QP_FIELDS), "qp"), "q_hash": (np.uint64, 0, "qp"),
    # the queue pairs' NIC slots (one per port a queue pair may use) and the reply ports' lists
    "QN": (_I, len(C.QN_FIELDS), "qn"), "RL": (_I, 0, "rl"),
    "a_flag": (np.uint8, 0, "arena"), "a_resent": (_I, 0, "arena"), "a_rarr": (_I, 0, "arena"),
    "D": (_I, len(C.NODE_FIELDS), "node"),
    "K": (_I, len(C.PKT_FIELDS), "pkt"),
    # SACK bitmaps of coalesced ACKs (column 0: the free list; then the bitmap's int64 words, as many
    # as the scenario's sack_bitmap needs: build sets the width)
    "BM": (_I, 2, "bm"),
    "M": (_I, len(C.MSG_FIELDS), "msg"), "m_rtx": (_I, len(CAUSES), "msg"),
    "HO": (_I, len(C.HOST_FIELDS), None),
    "hist": (_I, 0, None), "good": (_I, 0, "good"), "OL": (_I, 2, None),
    # adaptive routing (routing/quality.py): per-port state and grade boundaries, per-group cache
    "PQ": (_I, C.NPQ, None), "RHM": (_I, 0, None), "RHG": (_I, 0, None), "RHB": (_I, 0, None),
    "thr_l": (_I, 0, None), "thr_r": (_I, 0, None), "qe": (_I, 0, None), "qn": (_I, 0, None),
    "qb": (_I, 0, None), "qj": (_I, 0, None), "qro": (_I, 0, None), "qrn": (_I, 0, None),
    # congestion control: per queue pair the flow's rate and window and the algorithm's floats; telemetry's
    # per-position EWMA (hop_u, hop_ts: one column per record of the longest INT stack, "w"); the INT
    # records of each packet (5 words per record, "w") and, with ACK coalescing, of each queue pair's
    # r_tel (RT: the stack of the latest-sent unit since its last ACK, which a coalesced ACK echoes; 0
    # columns without coalescing); telemetry's port histories, their deque nodes and their hash table
    # (X.HT: a power of two long, -1 = empty; rebuilt, not copied, when it grows)
    "QF": (np.float64, len(C.QF_FIELDS), "qp"), "q_hu": (np.float64, "w", "qp"), "q_hts": (_I, "w", "qp"),
    "KT": (_I, "w", "pkt"), "RT": (_I, "w", "qp"),
    "TH": (_I, len(C.TH_FIELDS), "thist"), "TN": (_I, len(C.TN_FIELDS), "tnode"), "HT": (_I, 0, None),
    # slice 6: the quiet completions logged since Python last read them (core.CL_*: row, time, delivered,
    # then copies of the message's M and m_rtx rows)
    "CL": (_I, C.CL_M + len(C.MSG_FIELDS) + len(CAUSES), None),
    # the message rows of the releases handed to Python with the one popped (core._more_releases)
    "RB": (_I, 0, None),
}
State = namedtuple("State", list(_ARRAYS))

#: initial values of the rows that are not 0 (-1 = None)
_FILL = {("Q", f): -1 for f in ("rport", "rh", "rt", "oh", "ot", "rmaxt", "rack", "gbc", "reot", "gbt",
                                 "rtack", "rtsent", "rteln")}
_FILL[("QN", "next")] = -1
_FILL.update({("K", f): -1 for f in ("next", "pnext", "hop", "dsack", "inport", "sacks", "teln")})
_FILL.update({("P", f): -1 for f in ("peer_sw", "sw", "buffer", "ih", "it", "ph", "pt", "lqh", "lqt", "cur", "nicp",
                                     "chh", "cqh", "cqt", "sch", "sct", "nvn")})
_FILL.update({("P", f): -1 for f in ("lh", "lt", "sqh", "sqt")})          # strict-priority lanes and FIFOs
_FILL[("Q", "rlcnp")] = C.ABSENT                                           # r_last_cnp None
_FILL[("Q", "flh")] = -1                                                   # no routing entries
_FILL[("P", "us")] = 1                                                     # util_rate 0 / 1 = 0.0
_FILL[("Q", "heir")] = -1                                                 # QueuePair.heir None
_FILL[("Q", "flo")] = -1                                                  # set by CompiledKernel.register
_FILL.update({("N", f): -1 for f in ("ah", "at", "ch", "ct")})
_FIELDS_OF = {"S": C.SWITCH_FIELDS, "P": C.PORT_FIELDS, "N": C.NIC_FIELDS, "Q": C.QP_FIELDS, "K": C.PKT_FIELDS,
              "D": C.NODE_FIELDS, "M": C.MSG_FIELDS, "HO": C.HOST_FIELDS, "QN": C.QN_FIELDS, "QF": C.QF_FIELDS,
              "TH": C.TH_FIELDS, "TN": C.TN_FIELDS}


def _arr(name, n, width=None):
    """A new array ``name`` of ``n`` rows; ``width``: its columns where the run sets them (the "w"
    arrays, whose width is the run's, and X.BM), else the declared ones."""
    dt, rows, _g = _ARRAYS[name]
    if rows == "w":
        return np.full((n, width), C.ABSENT if name == "q_hts" else 0, dtype=dt)
    if width is not None:
        rows = width
    if name == "a_resent":
        return np.full(n, C.ABSENT, dtype=dt)
    if not rows:
        return np.zeros(n, dtype=dt)
    if name == "OL":
        return np.zeros((rows, n), dtype=dt)
    a = np.zeros((n, rows), dtype=dt)
    for i, f in enumerate(_FIELDS_OF.get(name, ())):
        v = _FILL.get((name, f))
        if v is not None:
            a[:, i] = v
    return a


def row(X, name: str, field: str):
    """One field of a 2-D state array, as a view (e.g. ``row(X, "P", "busy")``)."""
    return getattr(X, name)[:, _FIELDS_OF[name].index(field)]


def build(engine, nic_index: dict) -> State:
    """Flatten ``engine`` (built, not yet run) into a :class:`State`.

    ``nic_index`` maps each host NIC object to its row (filled here, in host order)."""
    sim = engine.sim
    g = sim.topology.graph
    params = sim.scenario.receiver.params
    a = {}
    a["g"] = np.zeros(C.NG, dtype=_I)
    a["f"] = np.zeros(C.NF, dtype=np.float64)
    a["f"][C.F_INV] = engine.recorder.latency.inv_log_base
    # switches and routes
    sws = list(engine.switches.values())
    s_local = {sw.id: i for i, sw in enumerate(sws)}
    n_nodes = max(g.nodes) + 1
    a["S"] = _arr("S", len(sws))
    a["S"][:, [C.S_KMIN, C.S_KMAX, C.S_DEQ, C.S_NODE]] = np.array(
        [(-1 if sw.kmin is None else sw.kmin, sw.kmax, sw.at_dequeue, sw.id) for sw in sws], dtype=_I).reshape(len(sws), 4)
    a["s_pmax"] = np.array([sw.pmax for sw in sws], dtype=np.float64)
    ports = engine.ports
    r_off = np.zeros((len(sws), n_nodes), dtype=_I)
    r_cnt = np.zeros((len(sws), n_nodes), dtype=_I)
    cand = []
    for i, sw in enumerate(sws):
        for h in sim.topology.hosts:
            r_off[i, h] = len(cand)
            try:
                _one, tup = sw.route.get(h) or sw.lookup(h)
            except RuntimeError:       # no route (an NVLink chip towards a GPU outside its domain): never asked
                continue
            r_cnt[i, h] = len(tup)
            cand.extend(p.index for p in tup)
    a["r_off"], a["r_cnt"] = r_off, r_cnt
    a["r_ports"] = np.array(cand or [0], dtype=_I)
    route = _route_code(sim.scenario.routing)
    graded = route in (C.ROUTE_ADAPTIVE, C.ROUTE_FLOWLET)        # the port-quality pick (routing/quality.py)
    quality = getattr(engine.routing, "quality", None)
    a["salt"] = np.array([quality._salt if graded else engine.routing._salt,
                          engine.sender.salt] + [sw.ecn_salt for sw in sws], dtype=np.uint64)
    _adaptive(a, engine, quality if graded else None, s_local, r_off, r_cnt, cand)
    if route == C.ROUTE_EXACT:
        a["qb"] = np.zeros(max(len(cand), 1), dtype=_I)          # the exact policy's sorted / tied candidates
    if graded:
        # the measure's utilisation thresholds (floats) after the other float slots
        a["f"] = np.concatenate([a["f"], np.array(quality.p.util_thresholds, dtype=np.float64)])
    # ports
    pfc = engine.pfc
    P = a["P"] = _arr("P", len(ports))
    col = {f: i for i, f in enumerate(C.PORT_FIELDS)}
    for p in ports:
        i = p.index
        P[i, col["rn"]], P[i, col["rd"]] = rate_fraction(p.rate)     # PS_BITS / rate = rd / rn
        P[i, col["rate"]] = p.rate
        P[i, col["offset"]] = p.offset
        P[i, col["delay"]] = p.delay
        if p.peer in s_local:
            if isinstance(engine.switches[p.peer], NvlinkSwitch):
                P[i, col["deliver"]] = C.D_NVSW
            else:
                P[i, col["deliver"]] = C.D_LSWITCH if pfc is not None else C.D_SWITCH
            P[i, col["peer_sw"]] = s_local[p.peer]
        elif p.deliver == engine.nvrx.arrive:
            P[i, col["deliver"]] = C.D_NVRX
        else:
            P[i, col["deliver"]] = C.D_HOST if p.deliver == engine._to_host else C.D_HOST_SETTLE
        if isinstance(p, NvlinkPort):
            P[i, col["cr"]], P[i, col["bufb"]] = p.credit_bytes, p.buffer_bytes
        if p.owner in s_local:
            P[i, col["sw"]] = s_local[p.owner]
        P[i, col["buffer"]] = -1 if p.buffer is None else p.buffer
        if pfc is not None:
            # Pfc.signal's delay: the pause frame's flight and the transmitter's response (the model's own)
            P[i, col["pfcd"]] = p.delay + pfc.response_ps(p)
    _shared_pools(a, sws)
    # NIC ports, host by host
    nics = [nic for h in sim.topology.hosts for nic in engine.nics[h]]
    for i, nic in enumerate(nics):
        nic_index[nic] = i
    N = a["N"] = _arr("N", len(nics))
    N[:, C.N_PORT] = [nic.port.index for nic in nics]
    for i, nic in enumerate(nics):
        if isinstance(nic, NvlinkNic):
            N[i, C.N_NV] = 1
            N[i, C.N_UNIT], N[i, C.N_PPAY], N[i, C.N_PHDR] = nic.unit, nic.pkt_payload, nic.pkt_header
            N[i, C.N_UWIRE] = nic.unit_wire
            N[i, C.N_STRIPE] = nic.stripe is not None
            P[nic.port.index, col["nvn"]] = i       # = NvlinkPort.nic (the chip kicks a GPU link waiting for credit)
    if pfc is not None:
        for i, nic in enumerate(nics):
            P[nic.port.index, col["nicp"]] = i          # = LosslessPort.nic (a paused host port kicks its NIC)
    # messages
    rows = engine._rows
    a["M"] = _arr("M", max(1, len(rows)))          # (PXN pieces take rows after these: the pool grows)
    a["M"][:len(rows), C.M_SIZE] = [st.size for st in rows]
    a["m_rtx"] = _arr("m_rtx", max(1, len(rows)))
    # hosts, recorder
    a["HO"] = _arr("HO", n_nodes)
    rec = engine.recorder
    a["hist"] = np.array(rec.latency.counts, dtype=_I)
    a["good"] = np.zeros(1024, dtype=_I)
    a["OL"] = _arr("OL", 1 << 16)
    a["CL"] = _arr("CL", CL_ROWS)
    a["RB"] = _arr("RB", CL_ROWS)
    # INT: the longest stack a packet can collect (every switch on its longest route)
    stamp = any(getattr(sw, "stamp", False) for sw in sws)
    maxhop = _longest_route(r_off, r_cnt, cand, ports, s_local) if stamp else 0     # (0: no INT arrays)
    a["HT"] = np.full(1 << _HT_BITS, -1, dtype=_I)
    # growable pools
    rcv = engine.receiver
    a["BM"] = _arr("BM", 256, 1 + -(-rcv.sack_units // 64) if rcv.coalesce else 2)
    # the run's widths: INT records per packet (KT) and, with ACK coalescing, per receiving queue pair
    # (RT: r_tel, the stack a coalesced ACK echoes); telemetry's per-position EWMA (q_hu, q_hts)
    widths = {"KT": 5 * maxhop, "RT": 5 * maxhop if rcv.coalesce else 0, "q_hu": maxhop, "q_hts": maxhop}
    for name, (_dt, _rows, group) in _ARRAYS.items():
        if name not in a:
            a[name] = _arr(name, {"heap": 4096, "qp": 64, "arena": 4096, "node": 8192, "pkt": 8192, "thist": 1024,
                                  "tnode": 8192, "qn": 64, "rl": 64}[group], widths.get(name))
    X = State(**a)
    _link_free(X.K[:, C.K_NEXT], 0)
    _link_free(X.D[:, C.D_NEXT], 0)
    _link_free(X.BM[:, 0], 0)
    _link_free(X.TN[:, C.TN_NEXT], 0)
    gv = X.g
    gv[C.G_PFREE], gv[C.G_PNFREE] = 0, X.K.shape[0]
    gv[C.G_DFREE], gv[C.G_DNFREE] = 0, X.D.shape[0]
    gv[C.G_BFREE], gv[C.G_BNFREE] = 0, X.BM.shape[0]
    gv[C.G_TNFREE], gv[C.G_TNNFREE] = 0, X.TN.shape[0]
    gv[C.G_HT_BITS] = _HT_BITS
    gv[C.G_MAXHOP] = maxhop
    if stamp:
        sw0 = next(sw for sw in sws if sw.stamp)
        gv[C.G_STAMP], gv[C.G_INT_FIRST], gv[C.G_INT_HOP] = 1, sw0.int_first, sw0.int_hop
    _congestion_control(X, engine)
    gv[C.G_LFA] = -1
    gv[C.G_GOOD_HI] = -1
    gv[C.G_MTU] = engine.mtu
    gv[C.G_HDR] = engine.header
    gv[C.G_SEG] = engine.mtu * engine.cell
    gv[C.G_ACK] = params.ack_size
    gv[C.G_RTO_LOW] = params.rto_low
    gv[C.G_RTO_HIGH] = params.rto_high
    gv[C.G_RTO_LOW_UNITS] = params.rto_low_packets
    gv[C.G_RETRY] = params.retry_limit
    snd = engine.sender
    gv[C.G_REO] = snd.reo
    gv[C.G_REO_MAX] = snd.reo_max
    # adaptive timeouts (coverage: selective, one ACK per unit, rto_max x jitter below 2^63)
    gv[C.G_RTO_ADAPTIVE] = snd.adaptive
    gv[C.G_DSACK] = snd.dsack
    gv[C.G_RTO_MIN], gv[C.G_RTO_MAX] = snd.rto_min, snd.rto_max
    gv[C.G_RTO_K], gv[C.G_RTO_JIT] = snd.rto_k, snd.rto_jit
    gv[C.G_SELECTIVE] = snd.selective       # ddp (hold, SACK + RACK) or go-back-N (discard, NAK, rewind)
    # ACK coalescing (the receiver's AckReq spacing, delayed-ACK timer and SACK bitmap; the sender's
    # RACK and probes within the bitmap's reach, sack_bitmap units of cell PSNs each)
    gv[C.G_COALESCE] = rcv.coalesce
    gv[C.G_ACK_EVERY], gv[C.G_ACK_DELAY] = rcv.ack_every, rcv.ack_delay
    gv[C.G_SACK_UNITS], gv[C.G_SACK_BYTES] = rcv.sack_units, rcv.sack_bytes if rcv.coalesce else 0
    gv[C.G_SACK_REACH] = snd.sack_reach
    # the reorder buffer's bytes per receiving host (ReorderBuffer.capacity; -1: another receiver model) and
    # the PSNs of a unit (cells: simulation.cell_packets)
    gv[C.G_RBUF] = rcv.capacity if sim.scenario.receiver.name == "reorder_buffer" else -1
    gv[C.G_CELL] = engine.cell
    gv[C.G_BIN] = rec.goodput_bin_ps
    if pfc is not None:
        gv[C.G_PFC], gv[C.G_XOFF], gv[C.G_XON] = 1, pfc.xoff, pfc.xon
        gv[C.G_PENALTY] = PAUSED_PENALTY_PS
    gv[C.G_ROUTE] = route
    if graded:
        qp_ = quality.p
        gv[C.G_REFRESH], gv[C.G_RPER], gv[C.G_RDEL] = qp_.refresh, qp_.remote_period, qp_.remote_delay
        gv[C.G_NTHR] = len(qp_.queue_thresholds)
        gv[C.G_RCAP] = X.RHM.shape[1]
        # the metric (PortQuality._use_q, _use_u, _nu) and the utilisation window
        gv[C.G_USE_Q], gv[C.G_USE_U] = quality._use_q, quality._use_u
        gv[C.G_NU], gv[C.G_UWIN], gv[C.G_NUTHR] = quality._nu, qp_.util_window, len(qp_.util_thresholds)
    if route == C.ROUTE_FLOWLET:
        gv[C.G_GAP] = engine.routing._gap
    if route == C.ROUTE_EXACT:
        pol = engine.routing
        gv[C.G_EX_UTIL], gv[C.G_EX_WIN] = pol._util, pol._win
        X.f[C.F_EX_W] = pol._w
    return X


#: routing policy -> its code in the core (coverage.ROUTING lists the same names)
_ROUTES = {"ecmp": C.ROUTE_ECMP, "spray": C.ROUTE_SPRAY, "adaptive": C.ROUTE_ADAPTIVE, "flowlet": C.ROUTE_FLOWLET,
           "pinned": C.ROUTE_PINNED}


def _route_code(routing) -> int:
    """The core's code of the scenario's routing policy (``adaptive`` with ``exact: true`` its own)."""
    if routing.name == "adaptive" and routing.params.exact:
        return C.ROUTE_EXACT
    return _ROUTES[routing.name]
#: congestion-control algorithm -> its code in the core (coverage.CC lists the same names)
CC_CODES = {"none": C.CC_NONE, "telemetry": C.CC_TELEMETRY, "dcqcn": C.CC_DCQCN, "dcqcn_cx": C.CC_DCQCN_CX}
#: log2 of the initial size of telemetry's port-history hash table
_HT_BITS = 11


def _longest_route(r_off, r_cnt, cand, ports, s_local) -> int:
    """The most switches a packet crosses on any route of the tables (the records of the longest INT
    stack): from each switch towards each destination, 1 + the longest from the next switch."""
    memo = {}

    def hops(sw, dst):
        v = memo.get((sw, dst))
        if v is None:
            memo[(sw, dst)] = 0                       # (routes never loop; this only bounds a bad table)
            off, cnt = r_off[sw, dst], r_cnt[sw, dst]
            v = 1 + max((hops(s_local[ports[c].peer], dst) for c in cand[off:off + cnt]
                         if ports[c].peer in s_local), default=0)
            memo[(sw, dst)] = v
        return v

    return max((hops(sw, dst) for sw in range(r_off.shape[0]) for dst in range(r_off.shape[1]) if r_cnt[sw, dst]),
               default=1)


def _congestion_control(X: State, engine) -> None:
    """The algorithm's code and parameters (its per-flow state is copied when a queue pair is
    registered, :func:`register_flow`)."""
    cc = engine.cc
    code = CC_CODES[engine.sim.scenario.congestion_control.name]
    X.g[C.G_CC] = code
    if code == C.CC_TELEMETRY:
        X.g[C.G_TEL_PERHOP] = cc._per_hop
        X.g[C.G_TEL_MAXSTAGE] = cc._max_stage
        X.f[C.F_ETA], X.f[C.F_RTT_GAIN], X.f[C.F_RTT_MAX] = cc._eta, cc._rtt_gain, cc._rtt_max
    # the notification point (Receiver.cnp_interval: the algorithm's cnp_interval_ps) and the strict-priority
    # class (Switch.strict, one for every switch: switch.strict_priority; NVLink chips too, though with credit
    # flow control they never carry a control packet)
    ci = engine.receiver.cnp_interval
    X.g[C.G_CNP_INT] = -1 if ci is None else ci
    strict = {tuple(sw.strict) for sw in engine.switches.values()}
    if len(strict) > 1:
        raise ValueError("kernel: compiled: switches with different strict-priority classes")
    X.g[C.G_STRICT] = sum(1 << k for k, on in enumerate(strict.pop() if strict else ()) if on)
    if code == C.CC_DCQCN:
        prm = cc.params
        X.g[C.G_DC_K], X.g[C.G_DC_TI], X.g[C.G_DC_B], X.g[C.G_DC_F] = cc._k, cc._ti, cc._b, cc._f
        X.g[C.G_DC_CLAMP] = prm.clamp_target_rate
        X.f[C.F_DC_G], X.f[C.F_DC_DECAY] = prm.g, cc._decay
    elif code == C.CC_DCQCN_CX:
        prm = cc.params
        X.g[C.G_DC_K], X.g[C.G_DC_TI], X.g[C.G_DC_B], X.g[C.G_DC_F] = cc._p, cc._ti, cc._b, cc._f
        X.g[C.G_DC_CLAMP], X.g[C.G_CX_CLAMP_TI] = prm.clamp_tgt_rate, prm.clamp_tgt_rate_after_time_inc
        X.g[C.G_CX_G], X.g[C.G_CX_D], X.g[C.G_CX_SHIFT] = cc._g, cc._d, cc._shift
        X.g[C.G_CX_A0] = prm.initial_alpha_value
        X.g[C.G_CX_HAS_FIRST] = prm.rate_to_set_on_first_cnp is not None
        # the floats the class forms from its parameters (float(p.rpg_min_rate), ...)
        X.f[C.F_CX_KEEP], X.f[C.F_CX_MINR] = cc._keep, float(prm.rpg_min_rate)
        X.f[C.F_CX_AI], X.f[C.F_CX_HAI] = float(prm.rpg_ai_rate), float(prm.rpg_hai_rate)
        if prm.rate_to_set_on_first_cnp is not None:
            X.f[C.F_CX_FIRST] = float(prm.rate_to_set_on_first_cnp)


def register_flow(X: State, q: int, flow) -> None:
    """Queue pair ``q``'s :class:`~fabricsim.cc.base.Flow` as ``CongestionControl.start`` left it
    (its line and pacing rates: ``core.qp_init``): the window and the algorithm's own state
    (``flow.state``; None for an NVLink queue pair, which no algorithm starts: net/nvlink.py)."""
    if flow.window_bytes is not None:
        X.Q[q, C.Q_HASWIN] = 1
        X.QF[q, C.QF_WIN] = flow.window_bytes
    if X.g[C.G_CC] == C.CC_TELEMETRY and flow.state is not None:
        s = flow.state
        F = X.QF
        (F[q, C.TF_T], F[q, C.TF_W], F[q, C.TF_WC], F[q, C.TF_WINIT], F[q, C.TF_WMIN], F[q, C.TF_WAI], F[q, C.TF_U],
         F[q, C.TF_SCALE], F[q, C.TF_RSPAN], F[q, C.TF_QSPAN]) = (s.T, s.w, s.wc, s.w_init, s.w_min, s.w_ai, s.u,
                                                                 s.rtt_scale, s.rate_span, s.q_span)
        if s.srtt is not None or s.hop_u or s.ports or s.inc_stage or s.last_update_seq:
            raise ValueError("kernel: compiled: a telemetry flow registered after it measured")
        X.Q[q, C.Q_BRTT] = flow.base_rtt_ps           # (read by _unseen_delay)
    elif X.g[C.G_CC] == C.CC_DCQCN and flow.state is not None:
        s = flow.state
        F = X.QF
        F[q, C.DF_RC], F[q, C.DF_RT], F[q, C.DF_ALPHA] = s.rc, s.rt, s.alpha
        F[q, C.DF_RAI], F[q, C.DF_RHAI], F[q, C.DF_MIN] = s.rai, s.rhai, s.min_rate
        Q = X.Q
        Q[q, C.DQ_T], Q[q, C.DQ_BC], Q[q, C.DQ_BYTES], Q[q, C.DQ_CNPS] = s.t_count, s.bc_count, s.bytes, s.cnps
        Q[q, C.DQ_AGEN], Q[q, C.DQ_IGEN] = s.alpha_gen, s.inc_gen
        Q[q, C.DQ_PHASE] = C.ABSENT if s.alpha_phase is None else s.alpha_phase
        Q[q, C.DQ_FLAGS] = ((C.CF_ARUN if s.alpha_running else 0) | (C.CF_IRUN if s.inc_running else 0)
                            | (C.CF_INCR if s.increased else 0))
        if s.cnps or s.alpha_running or s.inc_running or not isinstance(flow.rate_bps, int):
            raise ValueError("kernel: compiled: a dcqcn flow registered after it reacted")
    elif X.g[C.G_CC] == C.CC_DCQCN_CX and flow.state is not None:
        s = flow.state
        F = X.QF
        F[q, C.XF_RC], F[q, C.XF_RT], F[q, C.XF_MAX] = s.rc, s.rt, s.max_rate
        Q = X.Q
        Q[q, C.XQ_ALPHA], Q[q, C.XQ_T0], Q[q, C.XQ_K] = s.alpha, s.t0, s.alpha_k
        Q[q, C.XQ_TS], Q[q, C.XQ_BS], Q[q, C.XQ_BYTES] = s.t_stage, s.b_stage, s.bytes
        Q[q, C.XQ_IGEN], Q[q, C.XQ_CUTS] = s.inc_gen, s.cuts
        Q[q, C.XQ_FLAGS] = ((C.CF_FIRST if s.first else 0) | (C.CF_ACNP if s.alpha_cnp else 0)
                            | (C.CF_DCNP if s.dec_cnp else 0) | (C.CF_DPEND if s.dec_pending else 0)
                            | (C.CF_IRUN if s.inc_running else 0))
        if not s.first or s.dec_pending or s.inc_running or not isinstance(flow.rate_bps, int):
            raise ValueError("kernel: compiled: a dcqcn_cx flow registered after it reacted")


def _flow_back(X: State, q: int, flow, haswin: int, F: list, Q: list | None, cc: int) -> None:
    """Queue pair ``q``'s rate, window and algorithm state onto its Flow (:func:`register_flow`'s
    inverse). ``haswin``: its ``Q_HASWIN``; ``F``: its row of ``X.QF`` (at least the rate and window
    columns) and ``Q`` its row of ``X.Q`` (None under no algorithm), already read (``tolist``: Python
    ints and floats); ``cc``: the algorithm's code (``X.g[G_CC]``)."""
    rate = F[C.QF_RATE]
    flow.rate_bps = flow.line_bps if rate == flow.line_bps else rate
    flow.window_bytes = F[C.QF_WIN] if haswin else None
    if flow.state is None or cc == C.CC_NONE:
        return
    s = flow.state
    if cc == C.CC_TELEMETRY:
        s.w, s.wc, s.u, s.rtt_scale = F[C.TF_W], F[C.TF_WC], F[C.TF_U], F[C.TF_SCALE]
        s.srtt = F[C.TF_SRTT] if Q[C.TQ_HAVE_SRTT] else None
        s.inc_stage, s.last_update_seq = Q[C.TQ_STAGE], Q[C.TQ_LUS]
        nh = Q[C.TQ_NH]
        s.hop_u = X.q_hu[q, :nh].tolist()
        s.hop_ts = [None if v == C.ABSENT else v for v in X.q_hts[q, :nh].tolist()]
    elif cc == C.CC_DCQCN:
        s.rc, s.rt, s.alpha = F[C.DF_RC], F[C.DF_RT], F[C.DF_ALPHA]
        s.t_count, s.bc_count, s.bytes = Q[C.DQ_T], Q[C.DQ_BC], Q[C.DQ_BYTES]
        s.alpha_gen, s.inc_gen, s.cnps = Q[C.DQ_AGEN], Q[C.DQ_IGEN], Q[C.DQ_CNPS]
        ph = Q[C.DQ_PHASE]
        s.alpha_phase = None if ph == C.ABSENT else ph
        fl = Q[C.DQ_FLAGS]
        s.alpha_running, s.inc_running, s.increased = bool(fl & C.CF_ARUN), bool(fl & C.CF_IRUN), bool(fl & C.CF_INCR)
        if fl & C.CF_RATEF:
            flow.rate_bps = rate                      # the algorithm's float, even at line rate
    elif cc == C.CC_DCQCN_CX:
        s.rc, s.rt = F[C.XF_RC], F[C.XF_RT]
        s.alpha, s.t0, s.alpha_k = Q[C.XQ_ALPHA], Q[C.XQ_T0], Q[C.XQ_K]
        s.t_stage, s.b_stage, s.bytes = Q[C.XQ_TS], Q[C.XQ_BS], Q[C.XQ_BYTES]
        s.inc_gen, s.cuts = Q[C.XQ_IGEN], Q[C.XQ_CUTS]
        fl = Q[C.XQ_FLAGS]
        s.first, s.alpha_cnp, s.dec_cnp = bool(fl & C.CF_FIRST), bool(fl & C.CF_ACNP), bool(fl & C.CF_DCNP)
        s.dec_pending, s.inc_running = bool(fl & C.CF_DPEND), bool(fl & C.CF_IRUN)
        if fl & C.CF_RATEF:
            flow.rate_bps = rate                      # the algorithm's float, even at line rate


def _port_histories_back(X: State, qps) -> None:
    """Telemetry's per-port histories (``TelemetryState.ports``) from X.TH, in the order they were made."""
    from ...cc.telemetry import _PortHistory
    TH, TN = X.TH, X.TN

    def nodes(i):
        out = []
        while i >= 0:
            out.append((int(TN[i, C.TN_TS]), int(TN[i, C.TN_VAL])))
            i = int(TN[i, C.TN_NEXT])
        return out

    for h in range(int(X.g[C.G_TH_N])):
        ph = _PortHistory(0, 0, 0)
        ph.rate = deque(nodes(int(TH[h, C.TH_RH])))
        ph.qmin = deque(nodes(int(TH[h, C.TH_MH])))
        ph.last_ts, ph.last_q = int(TH[h, C.TH_LTS]), int(TH[h, C.TH_LQ])
        qps[int(TH[h, C.TH_Q])].flow.state.ports[int(TH[h, C.TH_PORT])] = ph


def _adaptive(a, engine, quality, s_local, r_off, r_cnt, cand):
    """The arrays of the port-quality measure of ``adaptive`` and ``flowlet`` (``PortQuality``):
    per port the grade boundaries (computed by ``thresholds_ps``, the model's own arithmetic) and
    the measure's state; per candidate of a (switch, destination) route the next switch's ports
    towards the destination (``PortQuality._compile``: -1 none, its one port, or -2 and the
    slice of several). Empty arrays for the other policies."""
    ports = engine.ports
    P = len(ports)
    if quality is None:
        for k in ("PQ",):
            a[k] = np.zeros((1, C.NPQ), dtype=_I)
        for k in ("RHM", "RHG", "RHB", "thr_l", "thr_r", "qe", "qn"):
            a[k] = np.zeros((1, 1), dtype=_I)
        for k in ("qb", "qj", "qro", "qrn"):
            a[k] = np.zeros(1, dtype=_I)
        return
    prm = quality.p
    nthr = len(prm.queue_thresholds)
    a["thr_l"] = np.array([quality.thresholds_ps(p.rate) for p in ports], dtype=_I).reshape(P, nthr)
    a["thr_r"] = np.array([quality.thresholds_ps(p.rate, True) for p in ports], dtype=_I).reshape(P, nthr)
    pq = np.zeros((P, C.NPQ), dtype=_I)
    pq[:, C.PQ_EP] = -1
    pq[:, C.PQ_RKEY] = -1
    a["PQ"] = pq
    cap = -(-prm.remote_delay // prm.remote_period) + 4   # measurements a port keeps (see core)
    for k in ("RHM", "RHG", "RHB"):
        a[k] = np.zeros((P, cap), dtype=_I)
    a["qe"] = np.full(r_off.shape, -1, dtype=_I)
    a["qn"] = np.zeros(r_off.shape, dtype=_I)
    n = max(len(cand), 1)
    a["qb"] = np.zeros(n, dtype=_I)
    qj, qro, qrn = np.full(n, -1, dtype=_I), np.zeros(n, dtype=_I), np.zeros(n, dtype=_I)
    if prm.remote:
        for sw_i in range(r_off.shape[0]):
            for dst in engine.sim.topology.hosts:
                off, cnt = r_off[sw_i, dst], r_cnt[sw_i, dst]
                for c in range(off, off + cnt):
                    nxt = s_local.get(ports[cand[c]].peer)
                    if nxt is None:
                        continue
                    ro, rn = r_off[nxt, dst], r_cnt[nxt, dst]
                    qj[c] = cand[ro] if rn == 1 else -2
                    qro[c], qrn[c] = ro, rn
    a["qj"], a["qro"], a["qrn"] = qj, qro, qrn


def _routing_back(X: State, engine, qps) -> None:
    """The routing policy's own state: flowlet's table and count of new flowlets, pinned's pins and
    per-port counts (the entries of each queue pair, ``Q_FLH``, keyed as the policies key them), the
    exact adaptive policy's utilisation marks on the ports."""
    route = int(X.g[C.G_ROUTE])
    pol = engine.routing
    ports = engine.ports
    if route in (C.ROUTE_FLOWLET, C.ROUTE_PINNED):
        node = X.S[:, C.S_NODE].tolist()
        entries = {}
        for qi, qp in enumerate(qps):
            i = int(X.Q[qi, C.Q_FLH])
            while i >= 0:
                psn = int(X.D[i, C.D_PSN])
                key = (qp.uid << 25) | ((psn & 1) << 24) | node[(psn & C._KEY) >> 1]
                entries[key] = (ports[psn >> 25], int(X.D[i, C.D_VAL]))
                i = int(X.D[i, C.D_NEXT])
        if route == C.ROUTE_FLOWLET:
            pol._table = {k: [p, t] for k, (p, t) in entries.items()}
            pol.new_flowlets = int(X.g[C.G_NEWFL])
        else:
            pol._pins = {k: p for k, (p, _t) in entries.items()}
            pol._count = {(c, p.index): int(X.P[p.index, col]) for p in ports
                          for c, col in ((False, C.P_PIN0), (True, C.P_PIN1)) if X.P[p.index, col]}
    elif route == C.ROUTE_EXACT and pol._util:
        for p in ports:
            i = p.index
            p.util_mark_t, p.util_mark_bytes = int(X.P[i, C.P_UMT]), int(X.P[i, C.P_UMB])
            p.util_rate = float(C.int_ratio(int(X.P[i, C.P_UD]), int(X.P[i, C.P_RD]), int(X.P[i, C.P_US]),
                                            int(X.P[i, C.P_RN])))


def _link_free(nxt, start):
    """Chain slots ``start..`` of a pool into its free list (each points to the next, the last to -1)."""
    n = len(nxt)
    nxt[start:n - 1] = np.arange(start + 1, n, dtype=_I)
    nxt[n - 1] = -1


#: pool group -> one of its arrays (their lengths are equal)
POOLS = {gr: n for n, (_d, _r, gr) in reversed(list(_ARRAYS.items())) if gr is not None}


def _size(X, group):
    return getattr(X, POOLS[group]).shape[0]


def grow(X: State, group: str, need: int) -> State:
    """``X`` with the arrays of ``group`` at least ``need`` long (doubling); free lists extended."""
    old = _size(X, group)
    if old >= need:
        return X
    new = old
    while new < need:
        new *= 2
    rep = {}
    for n, (_d, _rows, gr) in _ARRAYS.items():
        if gr == group:
            cur = getattr(X, n)
            arr = _arr(n, new, cur.shape[1] if cur.ndim == 2 else None)
            arr[:old] = cur
            rep[n] = arr
    X = X._replace(**rep)
    free = _FREE_LISTS.get(group)
    if free is not None:                   # the new slots join the pool's free list, ahead of the old free ones
        name, col, head, count = free
        nxt = getattr(X, name)[:, col]
        _link_free(nxt, old)
        nxt[new - 1] = X.g[head]
        X.g[head] = old
        X.g[count] += new - old
    return X


#: pools with a free list: group -> (array, its next-slot column, free-list head and count in g)
_FREE_LISTS = {"pkt": ("K", C.K_NEXT, C.G_PFREE, C.G_PNFREE), "node": ("D", C.D_NEXT, C.G_DFREE, C.G_DNFREE),
               "bm": ("BM", 0, C.G_BFREE, C.G_BNFREE), "tnode": ("TN", C.TN_NEXT, C.G_TNFREE, C.G_TNNFREE)}


def fold_reorder(X: State, rows) -> None:
    """Add the logged reorder distances to their messages' ``reorder_hist`` dicts (counted per
    distinct (message, distance) first: spraying logs one entry per out-of-order unit)."""
    n = int(X.g[C.G_OLOG_N])
    if n:
        r = X.OL[0, :n]
        key = r * (int(X.OL[1, :n].max()) + 1) + X.OL[1, :n]
        uniq, first, counts = np.unique(key, return_index=True, return_counts=True)
        order = np.argsort(first, kind="stable")      # first-seen order, as the receiver adds keys
        for row, d, c in zip(r[first[order]].tolist(), X.OL[1, first[order]].tolist(), counts[order].tolist()):
            h = rows[row].reorder_hist
            h[d] = h.get(d, 0) + c
    X.g[C.G_OLOG_N] = 0


def sync_message(X: State, st, r: int) -> None:
    """Copy the transport counters of row ``r`` onto its MessageState ``st`` (a message, or a PXN
    piece: its row follows the messages'). The row is read once as Python ints (``tolist``): this
    runs at every completion and release (the end of the run reads every row at once: :func:`write_back`)."""
    sync_row(st, X.M[r].tolist(), X.m_rtx[r].tolist())


def sync_row(st, m: list, rtx: list) -> None:
    """:func:`sync_message` from the row already read: ``m`` the row of ``X.M``, ``rtx`` that of
    ``X.m_rtx`` (Python ints), as they stand now or as a completion logged in X.CL copied them."""
    st.delivered = m[C.M_DELIV]
    st.dropped = m[C.M_DROP]
    st.injected = m[C.M_INJ]
    st.rtx_bytes = {c: v for c, v in zip(CAUSES, rtx) if v} if any(rtx) else {}
    st.dup_bytes = m[C.M_DUP]
    st.rx_units = m[C.M_RX]
    st.ooo_units = m[C.M_OOO]
    st.peak_hold = m[C.M_PEAKH]
    st.reorder_wait_ps = m[C.M_RW]
    st.reorder_wait_max_ps = m[C.M_RWMAX]
    st.ecn_marked = m[C.M_ECN]
    st.acks = m[C.M_ACKS]
    st.ctrl_arrived = m[C.M_CTRL_ARR]
    st.ctrl_dropped = m[C.M_CTRL_DROP]
    st.naks = m[C.M_NAKS]
    st.naks_sent = m[C.M_NAKS_SENT]
    st.discarded_bytes = m[C.M_DISC]
    st.cnps = m[C.M_CNPS]
    st.cnps_sent = m[C.M_CNPS_SENT]
    st.overflow_bytes = m[C.M_OVERFLOW]


def sync_recorder(X: State, rec) -> None:
    g = X.g
    rec.delivered_total = int(g[C.G_DELIV])
    if g[C.G_LFA] >= 0:
        rec.last_first_arrival = int(g[C.G_LFA])
        rec.delivered_at_last_first_arrival = int(g[C.G_DLFA])


class _OnWire:
    """Stands in for a lossless port's packet on the wire (``LosslessPort.cur``) while the run is
    compiled: a link sample reads its ``wire`` only (``PacketEngine._snapshot``). The packet
    itself is put back at the end (:func:`write_back`)."""

    __slots__ = ("wire",)

    def __init__(self, wire):
        self.wire = wire


def _write_lossless(X: State, ports, counters: bool) -> None:
    """The lossless ports' queue state (``qbytes``, the packet on the wire: what a link sample
    reads) and with ``counters`` the PFC counters the links table reads."""
    P = X.P
    qb, cur = P[:, C.P_QBYTES].tolist(), P[:, C.P_CUR].tolist()
    wire = X.K[:, C.K_WIRE]
    if counters:
        cols = {n: row(X, "P", n).tolist() for n in ("paused", "pev", "pps", "psince", "ingpk")}
    for p in ports:
        i = p.index
        p.qbytes = qb[i]
        c = cur[i]
        p.cur = _OnWire(int(wire[c])) if c >= 0 else None
        if counters:
            p.paused = bool(cols["paused"][i])
            p.pause_events = cols["pev"][i]
            p.paused_ps = cols["pps"][i]
            p.paused_since = cols["psince"][i]
            p.ingress_peak = cols["ingpk"][i]


def _nodes(X: State, d: int) -> list:
    """The ``(time, bytes)`` of a list of nodes from ``d`` (-1: empty)."""
    out = []
    D = X.D
    while d >= 0:
        out.append((int(D[d, C.D_PSN]), int(D[d, C.D_VAL])))
        d = int(D[d, C.D_NEXT])
    return out


def _write_nvlink(X: State, ports, counters: bool, read_t: int = -1) -> None:
    """The NVLink ports' state: a chip port's units not yet out (``sched``, what a link sample
    reads), and with ``counters`` every credit field (``credit_bytes``, the returns on their way
    back, ``cr_wait``, the buffer peak and the stalls). ``read_t``: the last time Python read a
    chip port's backlog (a link sample, the final snapshot), whose ``held`` dropped the units out
    by then, as it does on heap (-1: none)."""
    P = X.P
    for p in ports:
        if not isinstance(p, NvlinkPort):
            continue
        i = p.index
        p.sched = deque(_nodes(X, int(P[i, C.P_SCH])))
        p.sched_bytes = int(P[i, C.P_SCHB])
        if read_t >= 0:
            p.held(read_t)
        if counters:
            p.credit_bytes = int(P[i, C.P_CR])
            p.cr_heap = _nodes(X, int(P[i, C.P_CHH]))       # sorted by time: a heap
            p.held_bytes = int(P[i, C.P_HELD])
            p.cr_q = deque(_nodes(X, int(P[i, C.P_CQH])))
            p.cr_wait = bool(P[i, C.P_CRW])
            p.buffer_peak_bytes = int(P[i, C.P_BPEAK])
            p.credit_stalls = int(P[i, C.P_STALLS])


def _shared_pools(a: dict, sws) -> None:
    """The switches' shared buffers (net/port.py SharedBuffer; empty when the run starts) as columns of
    ``S`` and ``P`` (core.py, ``S_POOL``..): the running sums in units of ``1 / L`` byte (``L`` the least
    common multiple of the pooled ports' ``rd``), each port's weight ``w = rn x L / rd``, the heap's
    rows."""
    S, P = a["S"], a["P"]
    base = 0
    alpha = None
    for i, sw in enumerate(sws):
        pool = getattr(sw, "shared", None)
        if pool is None:
            continue
        if pool.heap or pool.r or pool.s:
            raise ValueError("kernel: compiled: a shared buffer that is not empty before the run")
        if pool.alpha is not None:
            if alpha is not None and alpha != pool.alpha:
                raise ValueError("kernel: compiled: shared buffers with different alphas")
            alpha = pool.alpha
        fr = [(int(P[p.index, C.P_RN]), int(P[p.index, C.P_RD])) for p in pool.ports]
        L = 1
        for _rn, rd in fr:
            L = L * rd // math.gcd(L, rd)
        S[i, C.S_POOL] = 2 if pool.alpha is not None else 1
        S[i, C.S_PSIZE], S[i, C.S_PRES], S[i, C.S_PL] = pool.size, pool.reserve, L
        S[i, C.S_PB] = base
        base += len(pool.ports)
        for p, (rn, rd) in zip(pool.ports, fr):
            P[p.index, C.P_PW] = rn * (L // rd)
            P[p.index, C.P_PIDX] = p.pool_idx
    a["f"][C.F_POOL_ALPHA] = alpha if alpha is not None else 0.0


def _write_pools(X: State, engine) -> None:
    """The shared buffers' state as Python leaves it (ports' ``busy_until`` written first): ``in_pool``,
    the running sums ``s`` and ``r`` (Python's big integers, from the pooled ports) and the heap (its
    entries, sorted: a valid heap of the same entries)."""
    for i, sw in enumerate(engine.switches.values()):
        pool = getattr(sw, "shared", None)
        if pool is None:
            continue
        inpool = X.P[:, C.P_INPOOL]
        pool.s = pool.r = 0
        for p in pool.ports:
            p.in_pool = bool(inpool[p.index])
            if p.in_pool:
                pool.s += p.busy_until * p.rate
                pool.r += p.rate
        b, n = int(X.S[i, C.S_PB]), int(X.S[i, C.S_PHN])
        pool.heap = sorted((int(X.P[b + j, C.P_PHK]), int(X.P[int(X.P[b + j, C.P_PHI]), C.P_PIDX])) for j in range(n))


def write_ports(X: State, ports, counters: bool = True) -> None:
    """Port state onto the Port objects: ``busy_until`` and ``tx_bytes`` (what a link sample
    reads), and with ``counters`` every other counter; under PFC also the lossless ports' queue
    state and PFC counters."""
    busy, txb = X.P[:, C.P_BUSY].tolist(), X.P[:, C.P_TXB].tolist()
    if X.g[C.G_PFC]:
        _write_lossless(X, [p for p in ports if isinstance(p, LosslessPort)], counters)
    _write_nvlink(X, ports, counters)
    if not counters:
        for p in ports:
            p.busy_until = busy[p.index]
            p.tx_bytes = txb[p.index]
        return
    cols = {n: row(X, "P", n).tolist() for n in ("txp", "peak", "drops", "dropb", "cdrops", "ecn", "cb", "cp",
                                                       "prio")}
    for p in ports:
        i = p.index
        p.busy_until = busy[i]
        p.tx_bytes = txb[i]
        p.tx_packets = cols["txp"][i]
        p.peak_ps = cols["peak"][i]
        p.drops = cols["drops"][i]
        p.dropped_bytes = cols["dropb"][i]
        p.ctrl_drops = cols["cdrops"][i]
        p.ecn_marks = cols["ecn"][i]
        p.ctrl_bytes = cols["cb"][i]
        p.ctrl_packets = cols["cp"][i]
        p.prio_bytes = cols["prio"][i]


def _records(A, i: int, n: int) -> list:
    """Row ``i`` of an INT record array (X.KT, X.RT) as Python's stack: ``n`` tuples (ts, tx, qlen, rate, port)."""
    r = A[i, :5 * n].tolist()
    return [tuple(r[j:j + 5]) for j in range(0, 5 * n, 5)]


def _packet(X: State, i: int, qps, ports) -> Packet:
    kind = int(X.K[i, C.K_KIND])
    hop = int(X.K[i, C.K_HOP])
    pkt = Packet(qps[int(X.K[i, C.K_QP])], int(X.K[i, C.K_DST]), int(X.K[i, C.K_WIRE]), int(X.K[i, C.K_PAY]), int(X.K[i, C.K_SEQ]),
                 int(X.K[i, C.K_TTX]), int(X.K[i, C.K_NPK]), ports[hop] if hop >= 0 else None, kind)
    if hop >= 0 and X.K[i, C.K_LANE]:
        pkt.hop = ports[hop].lane           # crossing the port's strict-priority lane (Switch.priority)
    pkt.ce = int(X.K[i, C.K_CE])
    pkt.sack = int(X.K[i, C.K_SACK])
    pkt.t_data = int(X.K[i, C.K_TDATA])
    n = int(X.K[i, C.K_TELN])
    if n >= 0:
        pkt.tel = _records(X.KT, i, n)
    if kind:
        b = int(X.K[i, C.K_SACKS])          # -1: None (the per-unit format), -2: an empty bitmap
        pkt.sacks = None if b == -1 else 0 if b == -2 else sum(
            (int(w) & 0xFFFFFFFFFFFFFFFF) << (64 * j) for j, w in enumerate(X.BM[b, 1:].tolist()))
        pkt.dsack = int(X.K[i, C.K_DSACK])
    return pkt


def _lossless_packet(X: State, i: int, qps, ports) -> Packet:
    pkt = _packet(X, i, qps, ports)
    ing = int(X.K[i, C.K_INPORT])
    pkt.inport = ports[ing] if ing >= 0 else None
    return pkt


#: the queue pairs' fields :func:`write_back` puts back (columns of X.Q, read at once in this order)
_QP_BACK = ("seq", "una", "high", "outb", "done", "tmo", "armed", "rto_at", "rcum", "rmax", "rhold", "racks", "reo",
            "rack", "srtt", "rttvar", "reot", "draws", "u", "gbc", "gbt", "rnak", "runack", "rce", "rtack", "rtsent",
            "rlast", "rteln", "rlcnp", "heir", "sentb", "ackb", "active", "nok", "haswin")
_QP_COLS = [C.QP_FIELDS.index(f) for f in _QP_BACK]


def write_back(X: State, engine, qps, nics, states, read_t: int = -1) -> None:
    """The whole state onto the engine's objects, as the Python kernel would have left them
    (docs/compiled-core.md 4.4): what the end of ``PacketEngine.run`` reads. ``states``: the
    MessageState of each message row (the messages, then the PXN pieces); ``read_t``: see
    :func:`_write_nvlink`."""
    g = X.g
    ports = engine.ports
    write_ports(X, ports)
    _write_pools(X, engine)
    _write_nvlink(X, ports, True, read_t)
    # packets still in flight: back into the ports' inflight queues (and the NICs' ctrlq)
    for p in ports:
        p.inflight = deque()
        i = int(X.P[p.index, C.P_IH])
        while i >= 0:
            p.inflight.append((int(X.K[i, C.K_AT]), int(X.K[i, C.K_ASEQ]), p.deliver, _packet(X, i, qps, ports)))
            i = int(X.K[i, C.K_NEXT])
        p.pend = deque()              # (settled samples are not needed once the run is over)
        # the strict-priority lane (Switch.priority)
        p.lane.inflight = deque()
        p.lane.busy_until = int(X.P[p.index, C.P_LBU])
        i = int(X.P[p.index, C.P_LH])
        while i >= 0:
            p.lane.inflight.append((int(X.K[i, C.K_AT]), int(X.K[i, C.K_ASEQ]), p.deliver, _packet(X, i, qps, ports)))
            i = int(X.K[i, C.K_NEXT])
        if isinstance(p, LosslessPort):
            # the lossless queue and the strict-priority one, the packet on the wire and the link's ingress
            # accounting
            p.q = deque()
            i = int(X.P[p.index, C.P_LQH])
            while i >= 0:
                p.q.append(_lossless_packet(X, i, qps, ports))
                i = int(X.K[i, C.K_NEXT])
            p.cq = deque()
            i = int(X.P[p.index, C.P_SQH])
            while i >= 0:
                p.cq.append(_lossless_packet(X, i, qps, ports))
                i = int(X.K[i, C.K_NEXT])
            c = int(X.P[p.index, C.P_CUR])
            p.cur = _lossless_packet(X, c, qps, ports) if c >= 0 else None
            p.sending = bool(X.P[p.index, C.P_SENDING])
            p.ingress_bytes = int(X.P[p.index, C.P_INGB])
            p.xoff_sent = bool(X.P[p.index, C.P_XOFF])
    if engine.pfc is not None:
        engine.pfc.pauses = int(g[C.G_PAUSES])
    # NvlinkNic.stripe: the units each link has sent of each queue pair not finished there
    stripes: dict = {}
    last = len(qps) - 1
    nslots = int(X.Q[last, C.Q_N0] + X.Q[last, C.Q_NN]) if qps else 0
    for slot in np.nonzero(X.QN[:nslots, C.QN_CNT])[0].tolist():
        stripes.setdefault(int(X.QN[slot, C.QN_NIC]), {})[qps[int(X.QN[slot, C.QN_QP])]] = int(X.QN[slot, C.QN_CNT])
    for nic, i in nics.items():
        if isinstance(nic, NvlinkNic) and nic.stripe is not None:
            nic.stripe = stripes.get(i, {})
        nic.tx_calls = int(X.N[i, C.N_CALLS])
        nic.tx_sent = int(X.N[i, C.N_SENT])
        nic.busy = bool(X.N[i, C.N_BUSY])
        nic.token = int(X.N[i, C.N_TOKEN])
        nic.pending_at = int(X.N[i, C.N_PEND])
        nic.ctrlq = []
        c = int(X.N[i, C.N_CH])
        while c >= 0:
            nic.ctrlq.append(_packet(X, c, qps, ports))
            c = int(X.K[c, C.K_NEXT])
    # the queue pairs' rows, read at once as Python ints and floats: the columns of _QP_BACK, in its
    # order; the flows' rates and windows and, under an algorithm, its columns of X.Q and X.QF
    cc = int(g[C.G_CC])
    nq = len(qps)
    full = X.Q[:nq].tolist() if cc != C.CC_NONE else [None] * nq
    F = (X.QF[:nq] if cc != C.CC_NONE else X.QF[:nq, :max(C.QF_RATE, C.QF_WIN) + 1]).tolist()
    rows = X.Q[:nq, _QP_COLS].tolist()
    for qi, (qp, f, q, (seq, una, high, outb, done, tmo, armed, rto_at, rcum, rmax, rhold, racks, reo, rack, srtt,
                        rttvar, reot, draws, u, gbc, gbt, rnak, runack, rce, rtack, rtsent, rlast, rteln, rlcnp, heir,
                        sentb, ackb, active, nok, haswin)) in enumerate(zip(qps, F, full, rows, strict=True)):
        qp.seq, qp.una, qp.high = seq, una, high
        qp.out_bytes, qp.sent_done = outb, bool(done)
        qp.timeouts, qp.rto_armed, qp.rto_at = tmo, bool(armed), rto_at
        qp.r_cum, qp.r_max, qp.r_hold, qp.r_acks = rcum, rmax, rhold, racks
        qp.reo, qp.rack_t = reo, rack
        qp.srtt, qp.rttvar, qp.reo_t = srtt, rttvar, reot
        qp.rto_draws, qp.rto_u = draws, u
        qp.goback_t, qp.gb_cause = gbt, CAUSES[gbc] if gbc >= 0 else ""
        qp.r_nak = bool(rnak)
        qp.r_unacked, qp.r_ce = runack, rce
        qp.r_tack, qp.r_tsent, qp.r_last_rx = rtack, rtsent, rlast
        qp.r_tel = _records(X.RT, qi, rteln) if rteln >= 0 else None
        qp.r_last_cnp = None if rlcnp == C.ABSENT else rlcnp
        qp.heir = qps[heir] if heir >= 0 else None
        flow = qp.flow
        flow.sent_bytes, flow.acked_bytes = sentb, ackb
        flow.active = bool(active)
        qp.next_ok = nok
        _flow_back(X, qi, flow, haswin, f, q, cc)
    if X.g[C.G_CC] == C.CC_TELEMETRY:
        _port_histories_back(X, qps)
    _routing_back(X, engine, qps)
    fold_reorder(X, states)
    # every message row read at once (as sync_message reads one)
    n = len(states)
    for st, m, rtx in zip(states, X.M[:n].tolist(), X.m_rtx[:n].tolist(), strict=True):
        if m[C.M_QN]:
            # (a message without queue pairs has nothing here: not started, or relayed by PXN, whose
            #  counters are its pieces', added up in Python)
            sync_row(st, m, rtx)
    engine.dropped_payload = int(g[C.G_DROP_PAY])
    engine.dropped_packets = int(g[C.G_DROP_PK])
    engine.dropped_ctrl = int(g[C.G_DROP_CTRL])
    snd = engine.sender
    snd.timeouts = int(g[C.G_TIMEOUTS])
    snd.spurious = int(g[C.G_SPURIOUS])
    snd.probes = int(g[C.G_PROBES])
    snd.spurious_probes = int(g[C.G_SPROBES])
    snd.dsacks = int(g[C.G_DSACKS])
    snd.naks_ignored = int(g[C.G_NAKS_IGNORED])
    hosts = engine.receiver.hosts
    hosts.clear()
    for h in X.HO[:int(g[C.G_HN_MADE]), C.H_ORDER].tolist():
        hr = hosts[h] = HostRx()
        hr.hold, hr.peak_hold = int(X.HO[h, C.H_HOLD]), int(X.HO[h, C.H_PEAK])
    rec = engine.recorder
    sync_recorder(X, rec)
    rec.latency.counts[:] = X.hist.tolist()
    rec.goodput[:] = X.good[:int(g[C.G_GOOD_HI]) + 1].tolist()
