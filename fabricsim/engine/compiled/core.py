"""The compiled event loop of slice 1 (docs/compiled-core.md, section 4.2), over the flat state
of :mod:`fabricsim.engine.compiled.state`.

Every function here mirrors one Python method of the packet engine, line for line, and says
which (``# = Nic.tx``): the same decisions in the same order, the same ``seq`` drawn at the same
point, so the agenda pops the same entries in the same ``(time_ps, seq)`` order and the state is
equal after every event. Model arithmetic longer than one expression is not rewritten: it is the
model's own function compiled from its source (:data:`ecmp_pick`, :data:`packet_draw_fields`,
:data:`red_below`; see :func:`_rebind`).

The message lifecycle is Python's: an agenda entry of kind ``E_RELEASE`` (with the releases that
follow it at the same time: ``_more_releases``), ``E_SAMPLE`` or ``E_SENT`` (a message on a
persistent connection has put its last new byte on the wire: the NIC's send-completion hook), and a
datapath event that ends in a message completion (``P_DONE``) or a queue pair's failure
(``P_FAIL``), return to the Python driver (:class:`fabricsim.engine.compiled.CompiledKernel`),
which runs the unchanged :class:`~fabricsim.engine.packet.PacketEngine` method and resumes. A
"quiet" message's completion (``M_QUIET``: no connection, no dependents) does not return: it is
logged (``_log_done``, X.CL) and Python records it by the same method when the core next returns.

Hash arithmetic is uint64 throughout (numba types ``uint64 op int64`` as int64, whose ``>>``
sign-extends: docs/compiled-core.md 3.3); times and byte counts are int64, which floors ``//``
like Python.
"""
from __future__ import annotations

import math
import types

import numpy as np
from numba import literal_unroll, njit

from ...cc import dcqcn as dcqcn_mod
from ...cc import dcqcn_cx as cx_mod
from ...cc import telemetry as tel_mod
from ...flows import identity
from ...net import nic as nic_mod
from ...net import nvlink as nvlink_mod
from ...net import port as port_mod
from ...net import sender as sender_mod
from ...net import switch as switch_mod
from ...receiver import base as receiver_mod
from ...routing import ecmp as ecmp_mod

# ---------------------------------------------------------------- shared model arithmetic

_mix64 = njit(cache=True, _nrt=False)(identity.mix64)


def _rebind(fn, **deps):
    """``fn`` compiled from its own source, with the plain functions it calls replaced by their
    compiled twins (numba compiles only calls to compiled functions)."""
    g = dict(fn.__globals__)
    g.update(deps)
    return njit(_nrt=False)(types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__))


_M61 = np.uint64((1 << 61) - 1)
_XXP1 = np.uint64(11400714785074694791)
_XXP2 = np.uint64(14029467366897019727)
_XXP5 = np.uint64(2870177450012600261)


@njit(cache=True, _nrt=False)
def _int_hash(x):
    """CPython's ``hash(int)`` of an int64 or uint64, as a uint64 lane (|x| mod 2**61 - 1, sign
    restored, -1 -> -2)."""
    if x < 0:
        m = np.uint64(-(x + 1)) + np.uint64(1)       # |x|, also for the smallest int64
        r = (m & _M61) + (m >> np.uint64(61))
        if r >= _M61:
            r -= _M61
        v = -np.int64(r)
        if v == -1:
            v = -2
        return np.uint64(v)
    m = np.uint64(x)
    r = (m & _M61) + (m >> np.uint64(61))
    if r >= _M61:
        r -= _M61
    return r


@njit(cache=True, _nrt=False)
def _tuple_hash(t):
    """CPython 3.11's ``hash`` of a tuple of ints (``tuplehash``, xxHash-based; written out in
    tests/test_packet_draws.py as its specification). numba's own ``hash`` of a tuple is the same
    function but needs reference counting, which the core is compiled without."""
    acc = _XXP5
    for item in literal_unroll(t):
        acc += _int_hash(item) * _XXP2
        acc = (acc << np.uint64(31)) | (acc >> np.uint64(33))
        acc *= _XXP1
    acc += np.uint64(len(t)) ^ (_XXP5 ^ np.uint64(3527539))
    if acc == np.uint64(0xFFFFFFFFFFFFFFFF):
        return np.uint64(1546275796)
    return acc


_direction_hash = _rebind(ecmp_mod.direction_hash, mix64=_mix64)
#: :func:`fabricsim.routing.ecmp.ecmp_pick`, compiled (uint64 operands)
ecmp_pick = _rebind(ecmp_mod.ecmp_pick, mix64=_mix64, direction_hash=_direction_hash)
#: :func:`fabricsim.flows.identity.packet_draw_fields`, compiled
packet_draw_fields = _rebind(identity.packet_draw_fields, mix64=_mix64, hash=_tuple_hash)
#: :func:`fabricsim.net.switch.red_below`, compiled
red_below = njit(_nrt=False)(switch_mod.red_below)
_mul_shr = njit(_nrt=False)(sender_mod.mul_shr)
#: :func:`fabricsim.net.sender.adaptive_rto_ps`, compiled (int64; coverage bounds rto_max x jitter)
adaptive_rto_ps = _rebind(sender_mod.adaptive_rto_ps, mul_shr=_mul_shr)
#: :func:`fabricsim.net.sender.rto_draw`, compiled (uint64 operands)
rto_draw = _rebind(sender_mod.rto_draw, mix64=_mix64)
#: :func:`fabricsim.net.sender.rtt_estimate`, compiled
rtt_estimate = njit(_nrt=False)(sender_mod.rtt_estimate)
#: :func:`fabricsim.receiver.base.ack_requested`, compiled (ACK coalescing's AckReq)
ack_requested = njit(_nrt=False)(receiver_mod.ack_requested)
#: :func:`fabricsim.net.nic.pacing_gap_ps`, compiled (the rate a float64: every CC paces at a float rate)
pacing_gap_ps = njit(_nrt=False)(nic_mod.pacing_gap_ps)
# the telemetry controller's arithmetic (fabricsim/cc/telemetry.py), compiled: IEEE doubles, the same
# operations in the same order (no fastmath: no reassociation, no fused multiply-add)
hop_utilisation = njit(_nrt=False)(tel_mod.hop_utilisation)
queue_delay_ps = njit(_nrt=False)(tel_mod.queue_delay_ps)
ewma_over_T = njit(_nrt=False)(tel_mod.ewma_over_T)
unseen_delay = njit(_nrt=False)(tel_mod.unseen_delay)
reference_window = njit(_nrt=False)(tel_mod.reference_window)
window_and_rate = njit(_nrt=False)(tel_mod.window_and_rate)
#: :func:`fabricsim.net.nvlink.nvlink_wire_bytes` and :func:`~fabricsim.net.nvlink.nvlink_stripe_psn`, compiled
nvlink_wire_bytes = njit(_nrt=False)(nvlink_mod.nvlink_wire_bytes)
nvlink_stripe_psn = njit(_nrt=False)(nvlink_mod.nvlink_stripe_psn)
# DCQCN's arithmetic (fabricsim/cc/dcqcn.py) and the ConnectX firmware version's (cc/dcqcn_cx.py), compiled
# from their source: the same IEEE operations in the same order
dc_alpha_catch_up = njit(_nrt=False)(dcqcn_mod.alpha_catch_up)
dc_rate_cut = njit(_nrt=False)(dcqcn_mod.rate_cut)
dc_rate_increase = njit(_nrt=False)(dcqcn_mod.rate_increase)
cx_alpha_periods = njit(_nrt=False)(cx_mod.alpha_periods)
cx_first_rate = njit(_nrt=False)(cx_mod.first_rate)
cx_rate_cut = njit(_nrt=False)(cx_mod.rate_cut)
cx_rate_increase = njit(_nrt=False)(cx_mod.rate_increase)
#: :func:`fabricsim.net.port.pool_admits` (a shared switch buffer's admission), compiled
pool_admits = njit(_nrt=False)(port_mod.pool_admits)


# ---------------------------------------------------------------- state layout
# The columns of the state's 2-D int64 arrays (state.py builds them): one array per kind of object,
# one row per object and one column per field (an object's fields share cache lines), so that a call passes a few arrays (each argument costs a reference count
# when numba's reference counting is on; every function here is compiled without it).
# rn, rd: PS_BITS / rate as the reduced fraction rd / rn (coverage.rate_fraction); rn == 1 when the rate
# divides PS_BITS, and then rd is the port's whole ps per byte (Port.ps_per_byte)
PORT_FIELDS = ("busy", "txb", "txp", "peak", "ih", "it", "ph", "pt", "offset", "deliver", "peer_sw", "sw",
               "buffer", "drops", "dropb", "cdrops", "ecn", "cb", "cp", "prio", "rn", "rd",
               "lqh", "lqt", "qbytes", "sending", "cur", "ingb", "ingpk", "xoff", "paused", "pev", "pps", "psince",
               "pfcd", "nicp", "rate",
               "delay", "cr", "bufb", "chh", "held", "bpeak", "stalls", "crw", "cqh", "cqt", "sch", "sct", "schb", "nvn")
# (PFC, net/lossless.py: lqh, lqt: the lossless-class FIFO of a LosslessPort (q), linked through the packets'
#  next; qbytes, sending, cur; ingb, ingpk, xoff: ingress_bytes, ingress_peak, xoff_sent of the link;
#  paused, pev, pps, psince: paused, pause_events, paused_ps, paused_since; pfcd: the pause frame's
#  delay + the transmitter's response, Pfc.signal's delay (port.delay + Pfc.response_ps(port)); nicp:
#  the NIC row of a host port, LosslessPort.nic, -1 for a switch port; rate: Port.rate in bit/s, which an INT
#  record carries)
# (NVLink, net/nvlink.py NvlinkPort: delay: the link's delay; cr, bufb: credit_bytes, buffer_bytes; a GPU
#  port's credits on their way back (cr_heap) as a list of list nodes (time, bytes) sorted by time from
#  chh, their sum held, buffer_peak_bytes bpeak, credit_stalls, cr_wait crw and its NvlinkNic's row nvn;
#  a chip port's returns due from its GPU (cr_q: cqh, cqt) and the units it holds (sched: sch, sct,
#  sched_bytes schb), FIFOs of list nodes (time, bytes))
NIC_FIELDS = ("port", "busy", "token", "pend", "ah", "at", "al", "ch", "ct", "calls", "sent",
              "nv", "unit", "ppay", "phdr", "uwire", "stripe")
# (nv: an NVLink link, NvlinkNic: unit, pkt_payload, pkt_header, unit_wire; stripe: nvlink.spread stripe)
QP_FIELDS = ("uid", "msg", "src", "dst", "size", "npsn", "seq", "una", "high", "outb", "rack", "nok", "n0", "nn",
             "rl0", "rto_at", "armed", "tmo", "done", "reo", "gbc", "sentb", "ackb", "active", "base", "rh", "rt",
             "oh", "ot", "ol", "rcum", "rmax", "rmaxt", "rn", "rhold", "runack", "rce", "racks", "rport",
             "srtt", "rttvar", "draws", "u", "reot", "brtt", "gbt", "rnak", "rtack", "rtsent", "rlast", "wait",
             "line", "haswin", "cc0", "cc1", "cc2", "cc3", "rteln", "rln")
# (srtt, rttvar: the RTT estimator; draws, u: the jitter draws' counter and the current draw; reot: when
#  the reorder window was last widened by a D-SACK; brtt: the idle round trip, Flow.base_rtt_ps;
#  gbt: go-back-N's last rewind, QueuePair.goback_t; rnak: the receiver's NAK is outstanding, r_nak;
#  n0, nn: the queue pair's NIC slots (rows of X.QN, one per port of QueuePair.nics, in its order);
#  rport: the NIC row its receiver's control packets leave by when fixed (reply_nic's first branch),
#  else -1 and rl0, rln: the receiving host's eligible ports towards the sender, a slice of X.RL, among
#  which reply_nic chooses per packet;
#  ACK coalescing: rtack, rtsent, rlast: r_tack, r_tsent, r_last_rx; wait: the adaptive timeout's
#  allowance for a coalesced ACK, sender.ack_wait_ps at the queue pair's line rate, worked out in Python;
#  line: Flow.line_bps (the sum of its ports' rates); haswin: Flow.window_bytes is not None; cc0..cc3: the
#  algorithm's integer state, named per algorithm below (TQ_*). Its float state is in X.QF: Flow.rate_bps,
#  Flow.window_bytes, and the algorithm's floats c0..c11 (TF_*); rteln: ACK coalescing with INT, the
#  records of r_tel (the INT stack of the latest-sent unit since the last ACK, which the coalesced ACK
#  echoes), -1 = None, the records themselves in X.RT, 5 words each as in X.KT)
# A NIC slot (QN) is the membership of one queue pair in one port's active list (QueuePair.nicmask's
# bit for that port): its queue pair and NIC rows, the next slot of the list, whether it is on the list,
# and (NVLink striping) the units that port has sent of the queue pair (NvlinkNic.stripe)
QN_FIELDS = ("qp", "nic", "next", "in", "cnt")
PKT_FIELDS = ("qp", "dst", "wire", "pay", "seq", "ttx", "npk", "hop", "kind", "ce", "sack", "tdata", "at", "aseq",
              "next", "pnext", "pstart", "ptx", "pprio", "live", "dsack", "inport", "sacks", "pend", "teln")
# (sacks: a control packet's SACK bitmap, Packet.sacks: -1 None (the per-unit format), -2 an empty
#  bitmap, else its row of X.BM; pend: the end of the packet's departure, the INT record's ts when it is
#  settled; teln: the records of its INT stack, -1 = None (pkt.tel), the records themselves in X.KT,
#  5 words each: ts, tx, qlen, rate, port)
NODE_FIELDS = ("psn", "val", "next")
MSG_FIELDS = ("size", "deliv", "drop", "inj", "dup", "rx", "ooo", "peakh", "rw", "rwmax", "ecn", "acks", "ctrl_arr",
              "ctrl_drop", "done", "q0", "qn",
              "naks", "naks_sent", "disc", "cnps", "nonfinal", "piece")
# (PXN: a piece of a user's message (MessageState.parent) has a row of its own after the messages';
#  nonfinal: the piece to the relay GPU, whose bytes are not goodput (not MessageState.final))
HOST_FIELDS = ("hold", "peak", "made", "order")
# switches (X.S): Switch.kmin (-1 = no marking), kmax, at_dequeue, id (the graph node, for packet draws)
SWITCH_FIELDS = ("kmin", "kmax", "deq", "node")
# the seeds (X.salt, uint64): the routing policy's, the sender's timeout draws' (Sender.salt), then each
# switch's ECN draws' (Switch.ecn_salt) from SALT_ECN on
SALT_ROUTE, SALT_RTO, SALT_ECN = 0, 1, 2
(P_BUSY, P_TXB, P_TXP, P_PEAK, P_IH, P_IT, P_PH, P_PT, P_OFFSET, P_DELIVER, P_PEER_SW, P_SW, P_BUFFER, P_DROPS, P_DROPB, P_CDROPS, P_ECN, P_CB, P_CP, P_PRIO, P_RN, P_RD,
 P_LQH, P_LQT, P_QBYTES, P_SENDING, P_CUR, P_INGB, P_INGPK, P_XOFF, P_PAUSED, P_PEV, P_PPS, P_PSINCE, P_PFCD,
 P_NICP, P_RATE, P_DELAY, P_CR, P_BUFB, P_CHH, P_HELD, P_BPEAK, P_STALLS, P_CRW, P_CQH, P_CQT, P_SCH, P_SCT,
 P_SCHB, P_NVN,) = range(len(PORT_FIELDS))
(N_PORT, N_BUSY, N_TOKEN, N_PEND, N_AH, N_AT, N_AL, N_CH, N_CT, N_CALLS, N_SENT, N_NV, N_UNIT, N_PPAY, N_PHDR,
 N_UWIRE, N_STRIPE,) = range(len(NIC_FIELDS))
(Q_UID, Q_MSG, Q_SRC, Q_DST, Q_SIZE, Q_NPSN, Q_SEQ, Q_UNA, Q_HIGH, Q_OUTB, Q_RACK, Q_NOK, Q_N0, Q_NN, Q_RL0, Q_RTO_AT, Q_ARMED, Q_TMO, Q_DONE, Q_REO, Q_GBC, Q_SENTB, Q_ACKB, Q_ACTIVE, Q_BASE, Q_RH, Q_RT, Q_OH, Q_OT, Q_OL, Q_RCUM, Q_RMAX, Q_RMAXT, Q_RN, Q_RHOLD, Q_RUNACK, Q_RCE, Q_RACKS, Q_RPORT, Q_SRTT, Q_RTTVAR, Q_DRAWS, Q_U, Q_REOT, Q_BRTT, Q_GBT, Q_RNAK, Q_RTACK, Q_RTSENT, Q_RLAST, Q_WAIT, Q_LINE, Q_HASWIN, Q_CC0, Q_CC1, Q_CC2, Q_CC3, Q_RTELN, Q_RLN,) = range(len(QP_FIELDS))
(QN_QP, QN_NIC, QN_NEXT, QN_IN, QN_CNT,) = range(len(QN_FIELDS))
(K_QP, K_DST, K_WIRE, K_PAY, K_SEQ, K_TTX, K_NPK, K_HOP, K_KIND, K_CE, K_SACK, K_TDATA, K_AT, K_ASEQ, K_NEXT, K_PNEXT, K_PSTART, K_PTX, K_PPRIO, K_LIVE, K_DSACK, K_INPORT, K_SACKS, K_PEND, K_TELN,) = range(len(PKT_FIELDS))
(D_PSN, D_VAL, D_NEXT,) = range(len(NODE_FIELDS))
(M_SIZE, M_DELIV, M_DROP, M_INJ, M_DUP, M_RX, M_OOO, M_PEAKH, M_RW, M_RWMAX, M_ECN, M_ACKS, M_CTRL_ARR, M_CTRL_DROP, M_DONE, M_Q0, M_QN, M_NAKS, M_NAKS_SENT, M_DISC, M_CNPS, M_NONFINAL, M_PIECE,) = range(len(MSG_FIELDS))
(H_HOLD, H_PEAK, H_MADE, H_ORDER,) = range(len(HOST_FIELDS))
(S_KMIN, S_KMAX, S_DEQ, S_NODE,) = range(len(SWITCH_FIELDS))
# slice 5's DCQCN additions, appended to the rows above:
# P: lh, lt, lbu: a lossy port's strict-priority lane (PriorityLane: inflight, linked through the packets'
#    next, and busy_until; Switch.priority); sqh, sqt: a lossless port's strict-priority FIFO (LosslessPort.cq;
#    cqh, cqt are an NVLink chip port's credit returns)
PORT_FIELDS = PORT_FIELDS + ("lh", "lt", "lbu", "sqh", "sqt")
P_LH, P_LT, P_LBU, P_SQH, P_SQT = range(len(PORT_FIELDS) - 5, len(PORT_FIELDS))
# Q: cc4..cc8: more of the algorithm's integer state (DQ_*, XQ_* below); rlcnp: the receiver's r_last_cnp,
#    the time of its last CNP (ABSENT = None)
QP_FIELDS = QP_FIELDS + ("cc4", "cc5", "cc6", "cc7", "cc8", "rlcnp")
Q_CC4, Q_CC5, Q_CC6, Q_CC7, Q_CC8, Q_RLCNP = range(len(QP_FIELDS) - 6, len(QP_FIELDS))
# K: lane: the packet crosses the strict-priority lane of its hop (pkt.hop is that port's lane)
PKT_FIELDS = PKT_FIELDS + ("lane",)
K_LANE = len(PKT_FIELDS) - 1
# M: cnps_sent: the CNPs the message's receiver sent (MessageState.cnps_sent)
MSG_FIELDS = MSG_FIELDS + ("cnps_sent",)
M_CNPS_SENT = len(MSG_FIELDS) - 1
# slice 2's routing additions, appended to the rows above:
# P: pin0, pin1: the flows of each direction (data, control) pinned to the port (Pinned._count); umt, umb,
#    ud, us: adaptive exact's utilisation marks (Port.util_mark_t, util_mark_bytes) and its util_rate as the
#    fraction it was formed from, (tx_bytes - util_mark_bytes) / span of the last window (0 / 1 = 0.0)
PORT_FIELDS = PORT_FIELDS + ("pin0", "pin1", "umt", "umb", "ud", "us")
P_PIN0, P_PIN1, P_UMT, P_UMB, P_UD, P_US = range(len(PORT_FIELDS) - 6, len(PORT_FIELDS))
# Q: flh: the queue pair's routing entries (flowlet's table, pinned's pins: the entries keyed by this queue
#    pair), a list of X.D nodes: psn = port << 25 | switch << 1 | control, val = the flowlet's last packet
QP_FIELDS = QP_FIELDS + ("flh",)
Q_FLH = len(QP_FIELDS) - 1
# the reorder_buffer receiver's and cells' additions (slices 3 and 4), appended:
# M: overflow: payload the reorder buffer discarded for want of room (MessageState.overflow_bytes)
MSG_FIELDS = MSG_FIELDS + ("overflow",)
M_OVERFLOW = len(MSG_FIELDS) - 1
# slice 4's persistent connections, appended: Q heir: the queue pair's next message's on its connection
#    (QueuePair.heir, -1 = None: Sender._estimator's chain to the connection's RTT estimator);
#    M onsent: the message's send-completion hook is armed (MessageState.on_sent set by PacketEngine._start:
#    its last new byte fires it once, E_SENT)
QP_FIELDS = QP_FIELDS + ("heir",)
Q_HEIR = len(QP_FIELDS) - 1
# Q flo: the row whose routing entries (Q_FLH) this queue pair uses: the first row registered with its uid
#    (flowlet and pinned key their entries by QueuePair.uid, which a persistent connection's queue pairs
#    share: its successive messages continue the same flowlets and pins)
QP_FIELDS = QP_FIELDS + ("flo",)
Q_FLO = len(QP_FIELDS) - 1
MSG_FIELDS = MSG_FIELDS + ("onsent",)
M_ONSENT = len(MSG_FIELDS) - 1
# slice 6's completions handled in the core: M quiet: the message's completion needs nothing of Python at
#    once (CompiledKernel: not on a connection, no dependents, not a PXN piece); its completion is logged
#    in X.CL instead of returning to Python (see _log_done)
MSG_FIELDS = MSG_FIELDS + ("quiet",)
M_QUIET = len(MSG_FIELDS) - 1
# slice 4's shared switch buffers (net/port.py SharedBuffer), appended: S pool: the switch's pool (0 none, 1 a
#    plain shared pool, 2 with the dynamic threshold), psize, pres: its size and reserve (bytes); pl: L, the least
#    common multiple of its ports' rd (PS_BITS / rate = rd / rn), so that a port's rate / PS_BITS is w / L with
#    the integer weight w = rn x L / rd; pn, pr, pt: the running sums N = sum (busy_until - pt) x w and R =
#    sum w over its pooled ports (in_pool) as of pt, its last query, so that used(t) = (N - (t - pt) R) // L,
#    which is (s - t r) // PS_BITS exactly without Python's big integers; pb, phn: its heap of pooled ports
#    (lazy keys, SharedBuffer.heap) in rows pb .. pb + phn - 1 of P's columns phk (key), phi (port)
#    P inpool: in the pool's sums (Port.in_pool); pw: the weight w; pidx: Port.pool_idx
SWITCH_FIELDS = SWITCH_FIELDS + ("pool", "psize", "pres", "pl", "pn", "pr", "pt", "pb", "phn")
S_POOL, S_PSIZE, S_PRES, S_PL, S_PN, S_PR, S_PT, S_PB, S_PHN = range(len(SWITCH_FIELDS) - 9, len(SWITCH_FIELDS))
PORT_FIELDS = PORT_FIELDS + ("inpool", "pw", "pidx", "phk", "phi")
P_INPOOL, P_PW, P_PIDX, P_PHK, P_PHI = range(len(PORT_FIELDS) - 5, len(PORT_FIELDS))
# per queue pair, floats (X.QF): the flow's pacing rate and window, then the algorithm's own
QF_FIELDS = ("rate", "win") + tuple(f"c{i}" for i in range(12))
QF_RATE, QF_WIN, QF_C0 = 0, 1, 2
# telemetry (cc/telemetry.py TelemetryState): T, w, wc, w_init, w_min, w_ai, u, srtt, rtt_scale, rate_span,
# q_span (floats); inc_stage, last_update_seq, srtt is not None, len(hop_u) (ints); hop_u and hop_ts per
# position of the INT stack in X.q_hu and X.q_hts (ABSENT = None); the per-port histories (ports) in X.TH
TF_T, TF_W, TF_WC, TF_WINIT, TF_WMIN, TF_WAI, TF_U, TF_SRTT, TF_SCALE, TF_RSPAN, TF_QSPAN = range(QF_C0, QF_C0 + 11)
TQ_STAGE, TQ_LUS, TQ_HAVE_SRTT, TQ_NH = Q_CC0, Q_CC1, Q_CC2, Q_CC3
# a port history of one flow (_PortHistory; X.TH): the flow and the port (its key), the rate deque (head,
# tail, length) and the queue-minimum deque (head, tail) as lists of X.TN nodes, last_ts, last_q
TH_FIELDS = ("q", "port", "rh", "rt", "rn", "mh", "mt", "lts", "lq")
TH_Q, TH_PORT, TH_RH, TH_RT, TH_RN, TH_MH, TH_MT, TH_LTS, TH_LQ = range(len(TH_FIELDS))
# a node of those deques (X.TN): (ts, tx or qlen), doubly linked (the queue minimum pops at both ends)
TN_FIELDS = ("ts", "val", "next", "prev")
TN_TS, TN_VAL, TN_NEXT, TN_PREV = range(len(TN_FIELDS))
# dcqcn (cc/dcqcn.py DcqcnState): rc, rt, alpha, rai, rhai, min_rate (floats); t_count, bc_count, bytes,
# alpha_gen, inc_gen, cnps, alpha_phase (ABSENT = None) and the flags alpha_running, inc_running, increased
# (CF_*) (ints)
DF_RC, DF_RT, DF_ALPHA, DF_RAI, DF_RHAI, DF_MIN = range(QF_C0, QF_C0 + 6)
DQ_T, DQ_BC, DQ_BYTES, DQ_AGEN, DQ_IGEN, DQ_CNPS, DQ_PHASE, DQ_FLAGS = (Q_CC0, Q_CC1, Q_CC2, Q_CC3, Q_CC4, Q_CC5,
                                                                       Q_CC6, Q_CC7)
# dcqcn_cx (cc/dcqcn_cx.py DcqcnCxState): rc, rt, max_rate (floats); alpha, t0, alpha_k, t_stage, b_stage,
# bytes, inc_gen, cuts and the flags first, alpha_cnp, dec_cnp, dec_pending, inc_running (CF_*) (ints)
XF_RC, XF_RT, XF_MAX = range(QF_C0, QF_C0 + 3)
XQ_ALPHA, XQ_T0, XQ_K, XQ_TS, XQ_BS, XQ_BYTES, XQ_IGEN, XQ_CUTS, XQ_FLAGS = (Q_CC0, Q_CC1, Q_CC2, Q_CC3, Q_CC4,
                                                                            Q_CC5, Q_CC6, Q_CC7, Q_CC8)
# their flag bits; CF_RATEF: flow.rate_bps is the algorithm's float (the int line rate ``start`` set until
# the algorithm first sets it: only the written-back type depends on it)
CF_IRUN, CF_RATEF, CF_ARUN, CF_INCR, CF_FIRST, CF_ACNP, CF_DCNP, CF_DPEND = 1, 2, 4, 8, 16, 32, 64, 128
# their timers (E_CC_TIMER's second argument: generation x 4 + which): the alpha timer (dcqcn), the
# rate-increase timer (both), the rate-cut check (dcqcn_cx: no generation, dec_pending)
TM_ALPHA, TM_INC, TM_CHECK = 0, 1, 2
# float scalars (X.f): the latency histogram's 1 / log(base); telemetry's eta, rtt_gain, window_rtt_max
F_INV, F_ETA, F_RTT_GAIN, F_RTT_MAX = range(4)
NF = 4
# DCQCN (slice 5): dcqcn's g and 1 - g; dcqcn_cx's rpg_min_dec_fac / 100, rpg_min_rate, rpg_ai_rate,
# rpg_hai_rate and rate_to_set_on_first_cnp as floats
F_DC_G, F_DC_DECAY, F_CX_KEEP, F_CX_MINR, F_CX_AI, F_CX_HAI, F_CX_FIRST = range(NF, NF + 7)
NF += 7
# shared switch buffers (slice 4): the dynamic threshold's alpha (switch.buffer.alpha: every switch's)
F_POOL_ALPHA = NF
NF += 1

# routing (slice 2): adaptive exact's util_weight; then the port-quality measure's util_thresholds
F_EX_W = NF
NF += 1
F_UTHR = NF           # (their number G_NUTHR; keep this the last slot: X.f ends with them)

#: the model functions compiled into the core from their own modules: numba's disk cache of the
#: core is keyed on this file only, so :func:`check_cache` discards it when one of these changes
SHARED = (identity.mix64, identity.packet_draw_fields, ecmp_mod.direction_hash, ecmp_mod.ecmp_pick,
          switch_mod.red_below, sender_mod.mul_shr, sender_mod.adaptive_rto_ps, sender_mod.rto_draw,
          sender_mod.rtt_estimate, receiver_mod.ack_requested, nic_mod.pacing_gap_ps, tel_mod.hop_utilisation,
          tel_mod.queue_delay_ps, tel_mod.ewma_over_T, tel_mod.unseen_delay, tel_mod.reference_window,
          tel_mod.window_and_rate,
          nvlink_mod.nvlink_wire_bytes, nvlink_mod.nvlink_stripe_psn) + (
          dcqcn_mod.alpha_catch_up, dcqcn_mod.rate_cut, dcqcn_mod.rate_increase, cx_mod.alpha_periods,
          cx_mod.first_rate, cx_mod.rate_cut, cx_mod.rate_increase) + (port_mod.pool_admits,)

# ---------------------------------------------------------------- codes

# scalar slots of X.g (int64)
G_SEQ, G_NOW, G_EVENTS, G_HN, G_PFREE, G_PNFREE, G_DFREE, G_DNFREE = range(8)
G_DROP_PAY, G_DROP_PK, G_DROP_CTRL, G_TIMEOUTS, G_SPURIOUS = range(8, 13)
G_DELIV, G_LFA, G_DLFA, G_HN_MADE, G_OLOG_N, G_GOOD_HI = range(13, 19)
G_MTU, G_HDR, G_SEG, G_ACK, G_RTO_LOW, G_RTO_HIGH, G_RTO_LOW_UNITS, G_RETRY, G_REO, G_REO_MAX = range(19, 29)
G_BIN, G_ROUTE, G_PY_KIND, G_PY_A, G_PY_T, G_RUN_N, G_ERR = range(29, 36)
G_REFRESH, G_RPER, G_RDEL, G_NTHR, G_RCAP = range(36, 41)
# adaptive timeouts (Sender: adaptive, dsack, rto_min, rto_max, rto_k, rto_jit) and their counters
# (Sender.probes, spurious_probes, dsacks)
G_RTO_ADAPTIVE, G_DSACK, G_RTO_MIN, G_RTO_MAX, G_RTO_K, G_RTO_JIT, G_PROBES, G_SPROBES, G_DSACKS = range(41, 50)
# the receiver model (Receiver.selective: 1 = ddp holds a unit beyond a gap, SACK + RACK; 0 = go-back-N
# discards it and NAKs, the sender rewinds) and the stale NAKs ignored (Sender.naks_ignored)
G_SELECTIVE, G_NAKS_IGNORED = range(50, 52)
# PFC (net/lossless.py Pfc): on, xoff and xon thresholds, PAUSED_PENALTY_PS, the pauses applied (Pfc.pauses)
G_PFC, G_XOFF, G_XON, G_PENALTY, G_PAUSES = range(52, 57)
# ACK coalescing (Receiver: coalesce, ack_every, ack_delay, sack_units, sack_bytes; Sender.sack_reach)
# and the free list of SACK bitmaps (X.BM rows)
G_COALESCE, G_ACK_EVERY, G_ACK_DELAY, G_SACK_UNITS, G_SACK_BYTES, G_SACK_REACH, G_BFREE, G_BNFREE = range(57, 65)
# congestion control (the algorithm's code, CC_*); INT (switches stamp data packets; bytes added at the
# first stamped hop and at each later one; the longest stack, records per packet in X.KT); telemetry's
# estimator (per_hop) and max_stage; the port histories used (X.TH), the free list of their deque nodes
# (X.TN) and log2 of the size of their hash table (X.HT)
G_CC, G_STAMP, G_INT_FIRST, G_INT_HOP, G_MAXHOP, G_TEL_PERHOP, G_TEL_MAXSTAGE = range(65, 72)
G_TH_N, G_TNFREE, G_TNNFREE, G_HT_BITS = range(72, 76)
NG = 76
# DCQCN (slice 5): the receiver's CNP spacing (Receiver.cnp_interval, -1 = None: no CNPs); the packet kinds in
# the strict-priority class (bit k: kind k, Switch.strict); the algorithm's periods, byte counter and
# threshold (dcqcn: alpha_timer K, rate_increase_timer, byte_counter, fast_recovery_steps; dcqcn_cx:
# dce_tcp_rtt, rpg_time_reset, rpg_byte_reset, rpg_threshold), its clamp (clamp_target_rate / clamp_tgt_rate),
# and dcqcn_cx's dce_tcp_g, rate_reduce_monitor_period, 2^rpg_gd, clamp_tgt_rate_after_time_inc,
# initial_alpha_value and whether rate_to_set_on_first_cnp is set
(G_CNP_INT, G_STRICT, G_DC_K, G_DC_TI, G_DC_B, G_DC_F, G_DC_CLAMP, G_CX_G, G_CX_D, G_CX_SHIFT, G_CX_CLAMP_TI,
 G_CX_A0, G_CX_HAS_FIRST) = range(NG, NG + 13)
NG += 13
# the reorder_buffer receiver (ReorderBuffer.capacity: the bytes a receiving host may hold beyond its queue
# pairs' gaps; -1 = another receiver model, which holds without bound or discards) and the PSNs a data
# unit spans at most (PacketEngine.cell: simulation.cell_packets; PSNs stay MTU packets, so the units of a
# queue pair start every cell PSNs)
G_RBUF, G_CELL = range(NG, NG + 2)
NG += 2

# routing (slice 2): flowlet's gap and its new flowlets (Flowlet.new_flowlets); the port-quality measure's
# metric (uses the backlog, the utilisation; PortQuality._use_q, _use_u), the utilisation grades (_nu), its
# window and the number of its thresholds (floats in X.f from F_UTHR on); adaptive exact: utilisation
# on (metric queue_util) and its window (util_weight is X.f[F_EX_W])
G_GAP, G_NEWFL, G_USE_Q, G_USE_U, G_NU, G_UWIN, G_NUTHR, G_EX_UTIL, G_EX_WIN = range(NG, NG + 9)
NG += 9
# slice 6: the quiet completions the core may still log before the run's last message (Python sets it
# before each run(): PacketEngine.remaining - 1, so the last completion always reaches Python) and the
# completions logged in X.CL since Python last read it
G_QUIET_LEFT, G_CL_N = range(NG, NG + 2)
NG += 2
# X.CL, a logged completion: its message row, its time, the payload delivered by then (the recorder's
# delivered_total), then a copy of the message's X.M row and its X.m_rtx row as they stood (a row made
# from the log reads those)
CL_ROW, CL_T, CL_DELIV, CL_M = range(4)
# releases handed to Python together: the agenda's next entries when they are releases at the same time
# as the one popped (X.RB, their message rows; G_PY_N of them after G_PY_A's: see _more_releases)
G_PY_N = NG
NG += 1

# agenda entry kinds
E_DELIVER, E_TX, E_RTO, E_RELEASE, E_SAMPLE = 0, 1, 2, 3, 4
# PFC: LosslessPort._done, Pfc._apply_pause, Pfc._apply_resume (the argument: the port)
E_LDONE, E_PAUSE, E_RESUME = 5, 6, 7
# Receiver._on_ack_timer (the queue pair, the token: its r_acks when the timer was set)
E_ACK_TIMER = 8
# a congestion-control timer (ctx.schedule of an algorithm): the argument the queue pair, the second a
# code of the algorithm's (which timer, and its generation: DCQCN's alpha and rate-increase timers)
E_CC_TIMER = 9
# PacketEngine._next_on_connection (persistent connections: the message row whose last new byte left at
# the entry's time, scheduled by _conn_sent from the NIC's send-completion hook)
E_SENT = 10
# port delivery: to a switch, to a host, to a host after settling dequeue-time samples, to a lossless switch,
# to an NVLink chip (NvlinkSwitch.arrive), to a GPU from its NVLink chip (NvlinkRx.arrive)
D_SWITCH, D_HOST, D_HOST_SETTLE, D_LSWITCH, D_NVSW, D_NVRX = 0, 1, 2, 3, 4, 5
# returns of run()
R_DRAINED, R_TIME_LIMIT, R_PY, R_PROGRESS, R_SPACE, R_ERROR = 0, 1, 2, 3, 4, 5
# what R_PY hands to Python (X.g[G_PY_KIND])
P_NONE, P_RELEASE, P_SAMPLE, P_DONE, P_FAIL = 0, 1, 2, 3, 4
P_SENT = 5
# packet kinds (net/packet.py), rtx causes (columns of MessageState.rtx_bytes)
DATA, ACK, NAK, CNP = 0, 1, 2, 3
# congestion-control algorithms (coverage.CC: the names compiled so far). A further algorithm is a further
# code: its state in the generic slots (Q_CC0.., QF_C0..), its branches in the _cc_* hooks below
CC_NONE, CC_TELEMETRY = 0, 1
CC_DCQCN, CC_DCQCN_CX = 2, 3
C_SACK, C_TIMEOUT, C_NAK = 0, 1, 2
# per-PSN flags (sender: sacked, lost, probed; receiver: held)
F_SACKED, F_LOST, F_HELD, F_PROBED = 1, 2, 4, 8
ABSENT = np.iinfo(np.int64).min
ROUTE_ECMP, ROUTE_SPRAY, ROUTE_ADAPTIVE = 0, 1, 2
# slice 2: flowlet (PortQuality's pick per new flowlet), pinned, adaptive with exact: true
ROUTE_FLOWLET, ROUTE_PINNED, ROUTE_EXACT = 3, 4, 5
# per-port state of the adaptive port-quality measure (X.PQ columns): the refresh period of the
# cached local grade and the grade; the remote grade as known upstream and its key; the ring of
# measurements advertised (head, length; entries in X.RHM / X.RHG / X.RHB)
PQ_EP, PQ_GR, PQ_RKEY, PQ_RV, PQ_RHH, PQ_RHN = range(6)
# metric util / queue_util: the utilisation window's start and tx_bytes then, and its grade (_um_t, _um_b, _ug)
PQ_UMT, PQ_UMB, PQ_UG = range(6, 9)
NPQ = 9
#: free packets / list nodes / agenda slots an event may need
SPACE = 16
PROGRESS_EVERY = 1 << 16

# ---------------------------------------------------------------- agenda (binary heap, (t, seq) keys)


@njit(cache=True, nogil=True, _nrt=False)
def _put(H, i, t, s, k, a, b):
    H[i, 0] = t
    H[i, 1] = s
    H[i, 2] = k
    H[i, 3] = a
    H[i, 4] = b


@njit(cache=True, nogil=True, _nrt=False)
def _move(H, i, j):
    """Heap slot ``j``'s entry into slot ``i``."""
    _put(H, i, H[j, 0], H[j, 1], H[j, 2], H[j, 3], H[j, 4])


@njit(cache=True, nogil=True, _nrt=False)
def push(X, t, s, kind, a, b):
    H = X.HP
    i = X.g[G_HN]
    X.g[G_HN] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        pt = H[p, 0]
        if pt < t or (pt == t and H[p, 1] < s):
            break
        _move(H, i, p)
        i = p
    _put(H, i, t, s, kind, a, b)


@njit(cache=True, nogil=True, _nrt=False)
def _sift_root(X, n, t, s, k, a, b):
    """Put entry ``(t, s, k, a, b)`` at the root of the heap's first ``n`` slots and sift it down."""
    H = X.HP
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and (H[c + 1, 0] < H[c, 0] or (H[c + 1, 0] == H[c, 0] and H[c + 1, 1] < H[c, 1])):
            c += 1
        if t < H[c, 0] or (t == H[c, 0] and s < H[c, 1]):
            break
        _move(H, i, c)
        i = c
    _put(H, i, t, s, k, a, b)


@njit(cache=True, nogil=True, _nrt=False)
def _pop_root(X):
    """Remove the root entry (the event being run)."""
    H = X.HP
    n = X.g[G_HN] - 1
    X.g[G_HN] = n
    if n:
        _sift_root(X, n, H[n, 0], H[n, 1], H[n, 2], H[n, 3], H[n, 4])


@njit(cache=True, nogil=True, _nrt=False)
def _seq(X):
    s = X.g[G_SEQ]
    X.g[G_SEQ] = s + 1
    return s

# ---------------------------------------------------------------- pools


@njit(cache=True, nogil=True, _nrt=False)
def _pkt(X, qp, dst, wire, payload, seq, t_tx, npk, hop, kind):
    # = Packet(qp, dst, wire, payload, seq, t_tx, npk, hop, kind)
    i = X.g[G_PFREE]
    X.g[G_PFREE] = X.K[i, K_NEXT]
    X.g[G_PNFREE] -= 1
    X.K[i, K_QP] = qp
    X.K[i, K_DST] = dst
    X.K[i, K_WIRE] = wire
    X.K[i, K_PAY] = payload
    X.K[i, K_SEQ] = seq
    X.K[i, K_TTX] = t_tx
    X.K[i, K_NPK] = npk
    X.K[i, K_HOP] = hop
    X.K[i, K_KIND] = kind
    X.K[i, K_CE] = 0
    X.K[i, K_SACK] = 0
    X.K[i, K_TDATA] = 0
    X.K[i, K_NEXT] = -1
    X.K[i, K_PNEXT] = -1
    X.K[i, K_LIVE] = 1
    X.K[i, K_DSACK] = -1
    X.K[i, K_INPORT] = -1
    X.K[i, K_SACKS] = -1
    X.K[i, K_TELN] = -1
    X.K[i, K_LANE] = 0
    return i


@njit(cache=True, nogil=True, _nrt=False)
def _free_pkt(X, i):
    b = X.K[i, K_SACKS]
    if b >= 0:                              # its SACK bitmap back to the free list
        X.BM[b, 0] = X.g[G_BFREE]
        X.g[G_BFREE] = b
        X.g[G_BNFREE] += 1
    X.K[i, K_LIVE] = 0
    X.K[i, K_NEXT] = X.g[G_PFREE]
    X.g[G_PFREE] = i
    X.g[G_PNFREE] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _bitmap(X):
    # a cleared SACK bitmap: a row of X.BM, whose column 0 links the free list and columns 1.. hold
    # the bits (bit i of the bitmap: bit i % 64 of column 1 + i // 64, in int64 words)
    i = X.g[G_BFREE]
    X.g[G_BFREE] = X.BM[i, 0]
    X.g[G_BNFREE] -= 1
    for w in range(1, X.BM.shape[1]):
        X.BM[i, w] = 0
    return i


@njit(cache=True, nogil=True, _nrt=False)
def _node(X, psn, val):
    i = X.g[G_DFREE]
    X.g[G_DFREE] = X.D[i, D_NEXT]
    X.g[G_DNFREE] -= 1
    X.D[i, D_PSN] = psn
    X.D[i, D_VAL] = val
    X.D[i, D_NEXT] = -1
    return i


@njit(cache=True, nogil=True, _nrt=False)
def _free_node(X, i):
    X.D[i, D_NEXT] = X.g[G_DFREE]
    X.g[G_DFREE] = i
    X.g[G_DNFREE] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _fifo_append(O, o, head, tail, L, nxt, item):
    """Append row ``item`` of ``L`` to the FIFO owned by row ``o`` of ``O`` (its first and last
    items in columns ``head`` and ``tail``, -1 when empty), linked through column ``nxt`` of ``L``:
    every list of the state (a port's arrivals and pending samples, a NIC's active queue pairs
    and held control packets, a queue pair's outstanding and retransmission deques)."""
    L[item, nxt] = -1
    if O[o, head] < 0:
        O[o, head] = item
    else:
        L[O[o, tail], nxt] = item
    O[o, tail] = item


@njit(cache=True, nogil=True, _nrt=False)
def _fifo_popleft(O, o, head, tail, L, nxt):
    """Remove and return the first item of a FIFO (see :func:`_fifo_append`); it must not be empty."""
    item = O[o, head]
    O[o, head] = L[item, nxt]
    if O[o, head] < 0:
        O[o, tail] = -1
    return item


@njit(cache=True, nogil=True, _nrt=False)
def _rtx_append(X, q, psn, cause):
    _fifo_append(X.Q, q, Q_RH, Q_RT, X.D, D_NEXT, _node(X, psn, cause))


@njit(cache=True, nogil=True, _nrt=False)
def _rtx_appendleft(X, q, psn, cause):
    d = _node(X, psn, cause)
    X.D[d, D_NEXT] = X.Q[q, Q_RH]
    X.Q[q, Q_RH] = d
    if X.Q[q, Q_RT] < 0:
        X.Q[q, Q_RT] = d


@njit(cache=True, nogil=True, _nrt=False)
def _rtx_popleft(X, q):
    _free_node(X, _fifo_popleft(X.Q, q, Q_RH, Q_RT, X.D, D_NEXT))


@njit(cache=True, nogil=True, _nrt=False)
def _rtx_clear(X, q):
    while X.Q[q, Q_RH] >= 0:
        _rtx_popleft(X, q)


@njit(cache=True, nogil=True, _nrt=False)
def _out_append(X, q, psn, ts):
    _fifo_append(X.Q, q, Q_OH, Q_OT, X.D, D_NEXT, _node(X, psn, ts))
    X.Q[q, Q_OL] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _out_popleft(X, q):
    _free_node(X, _fifo_popleft(X.Q, q, Q_OH, Q_OT, X.D, D_NEXT))
    X.Q[q, Q_OL] -= 1


# ---------------------------------------------------------------- ports: inflight FIFOs


@njit(cache=True, nogil=True, _nrt=False)
def _enqueue_arrival(X, port, pkt, at):
    # = entry = (at, next(seq), port.deliver, pkt); pkt.hop = port; inflight.append(entry);
    #   if len(inflight) == 1: push(entry)
    s = _seq(X)
    X.K[pkt, K_AT] = at
    X.K[pkt, K_ASEQ] = s
    X.K[pkt, K_HOP] = port
    X.K[pkt, K_LANE] = 0
    _fifo_append(X.P, port, P_IH, P_IT, X.K, K_NEXT, pkt)
    if X.P[port, P_IH] == pkt:
        push(X, at, s, E_DELIVER, pkt, 0)


@njit(cache=True, nogil=True, _nrt=False)
def _advance_inflight(X, port):
    # = inflight.popleft(); if inflight: push(inflight[0])
    #   The arrival being run is still the agenda's root (run() leaves a delivery there): the
    #   port's next arrival takes its place (one sift-down instead of a pop and a push; the same
    #   order, every key being distinct).
    _fifo_popleft(X.P, port, P_IH, P_IT, X.K, K_NEXT)
    nx = X.P[port, P_IH]
    if nx < 0:
        _pop_root(X)
    else:
        _sift_root(X, X.g[G_HN], X.K[nx, K_AT], X.K[nx, K_ASEQ], E_DELIVER, nx, 0)


@njit(cache=True, nogil=True, _nrt=False)
def _advance_hop(X, pkt):
    # = hop = pkt.hop; hop.inflight.popleft(); if hop.inflight: push(hop.inflight[0]), the hop being a port
    #   or its strict-priority lane (K_LANE: Switch.priority), as _advance_inflight
    port = X.K[pkt, K_HOP]
    if not X.K[pkt, K_LANE]:
        _advance_inflight(X, port)
        return
    _fifo_popleft(X.P, port, P_LH, P_LT, X.K, K_NEXT)
    nx = X.P[port, P_LH]
    if nx < 0:
        _pop_root(X)
    else:
        _sift_root(X, X.g[G_HN], X.K[nx, K_AT], X.K[nx, K_ASEQ], E_DELIVER, nx, 0)

# ---------------------------------------------------------------- switch


@njit(cache=True, nogil=True, _nrt=False)
def _draw(X, salt, pkt, sw):
    # = packet_draw(salt, pkt, switch.id)
    return packet_draw_fields(salt, X.Q[X.K[pkt, K_QP], Q_UID], X.K[pkt, K_SEQ], X.K[pkt, K_TTX], X.K[pkt, K_KIND],
                              X.S[sw, S_NODE])


@njit(cache=True, nogil=True, _nrt=False)
def _mark(X, sw, q, pkt):
    # = Switch.mark
    if q > X.S[sw, S_KMAX]:
        return True
    return red_below(_draw(X, X.salt[SALT_ECN + sw], pkt, sw), q, X.S[sw, S_KMIN], X.S[sw, S_KMAX], X.s_pmax[sw])


@njit(cache=True, nogil=True, _nrt=False)
def _tel_push(X, pkt, ts, tx, q, port):
    # = tel = pkt.tel; if tel is None: pkt.tel = tel = []; tel.append((ts, tx, q, port.rate, port.index))
    #   (a packet crosses at most G_MAXHOP switches: state.build takes the longest route)
    n = X.K[pkt, K_TELN]
    if n < 0:
        n = 0
    o = 5 * n
    X.KT[pkt, o] = ts
    X.KT[pkt, o + 1] = tx
    X.KT[pkt, o + 2] = q
    X.KT[pkt, o + 3] = X.P[port, P_RATE]
    X.KT[pkt, o + 4] = port
    X.K[pkt, K_TELN] = n + 1


@njit(cache=True, nogil=True, _nrt=False)
def _tel_copy(X, dst, src):
    # = dst.tel = src.tel (a control packet echoes its trigger's INT; that stack is final: it has arrived)
    n = X.K[src, K_TELN]
    X.K[dst, K_TELN] = n
    for j in range(5 * n):
        X.KT[dst, j] = X.KT[src, j]


@njit(cache=True, nogil=True, _nrt=False)
def _tel_to_rx(X, q, src):
    # = qp.r_tel = pkt.tel (ACK coalescing: the INT a coalesced ACK will echo, the stack of the latest-sent
    #   unit since the last ACK; that stack is final, the unit has arrived, and its row is freed: copied)
    n = X.K[src, K_TELN]
    X.Q[q, Q_RTELN] = n
    for j in range(5 * n):
        X.RT[q, j] = X.KT[src, j]


@njit(cache=True, nogil=True, _nrt=False)
def _tel_from_rx(X, dst, q):
    # = pkt.tel = qp.r_tel (a coalesced ACK's INT)
    n = X.Q[q, Q_RTELN]
    X.K[dst, K_TELN] = n
    for j in range(5 * n):
        X.KT[dst, j] = X.RT[q, j]


@njit(cache=True, nogil=True, _nrt=False)
def _settle(X, port, t):
    # = Switch.settle (the port's owning switch)
    sw = X.P[port, P_SW]
    count = X.P[port, P_TXB] - X.P[port, P_PRIO]
    kmin = X.S[sw, S_KMIN]
    stamp = X.g[G_STAMP]
    while True:
        h = X.P[port, P_PH]
        if h < 0 or X.K[h, K_PSTART] > t:
            break
        _fifo_popleft(X.P, port, P_PH, P_PT, X.K, K_PNEXT)
        q = count - (X.K[h, K_PTX] - X.K[h, K_PPRIO])
        if kmin >= 0 and q > kmin and _mark(X, sw, q, h):
            X.K[h, K_CE] = 1
            X.P[port, P_ECN] += 1
        if stamp:
            _tel_push(X, h, X.K[h, K_PEND], X.K[h, K_PTX], q, port)


@njit(cache=True, nogil=True, _nrt=False)
def _ser(X, port, wire):
    # = Port.ser_ps(wire) = -((-wire * PS_BITS) // rate): wire * ps_per_byte when the rate divides
    # PS_BITS (rn == 1), else the same ceiling over rd / rn = PS_BITS / rate (docs/compiled-core.md 3.1)
    rn = X.P[port, P_RN]
    if rn == 1:
        return wire * X.P[port, P_RD]
    return -((-wire * X.P[port, P_RD]) // rn)


@njit(cache=True, nogil=True, _nrt=False)
def _backlog_bytes(X, port, d):
    # = d * port.rate // PS_BITS for a backlog of d >= 0 ps: d // ps_per_byte when the rate divides PS_BITS, else
    # floor(d * rn / rd) split at d = a * rd + b: b * rn < rn * rd (< 2^62, coverage.py), and a * rn is
    # at most the result, which is at most d (coverage: such rates stay at or below 8 Tbit/s)
    rn = X.P[port, P_RN]
    rd = X.P[port, P_RD]
    if rn == 1:
        return d // rd
    return (d // rd) * rn + ((d % rd) * rn) // rd


@njit(cache=True, nogil=True, _nrt=False)
def _settle_due(X, port, t):
    # = if pend and pend[0][0] <= t: settle(port, t)
    h = X.P[port, P_PH]
    if h >= 0 and X.K[h, K_PSTART] <= t:
        _settle(X, port, t)


@njit(cache=True, nogil=True, _nrt=False)
def _drop(X, port, pkt):
    # = PacketEngine.drop
    X.P[port, P_DROPS] += 1
    X.P[port, P_DROPB] += X.K[pkt, K_WIRE]
    row = X.Q[X.K[pkt, K_QP], Q_MSG]
    if X.K[pkt, K_KIND] != DATA:
        X.P[port, P_CDROPS] += 1
        X.g[G_DROP_CTRL] += 1
        X.M[row, M_CTRL_DROP] += 1
    else:
        X.g[G_DROP_PAY] += X.K[pkt, K_PAY]
        X.g[G_DROP_PK] += X.K[pkt, K_NPK]
        X.M[row, M_DROP] += X.K[pkt, K_PAY]
    _free_pkt(X, pkt)



# ---------------------------------------------------------------- adaptive: routing/quality.py


@njit(cache=True, nogil=True, _nrt=False)
def _bisect(thr, port, nthr, q):
    # = bisect_right(thresholds, q) over one port's (non-decreasing) thresholds
    i = 0
    while i < nthr and thr[port, i] <= q:
        i += 1
    return i


_U32 = np.uint64(0xFFFFFFFF)
_ONE = np.uint64(1)
_ZERO = np.uint64(0)


@njit(cache=True, nogil=True, _nrt=False)
def _mul128(x, y):
    """``x * y`` of two uint64 below 2^63 as a 128-bit ``(hi, lo)``."""
    x0, x1, y0, y1 = x & _U32, x >> np.uint64(32), y & _U32, y >> np.uint64(32)
    p00, p01, p10 = x0 * y0, x0 * y1, x1 * y0
    mid = (p00 >> np.uint64(32)) + (p01 & _U32) + (p10 & _U32)
    return (x1 * y1 + (p01 >> np.uint64(32)) + (p10 >> np.uint64(32)) + (mid >> np.uint64(32)),
            (p00 & _U32) | (mid << np.uint64(32)))


@njit(cache=True, nogil=True, _nrt=False)
def _bits128(h, lo):
    n = 0
    while h:
        h >>= _ONE
        n += 1
    if n:
        return n + 64
    while lo:
        lo >>= _ONE
        n += 1
    return n


@njit(cache=True, nogil=True, _nrt=False)
def int_ratio(a1, a2, b1, b2):
    """``(a1 * a2) / (b1 * b2)`` as CPython divides two ints (int64 operands, ``a1, a2 >= 0``, ``b1,
    b2 > 0``): the quotient correctly rounded to a double (round half to even), also where the products
    pass 2^63. Both products below 2^53 are exact doubles, whose IEEE quotient is that rounding (CPython's
    own fast path); otherwise a binary long division of the 128-bit products gives 55-56 bits of the
    quotient and a sticky bit, rounded here. tests/test_compiled_route.py checks it against CPython."""
    if a1 == 0 or a2 == 0:
        return 0.0
    lim = np.int64(1) << np.int64(53)
    if a1 <= lim // a2 and b1 <= lim // b2:
        return float(a1 * a2) / float(b1 * b2)
    ah, al = _mul128(np.uint64(a1), np.uint64(a2))
    bh, bl = _mul128(np.uint64(b1), np.uint64(b2))
    na = _bits128(ah, al)
    k = na - _bits128(bh, bl) - 55        # the weight of the quotient's last bit: 2^k
    extra = 0
    if k > 0:                             # divide by b * 2^k (below 2^(na - 54): no overflow)
        sh = np.uint64(k)
        if k >= 64:
            bh, bl = bl << (sh - np.uint64(64)), _ZERO
        else:
            bh, bl = (bh << sh) | (bl >> (np.uint64(64) - sh)), bl << sh
    elif k < 0:
        extra = -k                        # and go on past the units (the remainder stays below b)
    rh, rl = _ZERO, _ZERO
    qt = _ZERO
    for i in range(na + extra):
        j = na - 1 - i
        bit = _ZERO
        if j >= 64:
            bit = (ah >> np.uint64(j - 64)) & _ONE
        elif j >= 0:
            bit = (al >> np.uint64(j)) & _ONE
        rh = (rh << _ONE) | (rl >> np.uint64(63))
        rl = (rl << _ONE) | bit
        qt <<= _ONE
        if rh > bh or (rh == bh and rl >= bl):
            borrow = _ONE if rl < bl else _ZERO
            rl -= bl
            rh = rh - bh - borrow
            qt |= _ONE
    sticky = rh != _ZERO or rl != _ZERO
    nq = _bits128(_ZERO, qt)
    drop = np.uint64(nq - 53)
    m = qt >> drop
    rem = qt & ((_ONE << drop) - _ONE)
    half = _ONE << (drop - _ONE)
    if rem > half or (rem == half and (sticky or (m & _ONE))):
        m += _ONE
    return math.ldexp(float(m), k + nq - 53)


@njit(cache=True, nogil=True, _nrt=False)
def _grade(X, p, now, remote):
    # = PortQuality.grade (the utilisation's (tx_bytes - _um_b) * PS_BITS / (span * rate) as the same
    #   fraction, (tx_bytes - _um_b) * rd / (span * rn): the same rational, the same correctly rounded double)
    g = 0
    if X.g[G_USE_Q]:
        q = X.P[p, P_BUSY] - now
        if q > 0:
            g = _bisect(X.thr_r, p, X.g[G_NTHR], q) if remote else _bisect(X.thr_l, p, X.g[G_NTHR], q)
    if X.g[G_USE_U]:
        span = now - X.PQ[p, PQ_UMT]
        if span >= X.g[G_UWIN]:
            d = X.P[p, P_TXB] - X.PQ[p, PQ_UMB]
            ug = 0
            if d > 0:
                util = int_ratio(d, X.P[p, P_RD], span, X.P[p, P_RN])
                while ug < X.g[G_NUTHR] and X.f[F_UTHR + ug] <= util:      # = bisect_right(util_thresholds, util)
                    ug += 1
            X.PQ[p, PQ_UG] = ug
            X.PQ[p, PQ_UMT] = now
            X.PQ[p, PQ_UMB] = X.P[p, P_TXB]
        g = g * X.g[G_NU] + X.PQ[p, PQ_UG]
    return g


@njit(cache=True, nogil=True, _nrt=False)
def _remote_grade(X, r, now, key):
    # = PortQuality._remote_grade
    per = X.g[G_RPER]
    cap = X.g[G_RCAP]
    m = now // per
    hh = X.PQ[r, PQ_RHH]
    hn = X.PQ[r, PQ_RHN]
    if hn == 0 or X.RHM[r, (hh + hn - 1) % cap] != m:
        j = (hh + hn) % cap
        X.RHM[r, j] = m
        if X.g[G_USE_U]:
            X.RHG[r, j] = _grade(X, r, now, True)
        else:
            q = X.P[r, P_BUSY] - now
            X.RHG[r, j] = _bisect(X.thr_r, r, X.g[G_NTHR], q) if q > 0 else 0    # = grade(r, now, True)
        X.RHB[r, j] = X.P[r, P_BUSY]
        hn += 1
    k = (now - X.g[G_RDEL]) // per - 1
    while hn > 1 and X.RHM[r, (hh + 1) % cap] <= k:
        hh = (hh + 1) % cap
        hn -= 1
    X.PQ[r, PQ_RHH] = hh
    X.PQ[r, PQ_RHN] = hn
    fm = X.RHM[r, hh]
    if fm == k:
        g = X.RHG[r, hh]
    elif fm < k:
        q = X.RHB[r, hh] - k * per                          # = PortQuality._drained
        g = _bisect(X.thr_r, r, X.g[G_NTHR], q) if (q > 0 and X.g[G_USE_Q]) else 0
        if X.g[G_USE_U]:
            g = g * X.g[G_NU] + X.RHG[r, hh] % X.g[G_NU]
    else:
        g = 0
    X.PQ[r, PQ_RKEY] = key
    X.PQ[r, PQ_RV] = g
    return g


@njit(cache=True, nogil=True, _nrt=False)
def _known_remote(X, r, now, key):
    return X.PQ[r, PQ_RV] if X.PQ[r, PQ_RKEY] == key else _remote_grade(X, r, now, key)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _quality_best(X, sw, dst, off, n, now):
    # = PortQuality.best: fills the group's best list (X.qb[off:]), returns its length
    e = now // X.g[G_REFRESH]
    if X.qe[sw, dst] == e:
        return X.qn[sw, dst]
    per = X.g[G_RPER]
    m = now // per
    key = (m << 32) + m - (now - X.g[G_RDEL]) // per
    nthr = X.g[G_NTHR]
    best_g = 1 << 30
    nb = 0
    for c in range(off, off + n):
        p = X.r_ports[c]
        if X.PQ[p, PQ_EP] == e:
            lg = X.PQ[p, PQ_GR]
        elif X.g[G_USE_U]:
            lg = _grade(X, p, now, False)
            X.PQ[p, PQ_EP] = e
            X.PQ[p, PQ_GR] = lg
        else:
            q = X.P[p, P_BUSY] - now
            lg = _bisect(X.thr_l, p, nthr, q) if q > 0 else 0
            X.PQ[p, PQ_EP] = e
            X.PQ[p, PQ_GR] = lg
        if lg > best_g:
            continue
        j = X.qj[c]
        if j >= 0:
            rg = _known_remote(X, j, now, key)
            if rg > lg:
                lg = rg
        elif j == -2:
            ro = X.qro[c]
            rg = _known_remote(X, X.r_ports[ro], now, key)
            for rc in range(ro + 1, ro + X.qrn[c]):
                v = _known_remote(X, X.r_ports[rc], now, key)
                if v < rg:
                    rg = v
            if rg > lg:
                lg = rg
        if lg < best_g:
            best_g = lg
            X.qb[off] = p
            nb = 1
        elif lg == best_g:
            X.qb[off + nb] = p
            nb += 1
    X.qe[sw, dst] = e
    X.qn[sw, dst] = nb
    return nb


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _quality_pick(X, sw, dst, off, n, pkt, now):
    # = PortQuality.pick
    nb = _quality_best(X, sw, dst, off, n, now)
    if nb == 1:
        return X.qb[off]
    return X.qb[off + np.int64(_draw(X, X.salt[SALT_ROUTE], pkt, sw) % np.uint64(nb))]


_KEY = (1 << 25) - 1       # a routing entry's key bits (X.D psn): switch << 1 | control


@njit(cache=True, nogil=True, _nrt=False)
def _entry(X, q, key):
    """The routing entry of queue pair ``q`` with ``key`` (switch << 1 | control), -1 if none (the
    entries of its uid: those of row ``Q_FLO``)."""
    i = X.Q[X.Q[q, Q_FLO], Q_FLH]
    while i >= 0 and (X.D[i, D_PSN] & _KEY) != key:
        i = X.D[i, D_NEXT]
    return i


@njit(cache=True, nogil=True, _nrt=False)
def _new_entry(X, q, key, port, t):
    i = _node(X, (port << 25) | key, t)
    f = X.Q[q, Q_FLO]
    X.D[i, D_NEXT] = X.Q[f, Q_FLH]
    X.Q[f, Q_FLH] = i


@njit(cache=True, nogil=True, _nrt=False)
def _flowlet(X, sw, dst, off, n, pkt, now):
    # = Flowlet.choose: one entry per queue pair, direction (data, or its control packets on the way back)
    #   and switch, [port, the flowlet's last packet]
    q = X.K[pkt, K_QP]
    key = (sw << 1) | (1 if X.K[pkt, K_KIND] else 0)
    i = _entry(X, q, key)
    if i >= 0 and now - X.D[i, D_VAL] <= X.g[G_GAP]:
        X.D[i, D_VAL] = now
        return X.D[i, D_PSN] >> 25
    port = _quality_pick(X, sw, dst, off, n, pkt, now)
    X.g[G_NEWFL] += 1
    if i < 0:
        _new_entry(X, q, key, port, now)
    else:
        X.D[i, D_PSN] = (port << 25) | key
        X.D[i, D_VAL] = now
    return port


@njit(cache=True, nogil=True, _nrt=False)
def _pinned(X, sw, off, n, pkt):
    # = Pinned.pin: the pinned port, or pin the least-pinned candidate (Pinned._least_pinned; ties by
    #   ecmp_index among the tied ports, with the policy's salt) and count it
    q = X.K[pkt, K_QP]
    control = X.K[pkt, K_KIND] != DATA
    key = (sw << 1) | (1 if control else 0)
    i = _entry(X, q, key)
    if i >= 0:
        return X.D[i, D_PSN] >> 25
    col = P_PIN1 if control else P_PIN0
    least = X.P[X.r_ports[off], col]
    for c in range(off + 1, off + n):
        v = X.P[X.r_ports[c], col]
        if v < least:
            least = v
    nt = 0
    for c in range(off, off + n):
        nt += X.P[X.r_ports[c], col] == least
    j = 0
    if nt > 1:
        j = np.int64(ecmp_pick(X.q_hash[q], X.salt[SALT_ROUTE], np.uint64(X.S[sw, S_NODE]), np.uint64(nt), control))
    port = -1
    for c in range(off, off + n):
        if X.P[X.r_ports[c], col] == least:
            if j == 0:
                port = X.r_ports[c]
                break
            j -= 1
    X.P[port, col] += 1
    _new_entry(X, q, key, port, 0)
    return port


@njit(cache=True, nogil=True, _nrt=False)
def _exact_score(X, p, now):
    # = Adaptive._score (metric queue_util): the queued bits x 1e12 as a double, plus the utilisation term;
    #   util_rate is kept as the fraction it was formed from (P_UD / P_US), whose double int_ratio gives
    bu = X.P[p, P_BUSY]
    rate = X.P[p, P_RATE]
    q = int_ratio(bu - now, rate, 1, 1) if bu > now else 0.0
    if now - X.P[p, P_UMT] >= X.g[G_EX_WIN]:
        X.P[p, P_US] = now - X.P[p, P_UMT]
        X.P[p, P_UD] = X.P[p, P_TXB] - X.P[p, P_UMB]
        X.P[p, P_UMT] = now
        X.P[p, P_UMB] = X.P[p, P_TXB]
    ur = int_ratio(X.P[p, P_UD], X.P[p, P_RD], X.P[p, P_US], X.P[p, P_RN])
    return q + X.f[F_EX_W] * ur * X.g[G_EX_WIN] * rate


@njit(cache=True, nogil=True, _nrt=False)
def _queued_less(X, p, r, now):
    """``(busy_until - now) * rate`` of port ``p`` below port ``r``'s (each 0 when idle), exactly."""
    bp = X.P[p, P_BUSY] - now
    br = X.P[r, P_BUSY] - now
    if br <= 0:
        return False
    if bp <= 0:
        return True
    ph, pl = _mul128(np.uint64(bp), np.uint64(X.P[p, P_RATE]))
    rh, rl = _mul128(np.uint64(br), np.uint64(X.P[r, P_RATE]))
    return ph < rh or (ph == rh and pl < rl)


@njit(cache=True, nogil=True, _nrt=False)
def _exact(X, sw, off, n, pkt, now):
    # = Adaptive._choose_exact: the least backlog (metric queue_util: plus the utilisation term), ties
    #   broken by the packet's draw; one rate over the candidates: the earliest busy_until, idle ports tied
    nt = 0
    pick = -1
    if not X.g[G_EX_UTIL]:
        rate = X.P[X.r_ports[off], P_RATE]
        uniform = True
        for c in range(off + 1, off + n):
            if X.P[X.r_ports[c], P_RATE] != rate:
                uniform = False
        if uniform:
            # order = sorted(ports, key=busy_until): stable, so (busy_until, position); X.qb[off:] holds it
            for c in range(off, off + n):
                p = X.r_ports[c]
                k = c
                while k > off and X.P[X.qb[k - 1], P_BUSY] > X.P[p, P_BUSY]:
                    X.qb[k] = X.qb[k - 1]
                    k -= 1
                X.qb[k] = p
            first = X.P[X.qb[off], P_BUSY]
            lim = first if first > now else now
            while nt < n and X.P[X.qb[off + nt], P_BUSY] <= lim:       # = bisect_right(order, lim, key=...)
                nt += 1
            if nt == 1:
                return X.qb[off]
            return X.qb[off + np.int64(_draw(X, X.salt[SALT_ROUTE], pkt, sw) % np.uint64(nt))]
        # scores = [(busy_until - now) * rate or 0]; the least, exactly (128-bit products)
        best = X.r_ports[off]
        for c in range(off + 1, off + n):
            if _queued_less(X, X.r_ports[c], best, now):
                best = X.r_ports[c]
        for c in range(off, off + n):
            p = X.r_ports[c]
            if not _queued_less(X, best, p, now):          # == best
                if nt == 0:
                    pick = p
                X.qb[off + nt] = p
                nt += 1
    else:
        best_s = _exact_score(X, X.r_ports[off], now)
        for c in range(off + 1, off + n):
            v = _exact_score(X, X.r_ports[c], now)
            if v < best_s:
                best_s = v
        for c in range(off, off + n):
            p = X.r_ports[c]
            if _exact_score(X, p, now) == best_s:          # (no window closes again at the same now)
                if nt == 0:
                    pick = p
                X.qb[off + nt] = p
                nt += 1
    if nt == 1:
        return pick
    return X.qb[off + np.int64(_draw(X, X.salt[SALT_ROUTE], pkt, sw) % np.uint64(nt))]


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _choose(X, sw, t, pkt):
    # = route = self.route.get(pkt.dst) or self.lookup(pkt.dst); route[0] or self.choose(self, route[1], pkt, t)
    dst = X.K[pkt, K_DST]
    n = X.r_cnt[sw, dst]
    off = X.r_off[sw, dst]
    if n == 1:
        return X.r_ports[off]
    if X.g[G_ROUTE] == ROUTE_ECMP:
        # = Ecmp.choose (its cache memoises a pure function)
        qp = X.K[pkt, K_QP]
        return X.r_ports[off + np.int64(ecmp_pick(X.q_hash[qp], X.salt[SALT_ROUTE], np.uint64(X.S[sw, S_NODE]),
                                                 np.uint64(n), X.K[pkt, K_KIND] != DATA))]
    if X.g[G_ROUTE] == ROUTE_SPRAY:
        # = Spray.choose
        return X.r_ports[off + np.int64(_draw(X, X.salt[SALT_ROUTE], pkt, sw) % np.uint64(n))]
    r = X.g[G_ROUTE]
    if r == ROUTE_ADAPTIVE:
        return _quality_pick(X, sw, dst, off, n, pkt, t)
    if r == ROUTE_FLOWLET:
        return _flowlet(X, sw, dst, off, n, pkt, t)
    if r == ROUTE_PINNED:
        return _pinned(X, sw, off, n, pkt)
    return _exact(X, sw, off, n, pkt, t)


@njit(cache=True, nogil=True, _nrt=False)
def _ph_push(X, sw, key, port):
    # = heappush(pool.heap, (key, port.pool_idx)) (the order among equal keys changes nothing: a query
    #   takes every entry due)
    b = X.S[sw, S_PB]
    i = X.S[sw, S_PHN]
    X.S[sw, S_PHN] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        if X.P[b + p, P_PHK] <= key:
            break
        X.P[b + i, P_PHK] = X.P[b + p, P_PHK]
        X.P[b + i, P_PHI] = X.P[b + p, P_PHI]
        i = p
    X.P[b + i, P_PHK] = key
    X.P[b + i, P_PHI] = port


@njit(cache=True, nogil=True, _nrt=False)
def _ph_pop(X, sw):
    # = heappop(pool.heap): the port of the root entry
    b = X.S[sw, S_PB]
    top = X.P[b, P_PHI]
    n = X.S[sw, S_PHN] - 1
    X.S[sw, S_PHN] = n
    if n:
        key = X.P[b + n, P_PHK]
        port = X.P[b + n, P_PHI]
        i = 0
        while True:
            c = 2 * i + 1
            if c >= n:
                break
            if c + 1 < n and X.P[b + c + 1, P_PHK] < X.P[b + c, P_PHK]:
                c += 1
            if key <= X.P[b + c, P_PHK]:
                break
            X.P[b + i, P_PHK] = X.P[b + c, P_PHK]
            X.P[b + i, P_PHI] = X.P[b + c, P_PHI]
            i = c
        X.P[b + i, P_PHK] = key
        X.P[b + i, P_PHI] = port
    return top


@njit(cache=True, nogil=True, _nrt=False)
def _pool_used(X, sw, t):
    # = SharedBuffer.used: the ports whose entries are due leave the sums if idle, else are filed again
    #   at their busy_until; then (s - t r) // PS_BITS as (N - (t - pt) R) // L (every pooled port's
    #   busy_until is above pt, so every term of N stays a backlog: no overflow, coverage)
    T = X.S[sw, S_PT]
    b = X.S[sw, S_PB]
    while X.S[sw, S_PHN] and X.P[b, P_PHK] <= t:
        i = _ph_pop(X, sw)
        bu = X.P[i, P_BUSY]
        if bu <= t:
            X.P[i, P_INPOOL] = 0
            X.S[sw, S_PN] -= (bu - T) * X.P[i, P_PW]
            X.S[sw, S_PR] -= X.P[i, P_PW]
        else:
            _ph_push(X, sw, bu, i)
    r = X.S[sw, S_PR]
    n = X.S[sw, S_PN] - (t - T) * r
    X.S[sw, S_PN] = n
    X.S[sw, S_PT] = t
    return n // X.S[sw, S_PL] if r else 0


@njit(cache=True, nogil=True, _nrt=False)
def _pool_set(X, sw, port, bu):
    # = SharedBuffer.set_busy_until(port, t, bu), after _pool_used(t) (so pt = t)
    w = X.P[port, P_PW]
    if X.P[port, P_INPOOL]:
        X.S[sw, S_PN] += (bu - X.P[port, P_BUSY]) * w
    else:
        X.P[port, P_INPOOL] = 1
        X.S[sw, S_PN] += (bu - X.S[sw, S_PT]) * w
        X.S[sw, S_PR] += w
        _ph_push(X, sw, bu, port)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _switch_arrive(X, sw, t, pkt):
    # = Switch.arrive (lossy; its shared pool, if any: _pool_used, pool_admits, _pool_set); a packet of a
    #   strict-priority kind goes to the egress port's lane (its hop may have been a lane too, which has
    #   no samples to settle)
    hop = X.K[pkt, K_HOP]
    lane = X.K[pkt, K_LANE]
    _advance_hop(X, pkt)
    if not lane:
        _settle_due(X, hop, t)
    kind = X.K[pkt, K_KIND]
    port = _choose(X, sw, t, pkt)
    if kind and (X.g[G_STRICT] >> kind) & 1:
        _priority(X, t, port, pkt)
        return
    _settle_due(X, port, t)
    wire = X.K[pkt, K_WIRE]
    stamp = X.g[G_STAMP] and kind == DATA
    if stamp:
        wire += X.g[G_INT_FIRST] if X.K[pkt, K_TELN] < 0 else X.g[G_INT_HOP]
    bu = X.P[port, P_BUSY]
    if bu < t:
        bu = t
        q = 0
    else:
        q = _backlog_bytes(X, port, bu - t)     # = (bu - t) * port.rate // PS_BITS
        if X.P[port, P_BUFFER] >= 0 and q + wire > X.P[port, P_BUFFER]:
            _drop(X, port, pkt)
            return
    pool = X.S[sw, S_POOL]
    if pool and not pool_admits(q, wire, _pool_used(X, sw, t), X.S[sw, S_PSIZE], pool == 2, X.f[F_POOL_ALPHA],
                                X.S[sw, S_PRES]):
        _drop(X, port, pkt)
        return
    X.K[pkt, K_WIRE] = wire
    kmin = X.S[sw, S_KMIN]
    at_dequeue = X.S[sw, S_DEQ]
    if kmin >= 0 and not at_dequeue and q > kmin and kind == DATA and _mark(X, sw, q, pkt):
        X.K[pkt, K_CE] = 1
        X.P[port, P_ECN] += 1
    start = bu
    bu += _ser(X, port, wire)
    if pool:
        _pool_set(X, sw, port, bu)
    X.P[port, P_BUSY] = bu
    if bu - t > X.P[port, P_PEAK]:
        X.P[port, P_PEAK] = bu - t
    X.P[port, P_TXB] += wire
    X.P[port, P_TXP] += X.K[pkt, K_NPK]
    if kind != DATA:
        X.P[port, P_CB] += wire
        X.P[port, P_CP] += 1
    elif at_dequeue:
        if start > t:                   # it waits: settle its sample when it starts
            if kmin >= 0 or stamp:
                # = pend.append((start, bu, port.tx_bytes, port.prio_bytes, pkt))
                X.K[pkt, K_PSTART] = start
                X.K[pkt, K_PEND] = bu
                X.K[pkt, K_PTX] = X.P[port, P_TXB]
                X.K[pkt, K_PPRIO] = X.P[port, P_PRIO]
                _fifo_append(X.P, port, P_PH, P_PT, X.K, K_PNEXT, pkt)
        elif stamp:                     # leaves at once: nothing is queued behind it yet
            _tel_push(X, pkt, bu, X.P[port, P_TXB], 0, port)
    elif stamp:
        _tel_push(X, pkt, bu, X.P[port, P_TXB], q, port)
    _enqueue_arrival(X, port, pkt, bu + X.P[port, P_OFFSET])


@njit(cache=True, nogil=True, _nrt=False)
def _priority(X, t, port, pkt):
    # = Switch.priority (the switch's shared pool, if any, told of the new busy_until): serialised after the data packet on the wire (the first
    #   of the port's arrivals whose last bit has not left by t) or the lane's previous packet, whichever
    #   is later; the data class's busy_until is pushed back by its serialisation
    wire = X.K[pkt, K_WIRE]
    ser = _ser(X, port, wire)
    start = t
    bu = X.P[port, P_BUSY]
    off = X.P[port, P_OFFSET]
    if bu > t:
        i = X.P[port, P_IH]
        while i >= 0:
            if X.K[i, K_AT] - off > t:
                start = X.K[i, K_AT] - off
                break
            i = X.K[i, K_NEXT]
    if X.P[port, P_LBU] > start:
        start = X.P[port, P_LBU]
    end = start + ser
    X.P[port, P_LBU] = end
    newbu = bu + ser if bu > t else end
    sw = X.P[port, P_SW]
    if X.S[sw, S_POOL]:
        _pool_used(X, sw, t)
        _pool_set(X, sw, port, newbu)
    X.P[port, P_BUSY] = newbu
    if newbu - t > X.P[port, P_PEAK]:
        X.P[port, P_PEAK] = newbu - t
    X.P[port, P_TXB] += wire
    X.P[port, P_TXP] += X.K[pkt, K_NPK]
    X.P[port, P_CB] += wire
    X.P[port, P_CP] += 1
    X.P[port, P_PRIO] += wire
    # = entry = (end + port.offset, next(seq), port.deliver, pkt); pkt.hop = lane; lane.inflight.append(entry);
    #   if len(lane.inflight) == 1: push(entry)
    s = _seq(X)
    X.K[pkt, K_AT] = end + off
    X.K[pkt, K_ASEQ] = s
    X.K[pkt, K_HOP] = port
    X.K[pkt, K_LANE] = 1
    _fifo_append(X.P, port, P_LH, P_LT, X.K, K_NEXT, pkt)
    if X.P[port, P_LH] == pkt:
        push(X, end + off, s, E_DELIVER, pkt, 0)

# ---------------------------------------------------------------- PFC: net/lossless.py


@njit(cache=True, nogil=True, _nrt=False)
def _ser_big(X, port, b):
    # = Port.ser_ps(b) = -((-b * PS_BITS) // rate) for a queue of b bytes, exact in int64 beyond the
    # packet sizes _ser is bounded to (coverage): b = a * rn + c, so ceil(b * rd / rn) = a * rd + ceil(c * rd / rn)
    # with c * rd < rn * rd < 2^62 and a * rd at most the result (a drain time: coverage bounds it)
    rn = X.P[port, P_RN]
    rd = X.P[port, P_RD]
    if rn == 1:
        return b * rd
    return (b // rn) * rd - ((-((b % rn) * rd)) // rn)


@njit(cache=True, nogil=True, _nrt=False)
def _drain_ps(X, port, b):
    # = b * PS_BITS // port.rate (LosslessPort.enqueue's peak), floor(b * rd / rn) split as in _ser_big
    rn = X.P[port, P_RN]
    rd = X.P[port, P_RD]
    if rn == 1:
        return b * rd
    return (b // rn) * rd + ((b % rn) * rd) // rn


@njit(cache=True, nogil=True, _nrt=False)
def _signal(X, t, port, pause):
    # = Pfc.signal: the peer of ``port`` sends XOFF (pause) or XON, in effect one link delay plus
    #   the transmitter's response time later (kernel.schedule: the seq drawn now)
    push(X, t + X.P[port, P_PFCD], _seq(X), E_PAUSE if pause else E_RESUME, port, 0)


@njit(cache=True, nogil=True, _nrt=False)
def _lstart(X, port, t):
    # = LosslessPort._start: the strict-priority FIFO first (never paused), then the lossless class
    pkt = X.P[port, P_SQH]
    if pkt >= 0:
        _fifo_popleft(X.P, port, P_SQH, P_SQT, X.K, K_NEXT)
    else:
        pkt = X.P[port, P_LQH]
        if pkt >= 0 and not X.P[port, P_PAUSED]:
            _fifo_popleft(X.P, port, P_LQH, P_LQT, X.K, K_NEXT)
        else:
            X.P[port, P_SENDING] = 0
            return
    X.P[port, P_SENDING] = 1
    X.P[port, P_CUR] = pkt
    wire = X.K[pkt, K_WIRE]
    done = t + _ser(X, port, wire)
    X.P[port, P_TXB] += wire
    X.P[port, P_TXP] += X.K[pkt, K_NPK]
    if X.K[pkt, K_KIND] != DATA:
        X.P[port, P_CB] += wire
        X.P[port, P_CP] += 1
    else:
        sw = X.P[port, P_SW]
        q = X.P[port, P_QBYTES] - wire          # bytes queued behind it as it starts to leave
        if sw >= 0 and X.S[sw, S_DEQ] and X.S[sw, S_KMIN] >= 0 and q > X.S[sw, S_KMIN] and _mark(X, sw, q, pkt):
            X.K[pkt, K_CE] = 1
            X.P[port, P_ECN] += 1
        if X.g[G_STAMP]:                        # = if pfc.stamp: tel.append(...)
            _tel_push(X, pkt, done, X.P[port, P_TXB], q, port)
    push(X, done, _seq(X), E_LDONE, port, 0)


@njit(cache=True, nogil=True, _nrt=False)
def _lenqueue(X, port, t, pkt, strict):
    # = LosslessPort.enqueue(t, pkt, strict)
    wire = X.K[pkt, K_WIRE]
    qb = X.P[port, P_QBYTES] + wire
    X.P[port, P_QBYTES] = qb
    bu = X.P[port, P_BUSY]
    X.P[port, P_BUSY] = (bu if bu > t else t) + _ser(X, port, wire)
    pk = _drain_ps(X, port, qb)
    if pk > X.P[port, P_PEAK]:
        X.P[port, P_PEAK] = pk
    if strict:
        _fifo_append(X.P, port, P_SQH, P_SQT, X.K, K_NEXT, pkt)
    else:
        _fifo_append(X.P, port, P_LQH, P_LQT, X.K, K_NEXT, pkt)
    if not X.P[port, P_SENDING]:
        _lstart(X, port, t)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _ldone(X, t, port):
    # = LosslessPort._done
    pkt = X.P[port, P_CUR]
    X.P[port, P_CUR] = -1
    wire = X.K[pkt, K_WIRE]
    X.P[port, P_QBYTES] -= wire
    ing = X.K[pkt, K_INPORT]
    if ing >= 0:
        X.K[pkt, K_INPORT] = -1
        X.P[ing, P_INGB] -= wire
        if X.P[ing, P_XOFF] and X.P[ing, P_INGB] <= X.g[G_XON]:
            X.P[ing, P_XOFF] = 0
            _signal(X, t, ing, False)
    _enqueue_arrival(X, port, pkt, t + X.P[port, P_OFFSET])
    _lstart(X, port, t)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _lossless_arrive(X, sw, t, pkt):
    # = LosslessSwitch.arrive: a packet of a strict-priority kind joins the port's strict FIFO, unaccounted
    #   to its ingress link (no lanes under PFC: every switch is lossless, so the hop is a port)
    ing = X.K[pkt, K_HOP]
    _advance_inflight(X, ing)
    port = _choose(X, sw, t, pkt)
    kind = X.K[pkt, K_KIND]
    if (X.g[G_STRICT] >> kind) & 1:
        _lenqueue(X, port, t, pkt, True)
        return
    if kind == DATA:
        if X.g[G_STAMP]:
            X.K[pkt, K_WIRE] += X.g[G_INT_FIRST] if X.K[pkt, K_TELN] < 0 else X.g[G_INT_HOP]
        kmin = X.S[sw, S_KMIN]
        qb = X.P[port, P_QBYTES]
        if kmin >= 0 and not X.S[sw, S_DEQ] and qb > kmin and _mark(X, sw, qb, pkt):
            X.K[pkt, K_CE] = 1
            X.P[port, P_ECN] += 1
    X.K[pkt, K_INPORT] = ing
    b = X.P[ing, P_INGB] + X.K[pkt, K_WIRE]
    X.P[ing, P_INGB] = b
    if b > X.P[ing, P_INGPK]:
        X.P[ing, P_INGPK] = b
    if not X.P[ing, P_XOFF] and b > X.g[G_XOFF]:
        X.P[ing, P_XOFF] = 1
        _signal(X, t, ing, True)
    _lenqueue(X, port, t, pkt, False)


@njit(cache=True, nogil=True, _nrt=False)
def _apply_pause(X, t, port):
    # = Pfc._apply_pause
    if X.P[port, P_PAUSED]:
        return
    X.P[port, P_PAUSED] = 1
    X.P[port, P_PEV] += 1
    X.P[port, P_PSINCE] = t
    X.g[G_PAUSES] += 1
    if X.P[port, P_NICP] < 0:
        X.P[port, P_BUSY] += X.g[G_PENALTY]


@njit(cache=True, nogil=True, _nrt=False)
def _apply_resume(X, t, port):
    # = Pfc._apply_resume
    if not X.P[port, P_PAUSED]:
        return
    X.P[port, P_PAUSED] = 0
    X.P[port, P_PPS] += t - X.P[port, P_PSINCE]
    if X.P[port, P_NICP] >= 0:
        _kick(X, X.P[port, P_NICP], t)
    else:
        X.P[port, P_BUSY] = t + _ser_big(X, port, X.P[port, P_QBYTES])
        if not X.P[port, P_SENDING]:
            _lstart(X, port, t)

# ---------------------------------------------------------------- NIC


@njit(cache=True, nogil=True, _nrt=False)
def _kick(X, nic, t):
    # = Nic.kick (a paused port is kicked by its resume)
    if X.P[X.N[nic, N_PORT], P_PAUSED]:
        return
    bu = X.P[X.N[nic, N_PORT], P_BUSY]
    if bu > t:
        t = bu
    if X.N[nic, N_BUSY] and X.N[nic, N_PEND] <= t:
        return
    X.N[nic, N_BUSY] = 1
    X.N[nic, N_PEND] = t
    X.N[nic, N_TOKEN] += 1
    push(X, t, _seq(X), E_TX, nic, X.N[nic, N_TOKEN])


@njit(cache=True, nogil=True, _nrt=False)
def _act_append(X, nic, slot):
    # = active.append(qp) (the queue pair's slot of this port: QueuePair.nicmask's bit)
    _fifo_append(X.N, nic, N_AH, N_AT, X.QN, QN_NEXT, slot)
    X.N[nic, N_AL] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _act_popleft(X, nic):
    X.N[nic, N_AL] -= 1
    return _fifo_popleft(X.N, nic, N_AH, N_AT, X.QN, QN_NEXT)


@njit(cache=True, nogil=True, _nrt=False)
def qp_init(X, q, row, uid, flo, src, dst, h, size, npsn, s0, nn, nic0, base, line, rate, rport, rl0, rln, nvlink,
            onsent):
    """A new queue pair's row ``q`` (CompiledKernel.register: one call rather than a numpy write per
    field): its identity, message row, hash, size in PSNs, NIC slots from ``s0`` (``nn`` of them; the
    first on NIC ``nic0``, any others set by Python), arena from ``base``, line and pacing rate, the
    ports its receiver replies by (``rport``, or -1 and the list ``rl0``, ``rln`` in X.RL), ``nvlink``:
    an NVLink queue pair (no ACK, nothing for the sender: done sending as far as the sender goes);
    and its message's queue pairs (the first one's row; ``onsent``: the send-completion hook armed).
    Returns False if the message's queue pairs were not created together (rows q0.. in a row)."""
    if X.M[row, M_QN] == 0:
        X.M[row, M_Q0] = q
        X.M[row, M_ONSENT] = onsent
    elif X.M[row, M_Q0] + X.M[row, M_QN] != q:
        return False
    X.M[row, M_QN] += 1
    Q = X.Q
    Q[q, Q_UID] = uid
    Q[q, Q_FLO] = flo
    Q[q, Q_MSG] = row
    Q[q, Q_SRC] = src
    Q[q, Q_DST] = dst
    X.q_hash[q] = h
    Q[q, Q_SIZE] = size
    Q[q, Q_NPSN] = npsn
    Q[q, Q_N0] = s0
    Q[q, Q_NN] = nn
    X.QN[s0, QN_QP] = q
    X.QN[s0, QN_NIC] = nic0
    Q[q, Q_BASE] = base
    Q[q, Q_ACTIVE] = 1
    Q[q, Q_LINE] = line
    X.QF[q, QF_RATE] = rate
    if nvlink:
        Q[q, Q_DONE] = 1
    else:
        Q[q, Q_RPORT] = rport
        Q[q, Q_RL0] = rl0
        Q[q, Q_RLN] = rln
    return True


@njit(cache=True, nogil=True, _nrt=False)
def nic_add(X, slot, t):
    # = Nic.add of the queue pair and port of ``slot``
    q = X.QN[slot, QN_QP]
    nic = X.QN[slot, QN_NIC]
    if X.Q[q, Q_RH] < 0:
        psn = X.Q[q, Q_SEQ]
        if psn >= X.Q[q, Q_NPSN]:
            return
        if X.Q[q, Q_HASWIN] and X.Q[q, Q_OUTB]:
            payload = X.Q[q, Q_SIZE] - psn * X.g[G_MTU]
            if payload > X.g[G_SEG]:
                payload = X.g[G_SEG]
            if X.Q[q, Q_OUTB] + payload > X.QF[q, QF_WIN]:
                return                  # window still full
        nok = X.Q[q, Q_NOK]
        if nok > t:
            t = nok
    if not X.QN[slot, QN_IN]:
        X.QN[slot, QN_IN] = 1
        _act_append(X, nic, slot)
    _kick(X, nic, t)


@njit(cache=True, nogil=True, _nrt=False)
def _ctrl_out(X, nic, t, pkt):
    # = Nic._ctrl_out
    port = X.N[nic, N_PORT]
    bu = X.P[port, P_BUSY]
    if bu < t:
        bu = t
    wire = X.K[pkt, K_WIRE]
    bu += _ser(X, port, wire)
    X.P[port, P_BUSY] = bu
    X.P[port, P_TXB] += wire
    X.P[port, P_CB] += wire
    X.P[port, P_CP] += 1
    X.P[port, P_TXP] += 1
    _enqueue_arrival(X, port, pkt, bu + X.P[port, P_OFFSET])


@njit(cache=True, nogil=True, _nrt=False)
def _free_at(X, nic, now):
    # = Nic.free_at: when the wire is free of the packet on it and the control packets held
    port = X.N[nic, N_PORT]
    bu = X.P[port, P_BUSY]
    if bu < now:
        bu = now
    c = X.N[nic, N_CH]
    while c >= 0:
        bu += _ser(X, port, X.K[c, K_WIRE])
        c = X.K[c, K_NEXT]
    return bu


@njit(cache=True, nogil=True, _nrt=False)
def _reply_nic(X, q, now):
    # = qp.r_port or PacketEngine.reply_nic(qp): the port fixed at registration (one eligible port, or
    #   a queue pair on one port: nics[qp.hash % n]), else the receiving host's eligible port towards
    #   the sender whose wire frees first, ties in turn from (hash + the message's ACKs and NAKs sent) % n
    r = X.Q[q, Q_RPORT]
    if r >= 0:
        return r
    off = X.Q[q, Q_RL0]
    n = X.Q[q, Q_RLN]
    row = X.Q[q, Q_MSG]
    # (qp.hash + acks + naks_sent) % n with the 64-bit hash reduced first (the sum is a big int in Python)
    start = (np.int64(X.q_hash[q] % np.uint64(n)) + (X.M[row, M_ACKS] + X.M[row, M_NAKS_SENT]) % n) % n
    best = -1
    best_t = 0
    for i in range(n):
        nic = X.RL[off + (start + i) % n]
        bu = _free_at(X, nic, now)
        if best < 0 or bu < best_t:
            best = nic
            best_t = bu
    return best


@njit(cache=True, nogil=True, _nrt=False)
def _send_ctrl(X, nic, t, pkt):
    # = Nic.send_ctrl (NvlinkNic.send_ctrl: serialised at once)
    if X.N[nic, N_NV]:
        _ctrl_out(X, nic, t, pkt)
        return
    bu = X.P[X.N[nic, N_PORT], P_BUSY]
    if X.N[nic, N_CH] >= 0 or (X.N[nic, N_BUSY] and X.N[nic, N_PEND] == (bu if bu > t else t)):
        _fifo_append(X.N, nic, N_CH, N_CT, X.K, K_NEXT, pkt)
        return
    _ctrl_out(X, nic, t, pkt)


@njit(cache=True, nogil=True, _nrt=False)
def _estimator(X, q):
    # = Sender._estimator: the queue pair holding q's RTT estimator, its connection's latest message's
    #   (the heir chain, compressed as it is walked)
    last = q
    while X.Q[last, Q_HEIR] >= 0:
        last = X.Q[last, Q_HEIR]
    while X.Q[q, Q_HEIR] >= 0 and X.Q[q, Q_HEIR] != last:
        nxt = X.Q[q, Q_HEIR]
        X.Q[q, Q_HEIR] = last
        q = nxt
    return last


@njit(cache=True, nogil=True, _nrt=False)
def _rto(X, q):
    # = Sender.rto. Adaptive: the estimator is the queue pair's own, or on a persistent connection its
    #   latest message's (the heir chain, _estimator); with ACK coalescing the wait allowance
    #   (ack_wait_ps at the queue pair's line rate, worked out when it was registered) until its last
    #   unit is out; the idle round trip (the queue pair's own flow's) is passed always
    #   (adaptive_rto_ps reads it only before the first sample)
    if X.g[G_RTO_ADAPTIVE]:
        est = q if X.Q[q, Q_HEIR] < 0 else _estimator(X, q)
        wait = X.Q[q, Q_WAIT] if X.g[G_COALESCE] and X.Q[q, Q_HIGH] < X.Q[q, Q_NPSN] else 0
        return adaptive_rto_ps(X.g[G_RTO_MIN], X.Q[q, Q_BRTT], X.Q[est, Q_SRTT], X.Q[est, Q_RTTVAR], X.g[G_RTO_K],
                               wait, X.Q[q, Q_TMO], X.g[G_RTO_JIT], X.Q[q, Q_U], X.g[G_RTO_MAX])
    return X.g[G_RTO_LOW] if X.Q[q, Q_OL] <= X.g[G_RTO_LOW_UNITS] else X.g[G_RTO_HIGH]


@njit(cache=True, nogil=True, _nrt=False)
def _rto_draw(X, q):
    # = Sender._draw
    X.Q[q, Q_DRAWS] += 1
    X.Q[q, Q_U] = np.int64(rto_draw(X.salt[SALT_RTO], np.uint64(X.Q[q, Q_UID]), np.uint64(X.Q[q, Q_DRAWS])))


@njit(cache=True, nogil=True, _nrt=False)
def _arm(X, q, t):
    # = Sender.arm
    X.Q[q, Q_ARMED] = 1
    if X.g[G_RTO_ADAPTIVE] and not X.Q[q, Q_DRAWS]:
        _rto_draw(X, q)
    X.Q[q, Q_RTO_AT] = t + _rto(X, q)
    push(X, X.Q[q, Q_RTO_AT], _seq(X), E_RTO, q, 0)


@njit(cache=True, nogil=True, _nrt=False)
def _on_sent(X, row, done):
    # = st.on_sent(st, done), PacketEngine._conn_sent: the hook disarmed (on_sent = None) and
    #   _next_on_connection scheduled at ``done`` (its seq drawn here, as kernel.schedule draws it)
    X.M[row, M_ONSENT] = 0
    push(X, done, _seq(X), E_SENT, row, 0)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _nic_tx(X, nic, t, token):
    # = Nic.tx
    X.N[nic, N_CALLS] += 1
    if token != X.N[nic, N_TOKEN]:
        return
    port = X.N[nic, N_PORT]
    if X.N[nic, N_CH] >= 0:
        c = X.N[nic, N_CH]
        while c >= 0:
            nx = X.K[c, K_NEXT]
            _ctrl_out(X, nic, t, c)
            c = nx
        X.N[nic, N_CH] = -1
        X.N[nic, N_CT] = -1
        t = X.P[port, P_BUSY]
    bu = X.P[port, P_BUSY]
    if bu > t:
        X.N[nic, N_PEND] = bu
        push(X, bu, _seq(X), E_TX, nic, token)
        return
    if X.P[port, P_PAUSED]:                  # PFC: resumed by the engine
        X.N[nic, N_BUSY] = 0
        return
    mtu = X.g[G_MTU]
    seg = X.g[G_SEG]
    wake = -1
    for _ in range(X.N[nic, N_AL]):
        slot = _act_popleft(X, nic)
        q = X.QN[slot, QN_QP]
        cause = -1
        psn = 0
        while X.Q[q, Q_RH] >= 0:
            d = X.Q[q, Q_RH]
            psn = X.D[d, D_PSN]
            cause = X.D[d, D_VAL]
            if X.a_flag[X.Q[q, Q_BASE] + psn] & F_LOST:
                break
            _rtx_popleft(X, q)
            cause = -1
        if cause < 0:
            psn = X.Q[q, Q_SEQ]
            if psn >= X.Q[q, Q_NPSN]:
                X.QN[slot, QN_IN] = 0
                continue
        nok = X.Q[q, Q_NOK]
        if nok > t:
            _act_append(X, nic, slot)
            if wake < 0 or nok < wake:
                wake = nok
            continue
        size = X.Q[q, Q_SIZE]
        payload = size - psn * mtu
        if payload > seg:
            payload = seg
        if X.Q[q, Q_HASWIN] and X.Q[q, Q_OUTB] and X.Q[q, Q_OUTB] + payload > X.QF[q, QF_WIN]:
            X.QN[slot, QN_IN] = 0               # the ACK that opens the window puts it back
            continue
        npk = -(-payload // mtu)
        row = X.Q[q, Q_MSG]
        a = X.Q[q, Q_BASE] + psn
        if cause >= 0:
            _rtx_popleft(X, q)
            X.a_flag[a] &= ~F_LOST
            X.a_resent[a] = t
        else:
            X.Q[q, Q_SEQ] = psn + npk
            if psn < X.Q[q, Q_HIGH]:
                cause = X.Q[q, Q_GBC]
                X.a_resent[a] = t
            else:
                X.Q[q, Q_HIGH] = psn + npk
                X.M[row, M_INJ] += payload
        if cause >= 0:
            X.m_rtx[row, cause] += payload
        X.Q[q, Q_OUTB] += payload
        _out_append(X, q, psn, t)
        end = X.Q[q, Q_SEQ] * mtu
        X.Q[q, Q_SENTB] = end if end < size else size
        wire = payload + npk * X.g[G_HDR]
        pkt = _pkt(X, q, X.Q[q, Q_DST], wire, payload, psn, t, npk, port, DATA)
        ser = _ser(X, port, wire)
        done = t + ser
        X.P[port, P_BUSY] = done
        if X.M[row, M_ONSENT] and X.M[row, M_INJ] == X.M[row, M_SIZE]:
            _on_sent(X, row, done)      # its last new byte: the connection's next message may start
        X.P[port, P_TXB] += wire
        X.P[port, P_TXP] += npk
        if ser > X.P[port, P_PEAK]:
            X.P[port, P_PEAK] = ser
        rate = X.QF[q, QF_RATE]
        if rate < X.Q[q, Q_LINE]:
            X.Q[q, Q_NOK] = t + pacing_gap_ps(wire, rate)
        _cc_on_send(X, q, t, payload)
        if not X.Q[q, Q_ARMED]:
            _arm(X, q, t)
        X.N[nic, N_SENT] += 1
        _enqueue_arrival(X, port, pkt, done + X.P[port, P_OFFSET])
        if X.N[nic, N_AL] == 0 and X.Q[q, Q_RH] < 0 and X.Q[q, Q_SEQ] >= X.Q[q, Q_NPSN]:
            X.QN[slot, QN_IN] = 0
            X.N[nic, N_BUSY] = 0
            return
        _act_append(X, nic, slot)
        X.N[nic, N_PEND] = done
        push(X, done, _seq(X), E_TX, nic, token)
        return
    if wake >= 0:
        X.N[nic, N_PEND] = wake
        push(X, wake, _seq(X), E_TX, nic, token)
    else:
        X.N[nic, N_BUSY] = 0

# ---------------------------------------------------------------- sender


@njit(cache=True, nogil=True, _nrt=False)
def _payload(X, q, psn):
    # = Sender.payload
    p = X.Q[q, Q_SIZE] - psn * X.g[G_MTU]
    return p if p < X.g[G_SEG] else X.g[G_SEG]


@njit(cache=True, nogil=True, _nrt=False)
def _kick_qp(X, q, t):
    # = Sender.kick: for nic in qp.nics: nic.add(t, qp)
    s0 = X.Q[q, Q_N0]
    for slot in range(s0, s0 + X.Q[q, Q_NN]):
        nic_add(X, slot, t)


@njit(cache=True, nogil=True, _nrt=False)
def _advance(X, q, t, cum):
    # = Sender._advance
    newly = 0
    if cum > X.Q[q, Q_UNA]:
        psn = X.Q[q, Q_UNA]
        base = X.Q[q, Q_BASE]
        while psn < cum:
            f = X.a_flag[base + psn]
            if f & F_SACKED:
                X.a_flag[base + psn] = f & ~F_SACKED
            elif f & F_LOST:
                X.a_flag[base + psn] = f & ~F_LOST
            else:
                newly += _payload(X, q, psn)
            psn += X.g[G_CELL]
        X.Q[q, Q_UNA] = cum
        X.Q[q, Q_TMO] = 0
        X.Q[q, Q_RTO_AT] = t + _rto(X, q)
        end = cum * X.g[G_MTU]
        X.Q[q, Q_ACKB] = end if end < X.Q[q, Q_SIZE] else X.Q[q, Q_SIZE]
    return newly


@njit(cache=True, nogil=True, _nrt=False)
def _stale(X, q, psn, ts):
    # psn < una or psn in sacked or (psn in resent and resent[psn] != ts) or psn in lost
    a = X.Q[q, Q_BASE] + psn
    r = X.a_resent[a]
    return (psn < X.Q[q, Q_UNA] or X.a_flag[a] & F_SACKED or (r != ABSENT and r != ts)
            or X.a_flag[a] & F_LOST)


@njit(cache=True, nogil=True, _nrt=False)
def _widen(X, q):
    # = qp.reo = min(2 * (qp.reo or self.reo), self.reo_max)
    w = 2 * (X.Q[q, Q_REO] if X.Q[q, Q_REO] else X.g[G_REO])
    X.Q[q, Q_REO] = w if w < X.g[G_REO_MAX] else X.g[G_REO_MAX]


@njit(cache=True, nogil=True, _nrt=False)
def _sack_bitmap(X, q, pkt):
    # = Sender._on_ack's coalesced branch: every unit of the ACK's SACK bitmap (held beyond its
    #   cumulative PSN) acknowledged selectively (bit i is the unit at PSN seq + i x cell; the order of
    #   the bits does not matter: sets and a sum); returns the bytes newly acknowledged
    newly = 0
    r = X.K[pkt, K_SACKS]
    if r < 0:
        return 0
    first = X.K[pkt, K_SEQ]
    una = X.Q[q, Q_UNA]
    base = X.Q[q, Q_BASE]
    cell = X.g[G_CELL]
    for w in range(X.BM.shape[1] - 1):
        v = X.BM[r, 1 + w]
        if v == 0:
            continue
        for b in range(64):
            if (v >> b) & 1:
                psn = first + (64 * w + b) * cell
                a = base + psn
                if psn >= una and not X.a_flag[a] & F_SACKED:
                    X.a_flag[a] |= F_SACKED
                    if X.a_flag[a] & F_LOST:
                        X.a_flag[a] &= ~F_LOST
                    else:
                        newly += _payload(X, q, psn)
    return newly


@njit(cache=True, nogil=True, _nrt=False)
def _rack_scan(X, q, limit):
    # = Sender._rack_scan: RACK within the SACK bitmap's reach (units marked lost stay in the
    #   outstanding list until they reach its front)
    una = X.Q[q, Q_UNA]
    reach = una + X.g[G_SACK_REACH]
    base = X.Q[q, Q_BASE]
    found = False
    d = X.Q[q, Q_OH]
    while d >= 0:
        psn = X.D[d, D_PSN]
        ts = X.D[d, D_VAL]
        d = X.D[d, D_NEXT]
        if ts >= limit:
            break
        if psn >= reach or _stale(X, q, psn, ts):
            continue
        X.a_flag[base + psn] |= F_LOST
        X.Q[q, Q_OUTB] -= _payload(X, q, psn)
        _rtx_append(X, q, psn, C_SACK)
        found = True
    return found


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _on_ack(X, q, t, pkt):
    # = Sender._on_ack: an ACK in the per-unit format (naming its trigger), or with ACK coalescing in
    #   the coalesced format (a SACK bitmap; its INT the latest-sent unit's since the previous ACK, its
    #   echoed send time that unit's); D-SACKs and RTT samples outside the legacy set-up; RACK for a
    #   selective receiver (within the SACK bitmap's reach with coalescing), the outstanding list's
    #   acknowledged head dropped for go-back-N; then the congestion-control hook with the ACK's INT
    newly = _advance(X, q, t, X.K[pkt, K_SEQ])
    s = X.K[pkt, K_SACK]
    base = X.Q[q, Q_BASE]
    td = X.K[pkt, K_TDATA]
    if s >= 0:
        a = base + s
        if s >= X.Q[q, Q_UNA] and not X.a_flag[a] & F_SACKED:
            X.a_flag[a] |= F_SACKED
            if X.a_flag[a] & F_LOST:
                X.a_flag[a] &= ~F_LOST
            else:
                newly += _payload(X, q, s)
        if td > X.Q[q, Q_RACK]:
            X.Q[q, Q_RACK] = td
        r = X.a_resent[a]
        if r != ABSENT and td < r:
            X.g[G_SPURIOUS] += 1
            if not X.g[G_DSACK]:
                _widen(X, q)
            else:
                X.a_resent[a] = -1            # counted now: the resend's D-SACK will not count again
                if r > X.Q[q, Q_REOT]:
                    _widen(X, q)
                    X.Q[q, Q_REOT] = t
    elif X.g[G_DSACK]:
        newly += _sack_bitmap(X, q, pkt)      # (none: -1 the per-unit format, -2 empty)
        d = X.K[pkt, K_DSACK]
        if d < 0:
            if td > X.Q[q, Q_RACK]:
                X.Q[q, Q_RACK] = td
        else:                                 # a duplicate arrived: some resend of it was not needed
            X.g[G_DSACKS] += 1
            a = base + d
            if X.a_flag[a] & F_PROBED:        # = probed and d in probed
                X.g[G_SPROBES] += 1
                X.a_flag[a] &= ~F_PROBED
                if td == X.a_resent[a] and td > X.Q[q, Q_RACK]:
                    X.Q[q, Q_RACK] = td       # the probe itself arrived (tail-loss probe)
            else:
                r = X.a_resent[a]
                if r != ABSENT and r >= 0:
                    X.g[G_SPURIOUS] += 1
                    if r > X.Q[q, Q_REOT]:
                        _widen(X, q)
                        X.Q[q, Q_REOT] = t
    if X.g[G_RTO_ADAPTIVE] and td > 0:
        # = Sender._rtt_sample (on a persistent connection the estimator is its latest message's)
        est = q if X.Q[q, Q_HEIR] < 0 else _estimator(X, q)
        X.Q[est, Q_SRTT], X.Q[est, Q_RTTVAR] = rtt_estimate(X.Q[est, Q_SRTT], X.Q[est, Q_RTTVAR], t - td)
    X.Q[q, Q_OUTB] -= newly
    if newly:
        X.Q[q, Q_TMO] = 0
        X.Q[q, Q_RTO_AT] = t + _rto(X, q)
    found = False
    if X.g[G_SELECTIVE]:
        limit = X.Q[q, Q_RACK] - (X.Q[q, Q_REO] if X.Q[q, Q_REO] else X.g[G_REO])
        while X.Q[q, Q_OH] >= 0:
            d = X.Q[q, Q_OH]
            psn = X.D[d, D_PSN]
            ts = X.D[d, D_VAL]
            if _stale(X, q, psn, ts):
                _out_popleft(X, q)
                continue
            if ts >= limit:
                break
            if X.g[G_SACK_REACH]:
                found = _rack_scan(X, q, limit)
                break
            _out_popleft(X, q)
            X.a_flag[base + psn] |= F_LOST
            X.Q[q, Q_OUTB] -= _payload(X, q, psn)
            _rtx_append(X, q, psn, C_SACK)
            found = True
    else:
        # go-back-N: no loss detection; what the cumulative PSN covers leaves the outstanding list
        while X.Q[q, Q_OH] >= 0 and X.D[X.Q[q, Q_OH], D_PSN] < X.Q[q, Q_UNA]:
            _out_popleft(X, q)
    if X.Q[q, Q_UNA] >= X.Q[q, Q_NPSN]:
        # = Sender._finish
        X.Q[q, Q_DONE] = 1
        X.Q[q, Q_OUTB] = 0
        X.Q[q, Q_ACTIVE] = 0
        _cc_on_done(X, q, t)
        return
    _cc_on_ack(X, q, t, X.K[pkt, K_SEQ], newly, pkt)
    if found or newly:
        _kick_qp(X, q, t)


@njit(cache=True, nogil=True, _nrt=False)
def _rewind(X, q, t, psn, cause):
    # = Sender._rewind (go-back-N: resend everything from psn). Its ``lost.clear()`` has nothing to
    #   clear here: a go-back-N sender never presumes a unit lost (no RACK, no probe), so no F_LOST
    #   flag of the queue pair is set
    X.Q[q, Q_SEQ] = psn
    X.Q[q, Q_GBC] = cause
    X.Q[q, Q_GBT] = t
    while X.Q[q, Q_OH] >= 0:
        _out_popleft(X, q)
    _rtx_clear(X, q)
    X.Q[q, Q_OUTB] = 0


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _on_nak(X, q, t, pkt):
    # = Sender._on_nak
    e = X.K[pkt, K_SEQ]
    newly = _advance(X, q, t, e)
    X.M[X.Q[q, Q_MSG], M_NAKS] += 1
    if X.K[pkt, K_TDATA] < X.Q[q, Q_GBT]:
        X.g[G_NAKS_IGNORED] += 1              # triggered by a unit sent before the last rewind
        return
    if e < X.Q[q, Q_SEQ]:
        _rewind(X, q, t, e, C_NAK)
    else:
        X.Q[q, Q_OUTB] -= newly
    _cc_on_ack(X, q, t, e, newly, pkt)
    _kick_qp(X, q, t)


@njit(cache=True, nogil=True, _nrt=False)
def _stop_message(X, row):
    # = PacketEngine._stop
    for q in range(X.M[row, M_Q0], X.M[row, M_Q0] + X.M[row, M_QN]):
        X.Q[q, Q_DONE] = 1
        X.Q[q, Q_ACTIVE] = 0
        _rtx_clear(X, q)
        X.Q[q, Q_SEQ] = X.Q[q, Q_NPSN]


@njit(cache=True, nogil=True, _nrt=False)
def stop_message(X, row):
    """= ``PacketEngine._stop`` called from Python (a connection's later messages flushed when a queue
    pair of an earlier one gave up): the queue pairs of message row ``row`` stopped."""
    _stop_message(X, row)


@njit(cache=True, nogil=True, _nrt=False)
def _probe_unit(X, q, psn):
    # = Sender._probe_unit
    a = X.Q[q, Q_BASE] + psn
    X.a_flag[a] |= F_LOST
    X.Q[q, Q_OUTB] -= _payload(X, q, psn)
    _rtx_appendleft(X, q, psn, C_TIMEOUT)
    X.a_flag[a] |= F_PROBED
    X.g[G_PROBES] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _probe(X, q):
    # = Sender._probe
    while X.Q[q, Q_OH] >= 0:
        d = X.Q[q, Q_OH]
        if _stale(X, q, X.D[d, D_PSN], X.D[d, D_VAL]):
            _out_popleft(X, q)
            continue
        break
    una = X.Q[q, Q_UNA]
    base = X.Q[q, Q_BASE]
    # (una < high tested first: una may be npsn, whose flag is the next queue pair's; _on_rto
    #  only probes with una < high, so the order changes nothing)
    if una < X.Q[q, Q_HIGH] and not X.a_flag[base + una] & F_LOST:
        _probe_unit(X, q, una)
        return
    # (within reach of the SACK bitmap with ACK coalescing; else the whole queue pair)
    reach = una + X.g[G_SACK_REACH] if X.g[G_SACK_REACH] else X.Q[q, Q_NPSN]
    d = X.Q[q, Q_OH]
    while d >= 0:
        psn = X.D[d, D_PSN]
        ts = X.D[d, D_VAL]
        a = base + psn
        r = X.a_resent[a]
        if not (psn >= reach or X.a_flag[a] & F_SACKED or X.a_flag[a] & F_LOST or (r != ABSENT and r != ts)):
            _probe_unit(X, q, psn)
            return
        d = X.D[d, D_NEXT]


@njit(cache=True, nogil=True, _nrt=False)
def _on_rto(X, q, t):
    # = Sender._on_rto
    if X.Q[q, Q_DONE] or (X.Q[q, Q_UNA] >= X.Q[q, Q_HIGH] and X.Q[q, Q_RH] < 0 and X.Q[q, Q_SEQ] >= X.Q[q, Q_NPSN]):
        X.Q[q, Q_ARMED] = 0
        return
    if X.Q[q, Q_UNA] >= X.Q[q, Q_HIGH]:
        X.Q[q, Q_ARMED] = 0
        return
    if t < X.Q[q, Q_RTO_AT]:
        push(X, X.Q[q, Q_RTO_AT], _seq(X), E_RTO, q, 0)
        return
    X.Q[q, Q_TMO] += 1
    X.g[G_TIMEOUTS] += 1
    adaptive = X.g[G_RTO_ADAPTIVE]
    if adaptive:
        _rto_draw(X, q)
    if X.Q[q, Q_TMO] > X.g[G_RETRY]:
        X.Q[q, Q_ARMED] = 0
        # = PacketEngine.fail_qp: stop the message's queue pairs here; Python records the failure
        row = X.Q[q, Q_MSG]
        _stop_message(X, row)
        if not X.M[row, M_DONE]:
            X.M[row, M_DONE] = 1
            X.g[G_PY_KIND] = P_FAIL
            X.g[G_PY_A] = q
        return
    if not X.g[G_SELECTIVE]:
        _rewind(X, q, t, X.Q[q, Q_UNA], C_TIMEOUT)    # go-back-N, either timer mode
    elif adaptive:
        _probe(X, q)
    else:
        base = X.Q[q, Q_BASE]
        while X.Q[q, Q_OH] >= 0:
            # (each outstanding node is freed before its retransmission's is taken: the loop needs no
            #  free nodes of its own, however many units are outstanding)
            d = X.Q[q, Q_OH]
            psn = X.D[d, D_PSN]
            ts = X.D[d, D_VAL]
            _out_popleft(X, q)
            if not _stale(X, q, psn, ts):
                X.a_flag[base + psn] |= F_LOST
                X.Q[q, Q_OUTB] -= _payload(X, q, psn)
                _rtx_append(X, q, psn, C_TIMEOUT)
    X.Q[q, Q_RTO_AT] = t + _rto(X, q)
    push(X, X.Q[q, Q_RTO_AT], _seq(X), E_RTO, q, 0)
    _kick_qp(X, q, t)

# ---------------------------------------------------------------- congestion control: cc/base.py
# The hooks of CongestionControl, each dispatching on the algorithm's code (X.g[G_CC]) where the Python
# sender and NIC call them: on_send (Nic.tx, after the pacing gap), on_ack (Sender._on_ack after RACK,
# unless the queue pair finished; Sender._on_nak), on_cnp (Sender.on_ctrl), on_done (Sender._finish),
# and the algorithm's timers (agenda entries E_CC_TIMER). ``start`` runs in Python (PacketEngine._start
# calls it before the NIC registers the queue pair) and CompiledKernel.register copies what it set:
# the flow's rate and window (X.QF[:, QF_RATE], QF_WIN with Q_HASWIN) and the algorithm's state. The NIC
# applies rate and window as Nic.add and Nic.tx do (window: nic_add, _nic_tx; pacing: _nic_tx).
# Only the algorithms in coverage.CC reach here; a hook an algorithm does not override is a no-op.


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _cc_on_send(X, q, t, nbytes):
    # = nic.on_send(flow, t, payload): DCQCN's byte counter (CC_NONE and CC_TELEMETRY do not override it)
    cc = X.g[G_CC]
    if cc == CC_DCQCN:
        _dc_on_send(X, q, nbytes)
    elif cc == CC_DCQCN_CX:
        _cx_on_send(X, q, nbytes)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _cc_on_ack(X, q, t, seq, newly, pkt):
    # = self._cc_ack(qp.flow, t, AckInfo(min(seq * mtu, size), newly, pkt.ce, pkt.tel, t - pkt.t_data))
    if X.g[G_CC] == CC_TELEMETRY:
        end = seq * X.g[G_MTU]
        size = X.Q[q, Q_SIZE]
        _tel_on_ack(X, q, end if end < size else size, pkt, t - X.K[pkt, K_TDATA])


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _cc_on_cnp(X, q, t):
    # = self.cc.on_cnp(qp.flow, t): DCQCN's reaction point (only the DCQCN algorithms send CNPs:
    #   cnp_interval_ps None otherwise)
    cc = X.g[G_CC]
    if cc == CC_DCQCN:
        _dc_on_cnp(X, q, t)
    elif cc == CC_DCQCN_CX:
        _cx_on_cnp(X, q, t)


@njit(cache=True, nogil=True, _nrt=False)
def _cc_on_done(X, q, t):
    # = self._cc_done(flow, t): DCQCN stops its timers (telemetry does not override on_done)
    cc = X.g[G_CC]
    if cc == CC_DCQCN:
        # = Dcqcn.on_done
        X.Q[q, DQ_AGEN] += 1
        X.Q[q, DQ_IGEN] += 1
        X.Q[q, DQ_FLAGS] &= ~(CF_ARUN | CF_IRUN)
    elif cc == CC_DCQCN_CX:
        # = DcqcnConnectX.on_done
        X.Q[q, XQ_IGEN] += 1
        X.Q[q, XQ_FLAGS] &= ~CF_IRUN


@njit(cache=True, nogil=True, _nrt=False)
def _cc_timer(X, t, q, code):
    # = an algorithm's timer callback (ctx.schedule(t, fn, (flow, generation))): ``code`` is the
    #   generation x 4 + which timer (TM_*)
    which = code & 3
    gen = code >> 2
    if X.g[G_CC] == CC_DCQCN:
        if which == TM_ALPHA:
            _dc_alpha_timer(X, t, q, gen)
        else:
            _dc_increase_timer(X, t, q, gen)
    elif which == TM_CHECK:
        _cx_rate_check(X, t, q)
    else:
        _cx_increase_timer(X, t, q, gen)

# ---------------------------------------------------------------- dcqcn: cc/dcqcn.py
# Dcqcn's hooks and timers mirrored line for line; the arithmetic is the module's own (dc_*, compiled from
# its source). A timer is an agenda entry E_CC_TIMER (queue pair, generation x 4 + TM_*), pushed where
# ctx.schedule is called (the seq drawn there). ``s is None`` never holds: every compiled flow was started.


@njit(cache=True, nogil=True, _nrt=False)
def _dc_increase(X, q):
    # = Dcqcn._increase
    rc, rt, recovered = dc_rate_increase(X.QF[q, DF_RC], X.QF[q, DF_RT], X.Q[q, DQ_T], X.Q[q, DQ_BC],
                                         X.g[G_DC_F], X.QF[q, DF_RAI], X.QF[q, DF_RHAI], float(X.Q[q, Q_LINE]))
    X.QF[q, DF_RC] = rc
    X.QF[q, DF_RT] = rt
    X.Q[q, DQ_FLAGS] |= CF_INCR
    if recovered:
        X.Q[q, DQ_FLAGS] &= ~CF_IRUN        # back at line rate: stop the increase timer
        X.Q[q, DQ_IGEN] += 1
        X.Q[q, DQ_BYTES] = 0
    X.QF[q, QF_RATE] = rc
    X.Q[q, DQ_FLAGS] |= CF_RATEF


@njit(cache=True, nogil=True, _nrt=False)
def _dc_on_cnp(X, q, t):
    # = Dcqcn.on_cnp
    if not X.Q[q, Q_ACTIVE]:
        return
    fl = X.Q[q, DQ_FLAGS]
    if not fl & CF_ARUN and X.Q[q, DQ_PHASE] != ABSENT:
        # alpha timer was parked while the flow ran at line rate: apply its missed expiries
        X.QF[q, DF_ALPHA] = dc_alpha_catch_up(X.QF[q, DF_ALPHA], X.f[F_DC_DECAY],
                                              (t - X.Q[q, DQ_PHASE]) // X.g[G_DC_K])
    X.Q[q, DQ_CNPS] += 1
    rc, rt, alpha = dc_rate_cut(X.QF[q, DF_RC], X.QF[q, DF_RT], X.QF[q, DF_ALPHA], X.QF[q, DF_MIN],
                                X.f[F_DC_DECAY], X.f[F_DC_G],
                                X.g[G_DC_CLAMP] != 0 or fl & CF_INCR != 0 or X.Q[q, DQ_CNPS] == 1)
    X.QF[q, DF_RC] = rc
    X.QF[q, DF_RT] = rt
    X.QF[q, DF_ALPHA] = alpha
    X.Q[q, DQ_T] = 0
    X.Q[q, DQ_BC] = 0
    X.Q[q, DQ_BYTES] = 0
    X.Q[q, DQ_PHASE] = ABSENT
    X.QF[q, QF_RATE] = rc
    # restart both timers (older events become stale through the generation counters)
    X.Q[q, DQ_FLAGS] = (fl & ~CF_INCR) | CF_RATEF | CF_ARUN | CF_IRUN
    X.Q[q, DQ_AGEN] += 1
    push(X, t + X.g[G_DC_K], _seq(X), E_CC_TIMER, q, X.Q[q, DQ_AGEN] * 4 + TM_ALPHA)
    X.Q[q, DQ_IGEN] += 1
    push(X, t + X.g[G_DC_TI], _seq(X), E_CC_TIMER, q, X.Q[q, DQ_IGEN] * 4 + TM_INC)


@njit(cache=True, nogil=True, _nrt=False)
def _dc_on_send(X, q, nbytes):
    # = Dcqcn.on_send
    if not X.Q[q, DQ_FLAGS] & CF_IRUN:         # at line rate nothing can increase
        return
    b = X.g[G_DC_B]
    X.Q[q, DQ_BYTES] += nbytes
    while X.Q[q, DQ_BYTES] >= b and X.Q[q, DQ_FLAGS] & CF_IRUN:
        X.Q[q, DQ_BYTES] -= b
        X.Q[q, DQ_BC] += 1
        _dc_increase(X, q)


@njit(cache=True, nogil=True, _nrt=False)
def _dc_alpha_timer(X, t, q, gen):
    # = Dcqcn._alpha_timer
    if gen != X.Q[q, DQ_AGEN] or not X.Q[q, Q_ACTIVE]:
        return
    X.QF[q, DF_ALPHA] *= X.f[F_DC_DECAY]       # (one IEEE multiplication, as Python's)
    if X.Q[q, DQ_FLAGS] & CF_IRUN:
        push(X, t + X.g[G_DC_K], _seq(X), E_CC_TIMER, q, gen * 4 + TM_ALPHA)
    else:
        # fully recovered: park the timer, remember its phase for the lazy catch-up in on_cnp
        X.Q[q, DQ_FLAGS] &= ~CF_ARUN
        X.Q[q, DQ_PHASE] = t


@njit(cache=True, nogil=True, _nrt=False)
def _dc_increase_timer(X, t, q, gen):
    # = Dcqcn._increase_timer
    if gen != X.Q[q, DQ_IGEN] or not X.Q[q, Q_ACTIVE]:
        return
    X.Q[q, DQ_T] += 1
    _dc_increase(X, q)
    if X.Q[q, DQ_FLAGS] & CF_IRUN:
        push(X, t + X.g[G_DC_TI], _seq(X), E_CC_TIMER, q, gen * 4 + TM_INC)

# ---------------------------------------------------------------- dcqcn_cx: cc/dcqcn_cx.py
# DcqcnConnectX's hooks and timers mirrored line for line; the arithmetic is the module's own (cx_*).


@njit(cache=True, nogil=True, _nrt=False)
def _cx_increase(X, q):
    # = DcqcnConnectX._increase
    rc, rt, recovered = cx_rate_increase(X.QF[q, XF_RC], X.QF[q, XF_RT], X.Q[q, XQ_TS], X.Q[q, XQ_BS],
                                         X.g[G_DC_F], X.f[F_CX_AI], X.f[F_CX_HAI], X.QF[q, XF_MAX])
    X.QF[q, XF_RC] = rc
    X.QF[q, XF_RT] = rt
    if recovered:
        X.Q[q, XQ_FLAGS] &= ~CF_IRUN        # back at the maximum: nothing left to increase
        X.Q[q, XQ_IGEN] += 1
        X.Q[q, XQ_BYTES] = 0
    X.QF[q, QF_RATE] = rc
    X.Q[q, XQ_FLAGS] |= CF_RATEF


@njit(cache=True, nogil=True, _nrt=False)
def _cx_start_increase(X, q, t):
    # = DcqcnConnectX._start_increase
    X.Q[q, XQ_TS] = 0
    X.Q[q, XQ_BS] = 0
    X.Q[q, XQ_BYTES] = 0
    X.Q[q, XQ_IGEN] += 1
    X.Q[q, XQ_FLAGS] |= CF_IRUN
    push(X, t + X.g[G_DC_TI], _seq(X), E_CC_TIMER, q, X.Q[q, XQ_IGEN] * 4 + TM_INC)


@njit(cache=True, nogil=True, _nrt=False)
def _cx_advance_alpha(X, q, t):
    # = DcqcnConnectX._advance_alpha
    n = (t - X.Q[q, XQ_T0]) // X.g[G_DC_K]
    if n <= X.Q[q, XQ_K]:
        return
    X.Q[q, XQ_ALPHA] = cx_alpha_periods(X.Q[q, XQ_ALPHA], X.Q[q, XQ_FLAGS] & CF_ACNP != 0, X.g[G_CX_G],
                                        n - X.Q[q, XQ_K])
    X.Q[q, XQ_FLAGS] &= ~CF_ACNP
    X.Q[q, XQ_K] = n


@njit(cache=True, nogil=True, _nrt=False)
def _cx_on_cnp(X, q, t):
    # = DcqcnConnectX.on_cnp
    if not X.Q[q, Q_ACTIVE]:
        return
    if X.Q[q, XQ_FLAGS] & CF_FIRST:
        X.Q[q, XQ_FLAGS] &= ~CF_FIRST
        X.Q[q, XQ_T0] = t
        X.Q[q, XQ_ALPHA] = X.g[G_CX_A0]
        if X.g[G_CX_HAS_FIRST]:
            r = cx_first_rate(X.f[F_CX_FIRST], X.QF[q, XF_MAX])
            X.QF[q, XF_RC] = r
            X.QF[q, XF_RT] = r
            X.QF[q, QF_RATE] = r
            X.Q[q, XQ_FLAGS] |= CF_RATEF
            _cx_start_increase(X, q, t)
        return
    _cx_advance_alpha(X, q, t)
    X.Q[q, XQ_FLAGS] |= CF_ACNP | CF_DCNP
    if not X.Q[q, XQ_FLAGS] & CF_DPEND:
        X.Q[q, XQ_FLAGS] |= CF_DPEND
        d = X.g[G_CX_D]
        t0 = X.Q[q, XQ_T0]
        push(X, t0 + ((t - t0) // d + 1) * d, _seq(X), E_CC_TIMER, q, TM_CHECK)


@njit(cache=True, nogil=True, _nrt=False)
def _cx_on_send(X, q, nbytes):
    # = DcqcnConnectX.on_send
    b = X.g[G_DC_B]
    if not X.Q[q, XQ_FLAGS] & CF_IRUN or not b:
        return
    X.Q[q, XQ_BYTES] += nbytes
    while X.Q[q, XQ_BYTES] >= b and X.Q[q, XQ_FLAGS] & CF_IRUN:
        X.Q[q, XQ_BYTES] -= b
        _cx_increase(X, q)
        X.Q[q, XQ_BS] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _cx_rate_check(X, t, q):
    # = DcqcnConnectX._rate_check
    X.Q[q, XQ_FLAGS] &= ~CF_DPEND
    if not X.Q[q, Q_ACTIVE] or not X.Q[q, XQ_FLAGS] & CF_DCNP:
        return
    _cx_advance_alpha(X, q, t)
    X.Q[q, XQ_FLAGS] &= ~CF_DCNP
    if X.g[G_DC_CLAMP] or X.Q[q, XQ_BS] > 0 or (X.g[G_CX_CLAMP_TI] and X.Q[q, XQ_TS] > 0):
        X.QF[q, XF_RT] = X.QF[q, XF_RC]
    X.QF[q, XF_RC] = cx_rate_cut(X.QF[q, XF_RC], X.Q[q, XQ_ALPHA], X.g[G_CX_SHIFT], X.f[F_CX_KEEP],
                                 X.f[F_CX_MINR], X.QF[q, XF_MAX])
    X.Q[q, XQ_CUTS] += 1
    X.QF[q, QF_RATE] = X.QF[q, XF_RC]
    X.Q[q, XQ_FLAGS] |= CF_RATEF
    _cx_start_increase(X, q, t)


@njit(cache=True, nogil=True, _nrt=False)
def _cx_increase_timer(X, t, q, gen):
    # = DcqcnConnectX._increase_timer
    if gen != X.Q[q, XQ_IGEN] or not X.Q[q, Q_ACTIVE]:
        return
    _cx_increase(X, q)
    X.Q[q, XQ_TS] += 1
    if X.Q[q, XQ_FLAGS] & CF_IRUN:
        push(X, t + X.g[G_DC_TI], _seq(X), E_CC_TIMER, q, gen * 4 + TM_INC)

# ---------------------------------------------------------------- telemetry: cc/telemetry.py


@njit(cache=True, nogil=True, _nrt=False)
def _tn(X, ts, val):
    # a deque node (ts, val) of a port history
    i = X.g[G_TNFREE]
    X.g[G_TNFREE] = X.TN[i, TN_NEXT]
    X.g[G_TNNFREE] -= 1
    X.TN[i, TN_TS] = ts
    X.TN[i, TN_VAL] = val
    X.TN[i, TN_NEXT] = -1
    X.TN[i, TN_PREV] = -1
    return i


@njit(cache=True, nogil=True, _nrt=False)
def _tn_free(X, i):
    X.TN[i, TN_NEXT] = X.g[G_TNFREE]
    X.g[G_TNFREE] = i
    X.g[G_TNNFREE] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _dq_append(X, h, head, tail, ts, val):
    # = deque.append((ts, val)) of port history h (its ends in columns head, tail of X.TH)
    i = _tn(X, ts, val)
    last = X.TH[h, tail]
    X.TN[i, TN_PREV] = last
    if last < 0:
        X.TH[h, head] = i
    else:
        X.TN[last, TN_NEXT] = i
    X.TH[h, tail] = i


@njit(cache=True, nogil=True, _nrt=False)
def _dq_popleft(X, h, head, tail):
    i = X.TH[h, head]
    nx = X.TN[i, TN_NEXT]
    X.TH[h, head] = nx
    if nx < 0:
        X.TH[h, tail] = -1
    else:
        X.TN[nx, TN_PREV] = -1
    _tn_free(X, i)


@njit(cache=True, nogil=True, _nrt=False)
def _dq_pop(X, h, head, tail):
    i = X.TH[h, tail]
    pv = X.TN[i, TN_PREV]
    X.TH[h, tail] = pv
    if pv < 0:
        X.TH[h, head] = -1
    else:
        X.TN[pv, TN_NEXT] = -1
    _tn_free(X, i)


@njit(cache=True, nogil=True, _nrt=False)
def _ht_home(X, q, pid):
    # the first slot of (queue pair, port) in the port histories' hash table (open addressing, linear probing)
    key = np.uint64(q * X.P.shape[0] + pid)
    return np.int64((key * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - X.g[G_HT_BITS]))


@njit(cache=True, nogil=True, _nrt=False)
def _ht_find(X, q, pid):
    """= s.ports.get(pid): the port history's row in X.TH, or -1 - the empty slot where it would go."""
    mask = len(X.HT) - 1
    i = _ht_home(X, q, pid)
    while True:
        h = X.HT[i]
        if h < 0:
            return -1 - i
        if X.TH[h, TH_Q] == q and X.TH[h, TH_PORT] == pid:
            return h
        i = (i + 1) & mask


@njit(cache=True, nogil=True, _nrt=False)
def tel_rehash(X):
    """Fill a new (empty) X.HT with every port history (after Python enlarged it: CompiledKernel._space)."""
    for h in range(X.g[G_TH_N]):
        X.HT[-1 - _ht_find(X, X.TH[h, TH_Q], X.TH[h, TH_PORT])] = h


@njit(cache=True, nogil=True, _nrt=False)
def _tel_space(X):
    # room for the port histories of one ACK (G_MAXHOP histories, 2 deque nodes each), the table at most half full
    m = X.g[G_MAXHOP]
    n = X.g[G_TH_N] + m
    return X.g[G_TNNFREE] >= 2 * m + SPACE and n < X.TH.shape[0] and 2 * n <= len(X.HT)


@njit(cache=True, nogil=True, _nrt=False)
def _port_sample(X, q, pid, ts, tx, ql):
    """= Telemetry._port_sample: (True, dt, dtx, qmin), or (False, 0, 0, 0) for None."""
    h = _ht_find(X, q, pid)
    if h < 0:
        # = s.ports[pid] = _PortHistory(ts, tx, q)
        slot = -1 - h
        h = X.g[G_TH_N]
        X.g[G_TH_N] = h + 1
        X.HT[slot] = h
        X.TH[h, TH_Q] = q
        X.TH[h, TH_PORT] = pid
        X.TH[h, TH_RH] = -1
        X.TH[h, TH_RT] = -1
        X.TH[h, TH_MH] = -1
        X.TH[h, TH_MT] = -1
        _dq_append(X, h, TH_RH, TH_RT, ts, tx)
        X.TH[h, TH_RN] = 1
        _dq_append(X, h, TH_MH, TH_MT, ts, ql)
        X.TH[h, TH_LTS] = ts
        X.TH[h, TH_LQ] = ql
        return False, 0, 0, 0
    if ts <= X.TH[h, TH_LTS]:
        return False, 0, 0, 0
    edge = ts - X.QF[q, TF_RSPAN]
    while X.TH[h, TH_RN] > 1 and X.TN[X.TN[X.TH[h, TH_RH], TN_NEXT], TN_TS] <= edge:
        _dq_popleft(X, h, TH_RH, TH_RT)
        X.TH[h, TH_RN] -= 1
    ref = X.TH[h, TH_RH]
    ref_ts = X.TN[ref, TN_TS]
    ref_tx = X.TN[ref, TN_VAL]
    _dq_append(X, h, TH_RH, TH_RT, ts, tx)
    X.TH[h, TH_RN] += 1
    edge = ts - X.QF[q, TF_QSPAN]
    while X.TH[h, TH_MH] >= 0 and X.TN[X.TH[h, TH_MH], TN_TS] < edge:
        _dq_popleft(X, h, TH_MH, TH_MT)
    lq = X.TH[h, TH_LQ]
    qmin = ql if ql < lq else lq
    if X.TH[h, TH_MH] >= 0 and X.TN[X.TH[h, TH_MH], TN_VAL] < qmin:
        qmin = X.TN[X.TH[h, TH_MH], TN_VAL]
    while X.TH[h, TH_MT] >= 0 and X.TN[X.TH[h, TH_MT], TN_VAL] >= ql:
        _dq_pop(X, h, TH_MH, TH_MT)
    _dq_append(X, h, TH_MH, TH_MT, ts, ql)
    X.TH[h, TH_LTS] = ts
    X.TH[h, TH_LQ] = ql
    dtx = tx - ref_tx
    return True, ts - ref_ts, (dtx if dtx > 0 else 0), qmin


@njit(cache=True, nogil=True, _nrt=False)
def _tel_window(X, q, update_wc):
    # = Telemetry._compute_window
    w, stage = reference_window(X.QF[q, TF_U], X.QF[q, TF_WC], X.Q[q, TQ_STAGE], X.f[F_ETA], X.g[G_TEL_MAXSTAGE],
                                X.QF[q, TF_WAI], X.QF[q, TF_WINIT], X.QF[q, TF_WMIN])
    if update_wc:
        X.QF[q, TF_WC] = w
        X.Q[q, TQ_STAGE] = stage
        X.Q[q, TQ_LUS] = X.Q[q, Q_SENTB]
    X.QF[q, TF_W] = w
    win, rate = window_and_rate(w, X.QF[q, TF_SCALE], X.QF[q, TF_T], X.Q[q, Q_LINE])
    X.QF[q, QF_WIN] = win
    X.QF[q, QF_RATE] = rate


@njit(cache=True, nogil=True, _nrt=False)
def _tel_on_ack(X, q, cum_bytes, pkt, rtt_ps):
    # = Telemetry.on_ack with the ACK's INT records (each names its port: the engine's stamps always do, so
    #   the branch for records without a port id never runs)
    n = X.K[pkt, K_TELN]
    if n <= 0:
        return                                  # = if s is None or not hops: return
    T = X.QF[q, TF_T]
    u_max = -1.0
    tau = 0
    per_hop = X.g[G_TEL_PERHOP]
    fwd_ps = 0.0
    if per_hop and X.Q[q, TQ_NH] != n:          # first ACK, or the path length changed
        for i in range(n):
            X.q_hu[q, i] = X.QF[q, TF_U]
            X.q_hts[q, i] = ABSENT
        X.Q[q, TQ_NH] = n
    for i in range(n):
        o = 5 * i
        ts = X.KT[pkt, o]
        bps = X.KT[pkt, o + 3]
        if bps <= 0:
            continue
        ql = X.KT[pkt, o + 2]
        fwd_ps += queue_delay_ps(ql, bps)
        ok, dt, dtx, qmin = _port_sample(X, q, X.KT[pkt, o + 4], ts, X.KT[pkt, o + 1], ql)
        if not ok:
            continue
        u = hop_utilisation(qmin, dtx, dt, bps, T)
        if per_hop:
            last_ts = X.q_hts[q, i]
            if last_ts == ABSENT:
                w = dt
                X.q_hts[q, i] = ts
            else:
                w = ts - last_ts
                if w <= 0:
                    w = 0
                else:
                    X.q_hts[q, i] = ts
            u = ewma_over_T(X.q_hu[q, i], u, w, T)
            X.q_hu[q, i] = u
        if u > u_max:
            u_max = u
            tau = dt
    if X.f[F_RTT_MAX] > 1.0 and rtt_ps > 0:
        # = Telemetry._unseen_delay
        srtt, scale = unseen_delay(X.QF[q, TF_SRTT], X.Q[q, TQ_HAVE_SRTT] != 0, rtt_ps, X.Q[q, Q_BRTT], fwd_ps,
                                   X.f[F_RTT_GAIN], T, X.f[F_RTT_MAX])
        X.QF[q, TF_SRTT] = srtt
        X.QF[q, TF_SCALE] = scale
        X.Q[q, TQ_HAVE_SRTT] = 1
    if per_hop:
        if u_max < 0:
            return
        m = X.q_hu[q, 0]                        # = max(hu)
        for i in range(1, n):
            if X.q_hu[q, i] > m:
                m = X.q_hu[q, i]
        X.QF[q, TF_U] = m
        _tel_window(X, q, cum_bytes > X.Q[q, TQ_LUS])
        return
    if u_max < 0:
        return                                  # no hop advanced in time: nothing measured
    X.QF[q, TF_U] = ewma_over_T(X.QF[q, TF_U], u_max, tau, T)
    _tel_window(X, q, cum_bytes > X.Q[q, TQ_LUS])

# ---------------------------------------------------------------- receiver


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _send_ack(X, q, t, seq, trigger):
    # = Receiver.send_now (kind ACK; ``trigger`` -1 = None), then reply_nic (_reply_nic)
    pkt = _pkt(X, q, X.Q[q, Q_SRC], X.g[G_ACK], 0, seq, t, 1, -1, ACK)
    if trigger >= 0:
        X.K[pkt, K_SACK] = X.K[trigger, K_SEQ]
        X.K[pkt, K_TDATA] = X.K[trigger, K_TTX]
        _tel_copy(X, pkt, trigger)
    else:
        X.K[pkt, K_SACK] = -1
    _ack_out(X, q, t, pkt)


@njit(cache=True, nogil=True, _nrt=False)
def _ack_out(X, q, t, pkt):
    # an ACK's ECN echo, the receiver's ACK state and counters, then reply_nic (_reply_nic)
    X.K[pkt, K_CE] = X.Q[q, Q_RCE]
    X.Q[q, Q_RCE] = 0
    X.Q[q, Q_RUNACK] = 0
    X.Q[q, Q_RACKS] += 1
    _send_ctrl(X, _reply_nic(X, q, t), t, pkt)
    X.M[X.Q[q, Q_MSG], M_ACKS] += 1


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _send_nak(X, q, t, seq, trigger):
    # = Receiver.send_now (kind NAK: no SACK, the trigger's send time; the ACK state untouched),
    #   then reply_nic (_reply_nic)
    pkt = _pkt(X, q, X.Q[q, Q_SRC], X.g[G_ACK], 0, seq, t, 1, -1, NAK)
    X.K[pkt, K_SACK] = -1
    X.K[pkt, K_TDATA] = X.K[trigger, K_TTX]
    _tel_copy(X, pkt, trigger)
    _send_ctrl(X, _reply_nic(X, q, t), t, pkt)
    X.M[X.Q[q, Q_MSG], M_NAKS_SENT] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _send_dsack(X, q, t, dup):
    # = Receiver.send_dsack, then reply_nic (_reply_nic)
    pkt = _pkt(X, q, X.Q[q, Q_SRC], X.g[G_ACK], 0, X.Q[q, Q_RCUM], t, 1, -1, ACK)
    X.K[pkt, K_SACK] = -1
    X.K[pkt, K_DSACK] = X.K[dup, K_SEQ]
    X.K[pkt, K_TDATA] = X.K[dup, K_TTX]
    _tel_copy(X, pkt, dup)
    _ack_out(X, q, t, pkt)


@njit(cache=True, nogil=True, _nrt=False)
def _accept(X, t, pkt, row):
    # = Receiver.accept (goodput only at the message's destination: not a PXN piece's hop to its relay)
    if not X.M[row, M_NONFINAL]:
        b = t // X.g[G_BIN]
        if b > X.g[G_GOOD_HI]:
            X.g[G_GOOD_HI] = b
        X.good[b] += X.K[pkt, K_PAY]
        X.g[G_DELIV] += X.K[pkt, K_PAY]
        if not X.M[row, M_DELIV] and not X.M[row, M_PIECE]:
            # = Recorder.on_first_arrival
            X.g[G_LFA] = t
            X.g[G_DLFA] = X.g[G_DELIV]
    X.M[row, M_DELIV] += X.K[pkt, K_PAY]


@njit(cache=True, nogil=True, _nrt=False)
def _ack(X, q, t, dup):
    # = Receiver.ack (``dup`` -1 = None): with a duplicate, the units since the last ACK first
    if dup >= 0 and X.Q[q, Q_RUNACK]:
        _ack_one(X, q, t, -1)
    _ack_one(X, q, t, dup)


@njit(cache=True, nogil=True, _nrt=False)
def _ack_one(X, q, t, dup):
    # = Receiver.ack's own ACK, then reply_nic (_reply_nic): the bitmap of the units held within
    #   sack_bitmap units of the cumulative PSN (bit i: the unit at PSN cum + i x cell; Q_RN of them
    #   held in all, each flagged F_HELD),
    #   the latest send time since the last ACK and that unit's INT (r_tack, r_tel), or the duplicate's
    cum = X.Q[q, Q_RCUM]
    pkt = _pkt(X, q, X.Q[q, Q_SRC], X.g[G_ACK] + X.g[G_SACK_BYTES], 0, cum, t, 1, -1, ACK)
    X.K[pkt, K_SACK] = -1
    bm = -2
    n = X.Q[q, Q_RN]
    if n:
        base = X.Q[q, Q_BASE]
        cell = X.g[G_CELL]
        lim = cum + X.g[G_SACK_UNITS] * cell
        if lim > X.Q[q, Q_NPSN]:
            lim = X.Q[q, Q_NPSN]          # (held units are below npsn)
        p = cum                           # (a unit's first PSN: the prefix ends at one, or at npsn)
        while p < lim and n:
            if X.a_flag[base + p] & F_HELD:
                if bm < 0:
                    bm = _bitmap(X)
                i = (p - cum) // cell
                X.BM[bm, 1 + (i >> 6)] |= np.int64(1) << (i & 63)
                n -= 1
            p += cell
    X.K[pkt, K_SACKS] = bm
    if dup >= 0:
        X.K[pkt, K_DSACK] = X.K[dup, K_SEQ]
        X.K[pkt, K_TDATA] = X.K[dup, K_TTX]
        _tel_copy(X, pkt, dup)
    else:
        X.K[pkt, K_TDATA] = X.Q[q, Q_RTACK]
        _tel_from_rx(X, pkt, q)                # = pkt.tel = qp.r_tel
        if X.Q[q, Q_RTACK] > X.Q[q, Q_RTSENT]:
            X.Q[q, Q_RTSENT] = X.Q[q, Q_RTACK]
    _ack_out(X, q, t, pkt)
    X.Q[q, Q_RTACK] = -1
    X.Q[q, Q_RTELN] = -1                       # = qp.r_tel = None


@njit(cache=True, nogil=True, _nrt=False)
def _on_ack_timer(X, q, t, token):
    # = Receiver._on_ack_timer
    if X.Q[q, Q_RACKS] != token or not X.Q[q, Q_RUNACK]:
        return                                # an ACK went out since: it covered these units
    due = X.Q[q, Q_RLAST] + X.g[G_ACK_DELAY]
    if t < due:
        push(X, due, _seq(X), E_ACK_TIMER, q, token)
        return
    _ack(X, q, t, -1)


@njit(cache=True, nogil=True, _nrt=False)
def _record_reorder(X, q, row, pkt, end):
    # = record_reorder (the distance logged for Python's reorder_hist dict)
    if X.K[pkt, K_TTX] < X.Q[q, Q_RMAXT]:
        X.M[row, M_OOO] += 1
        d = X.Q[q, Q_RMAX] - end
        if d < 0:
            d = 0
        n = X.g[G_OLOG_N]
        X.OL[0, n] = row
        X.OL[1, n] = d
        X.g[G_OLOG_N] = n + 1
    else:
        X.Q[q, Q_RMAXT] = X.K[pkt, K_TTX]
    if end > X.Q[q, Q_RMAX]:
        X.Q[q, Q_RMAX] = end


@njit(cache=True, nogil=True, _nrt=False)
def _join_held(X, t, q, row, cum):
    # = Receiver._join_held
    base = X.Q[q, Q_BASE]
    h = X.Q[q, Q_DST]
    npsn = X.Q[q, Q_NPSN]
    while cum < npsn and X.a_flag[base + cum] & F_HELD:
        X.a_flag[base + cum] &= ~F_HELD
        X.Q[q, Q_RN] -= 1
        p = X.Q[q, Q_SIZE] - cum * X.g[G_MTU]
        if p > X.g[G_SEG]:
            p = X.g[G_SEG]
        X.Q[q, Q_RHOLD] -= p
        X.HO[h, H_HOLD] -= p
        w = t - X.a_rarr[base + cum]
        X.M[row, M_RW] += w
        if w > X.M[row, M_RWMAX]:
            X.M[row, M_RWMAX] = w
        cum += X.g[G_CELL]
    return cum if cum <= npsn else npsn


@njit(cache=True, nogil=True, _nrt=False)
def _hold(X, t, q, row, pkt):
    # = Receiver._hold
    a = X.Q[q, Q_BASE] + X.K[pkt, K_SEQ]
    X.a_flag[a] |= F_HELD
    X.Q[q, Q_RN] += 1
    X.a_rarr[a] = t
    p = X.K[pkt, K_PAY]
    X.Q[q, Q_RHOLD] += p
    if X.Q[q, Q_RHOLD] > X.M[row, M_PEAKH]:
        X.M[row, M_PEAKH] = X.Q[q, Q_RHOLD]
    h = _host_rx(X, X.Q[q, Q_DST])
    X.HO[h, H_HOLD] += p
    if X.HO[h, H_HOLD] > X.HO[h, H_PEAK]:
        X.HO[h, H_PEAK] = X.HO[h, H_HOLD]
    _accept(X, t, pkt, row)


@njit(cache=True, nogil=True, _nrt=False)
def _host_rx(X, h):
    # = self.hosts.get(h) or self.host(h): the host's receive state, made (in this order for the
    #   write-back) the first time it is needed
    if not X.HO[h, H_MADE]:
        X.HO[h, H_MADE] = 1
        X.HO[X.g[G_HN_MADE], H_ORDER] = h
        X.g[G_HN_MADE] += 1
    return h


@njit(cache=True, nogil=True, _nrt=False)
def _rb_on_gap(X, t, q, row, pkt):
    # = ReorderBuffer.on_gap: True to hold the unit; False if the receiving host's reorder buffer has no
    #   room for it: discarded (overflow_bytes) with a duplicate ACK of the prefix, which acknowledges
    #   nothing new (self.send: the per-unit format with no trigger, or with ACK coalescing a coalesced ACK)
    h = _host_rx(X, X.Q[q, Q_DST])
    p = X.K[pkt, K_PAY]
    if X.HO[h, H_HOLD] + p > X.g[G_RBUF]:
        X.M[row, M_OVERFLOW] += p
        if X.g[G_COALESCE]:
            _ack(X, q, t, -1)
        else:
            _send_ack(X, q, t, X.Q[q, Q_RCUM], -1)
        return False
    return True


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _discard(X, t, q, row, pkt):
    # = GoBackN.on_gap: discard; the first unit beyond the gap NAKs the expected PSN
    X.M[row, M_DISC] += X.K[pkt, K_PAY]
    if not X.Q[q, Q_RNAK]:
        X.Q[q, Q_RNAK] = 1
        _send_nak(X, q, t, X.Q[q, Q_RCUM], pkt)


@njit(cache=True, nogil=True, _nrt=False)
def _check_done(X, row):
    # = if st.delivered >= st.size and not st.done: self._done(st, t) (Python records it)
    if X.M[row, M_DELIV] >= X.M[row, M_SIZE] and not X.M[row, M_DONE]:
        X.M[row, M_DONE] = 1
        X.g[G_PY_KIND] = P_DONE
        X.g[G_PY_A] = row


@njit(cache=True, nogil=True, _nrt=False)
def _send_cnp(X, q, t):
    # = Receiver.send_now(t, qp, CNP, 0, None) (the ACK state untouched), then reply_nic (_reply_nic: a CNP
    #   takes the port whose wire frees first like an ACK, and does not turn the rotation, which counts ACKs
    #   and NAKs only)
    pkt = _pkt(X, q, X.Q[q, Q_SRC], X.g[G_ACK], 0, 0, t, 1, -1, CNP)
    X.K[pkt, K_SACK] = -1
    _send_ctrl(X, _reply_nic(X, q, t), t, pkt)
    X.M[X.Q[q, Q_MSG], M_CNPS_SENT] += 1


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _arrived(X, t, pkt):
    # the start of Receiver.on_packet and on_packet_coalesced: the latency histogram and ECN
    # (Receiver._marked: with CNPs, G_CNP_INT >= 0, one unless one went out within the interval)
    npk = X.K[pkt, K_NPK]
    X.hist[int(math.log(t - X.K[pkt, K_TTX]) * X.f[F_INV])] += npk
    if X.K[pkt, K_CE]:
        q = X.K[pkt, K_QP]
        X.M[X.Q[q, Q_MSG], M_ECN] += npk
        X.Q[q, Q_RCE] += npk
        ci = X.g[G_CNP_INT]
        if ci >= 0:
            last = X.Q[q, Q_RLCNP]
            if last == ABSENT or t - last >= ci:
                X.Q[q, Q_RLCNP] = t
                _send_cnp(X, q, t)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _on_packet(X, t, pkt):
    # = Receiver.on_packet, ack_every 1 (the ECN count and the CNP in _arrived); on_gap: ddp holds the unit (G_SELECTIVE),
    #   go-back-N discards it (GoBackN.on_gap), the reorder buffer holds it if its host has room (G_RBUF,
    #   ReorderBuffer.on_gap)
    _arrived(X, t, pkt)
    q = X.K[pkt, K_QP]
    row = X.Q[q, Q_MSG]
    seq = X.K[pkt, K_SEQ]
    cum = X.Q[q, Q_RCUM]
    if seq < cum or (X.Q[q, Q_RN] and X.a_flag[X.Q[q, Q_BASE] + seq] & F_HELD):
        X.M[row, M_DUP] += X.K[pkt, K_PAY]
        if X.g[G_DSACK]:
            _send_dsack(X, q, t, pkt)
        else:
            _send_ack(X, q, t, cum, -1)
        return
    X.M[row, M_RX] += 1
    end = seq + X.K[pkt, K_NPK]
    _record_reorder(X, q, row, pkt, end)
    if seq == cum:
        _accept(X, t, pkt, row)
        cum = end
        if X.Q[q, Q_RN]:
            cum = _join_held(X, t, q, row, cum)
        X.Q[q, Q_RCUM] = cum
        X.Q[q, Q_RNAK] = 0
        X.Q[q, Q_RUNACK] += 1
        _send_ack(X, q, t, cum, pkt)          # (r_unacked >= ack_every = 1)
    elif not X.g[G_SELECTIVE]:
        _discard(X, t, q, row, pkt)
    elif X.g[G_RBUF] < 0 or _rb_on_gap(X, t, q, row, pkt):
        _hold(X, t, q, row, pkt)
        _send_ack(X, q, t, cum, pkt)
    _check_done(X, row)


@njit(cache=True, nogil=True, _nrt=False)
def _on_packet_coalesced(X, t, pkt):
    # = Receiver.on_packet_coalesced (ack_every > 1; the CNP in _arrived); on_gap as in _on_packet
    _arrived(X, t, pkt)
    q = X.K[pkt, K_QP]
    row = X.Q[q, Q_MSG]
    seq = X.K[pkt, K_SEQ]
    cum = X.Q[q, Q_RCUM]
    if seq < cum or (X.Q[q, Q_RN] and X.a_flag[X.Q[q, Q_BASE] + seq] & F_HELD):
        X.M[row, M_DUP] += X.K[pkt, K_PAY]
        _ack(X, q, t, pkt)
        return
    X.M[row, M_RX] += 1
    end = seq + X.K[pkt, K_NPK]
    _record_reorder(X, q, row, pkt, end)
    if seq == cum:
        _accept(X, t, pkt, row)
        cum = end
        if X.Q[q, Q_RN]:
            cum = _join_held(X, t, q, row, cum)
        X.Q[q, Q_RCUM] = cum
        X.Q[q, Q_RNAK] = 0
    elif not X.g[G_SELECTIVE]:
        _discard(X, t, q, row, pkt)
        _check_done(X, row)
        return
    elif X.g[G_RBUF] >= 0 and not _rb_on_gap(X, t, q, row, pkt):
        _check_done(X, row)               # (a full reorder buffer: discarded, its duplicate ACK sent)
        return
    else:
        _hold(X, t, q, row, pkt)
    ttx = X.K[pkt, K_TTX]
    if ttx < X.Q[q, Q_RTSENT] - X.g[G_REO]:
        # an ACK already reported a unit sent reorder_window after this one: acknowledged at once,
        # by name, in the per-unit format (Receiver.send_now), after the units since the last ACK
        if X.Q[q, Q_RUNACK]:
            _ack(X, q, t, -1)
        _send_ack(X, q, t, X.Q[q, Q_RCUM], pkt)
        _check_done(X, row)
        return
    if ttx > X.Q[q, Q_RTACK]:
        X.Q[q, Q_RTACK] = ttx
        if X.g[G_STAMP]:
            _tel_to_rx(X, q, pkt)              # = qp.r_tel = pkt.tel
    X.Q[q, Q_RLAST] = t
    X.Q[q, Q_RUNACK] += 1
    if ack_requested(seq, end, cum, X.Q[q, Q_NPSN], X.g[G_ACK_EVERY]):
        _ack(X, q, t, -1)
    elif X.Q[q, Q_RUNACK] == 1:
        # = kernel.schedule(t + ack_delay, self._on_ack_timer, (qp, qp.r_acks))
        push(X, t + X.g[G_ACK_DELAY], _seq(X), E_ACK_TIMER, q, X.Q[q, Q_RACKS])
    _check_done(X, row)


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _to_host(X, t, pkt):
    # = PacketEngine._to_host (data to the receiver; control counted, then to the sender)
    _advance_hop(X, pkt)
    if X.K[pkt, K_KIND] == DATA:
        if X.g[G_COALESCE]:
            _on_packet_coalesced(X, t, pkt)
        else:
            _on_packet(X, t, pkt)
    else:
        q = X.K[pkt, K_QP]
        X.M[X.Q[q, Q_MSG], M_CTRL_ARR] += 1
        if not X.Q[q, Q_DONE]:                 # = Sender.on_ctrl
            kind = X.K[pkt, K_KIND]
            if kind == ACK:
                _on_ack(X, q, t, pkt)
            elif kind == NAK:
                _on_nak(X, q, t, pkt)
            else:
                X.M[X.Q[q, Q_MSG], M_CNPS] += 1
                _cc_on_cnp(X, q, t)
    _free_pkt(X, pkt)

# ---------------------------------------------------------------- NVLink: net/nvlink.py (transport: credit)


@njit(cache=True, nogil=True, _nrt=False)
def _sorted_insert(X, port, t, w):
    # = heappush(port.cr_heap, (t, w)): the returns not yet taken back, kept as a list sorted by time
    #   (the heap is only ever read as its minimum, summed, or walked in (time, bytes) order by
    #   _credit_time, whose answer is the same for either order of equal times)
    d = _node(X, t, w)
    h = X.P[port, P_CHH]
    if h < 0 or X.D[h, D_PSN] > t:
        X.D[d, D_NEXT] = h
        X.P[port, P_CHH] = d
        return
    while X.D[h, D_NEXT] >= 0 and X.D[X.D[h, D_NEXT], D_PSN] <= t:
        h = X.D[h, D_NEXT]
    X.D[d, D_NEXT] = X.D[h, D_NEXT]
    X.D[h, D_NEXT] = d


@njit(cache=True, nogil=True, _nrt=False)
def _held(X, port, t):
    # = NvlinkPort.held: the chip port's units not yet wholly out at t (pops those that are)
    b = X.P[port, P_SCHB]
    while X.P[port, P_SCH] >= 0 and X.D[X.P[port, P_SCH], D_PSN] <= t:
        d = _fifo_popleft(X.P, port, P_SCH, P_SCT, X.D, D_NEXT)
        b -= X.D[d, D_VAL]
        _free_node(X, d)
    X.P[port, P_SCHB] = b
    return b


@njit(cache=True, nogil=True, _nrt=False)
def _nv_psn(X, slot, nic):
    # the unit the queue pair of ``slot`` sends next on this link: striping, unit i by link
    # (i + uid) mod n (= (pos - qp.uid) % n + stripe[qp] * n, pos this link's place in qp.nics);
    # else its next unit
    q = X.QN[slot, QN_QP]
    if X.N[nic, N_STRIPE]:
        n = X.Q[q, Q_NN]
        return nvlink_stripe_psn(slot - X.Q[q, Q_N0], X.Q[q, Q_UID], n, X.QN[slot, QN_CNT])
    return X.Q[q, Q_SEQ]


@njit(cache=True, nogil=True, _nrt=False)
def _credit_time(X, nic, t):
    # = NvlinkNic._credit_time: when this link has credit for the next queue pair's next stripe
    #   unit (t if already or if it has none left here), -1 = None (the returns known are not enough)
    slot = X.N[nic, N_AH]
    q = X.QN[slot, QN_QP]
    psn = _nv_psn(X, slot, nic)
    if psn >= X.Q[q, Q_NPSN]:
        return t
    unit = X.N[nic, N_UNIT]
    payload = X.Q[q, Q_SIZE] - psn * unit
    if payload > unit:
        payload = unit
    port = X.N[nic, N_PORT]
    need = nvlink_wire_bytes(payload, X.N[nic, N_PPAY], X.N[nic, N_PHDR]) - X.P[port, P_CR]
    if need <= 0:
        return t
    d = X.P[port, P_CHH]
    while d >= 0:
        need -= X.D[d, D_VAL]
        if need <= 0:
            r = X.D[d, D_PSN]
            return r if r > t else t
        d = X.D[d, D_NEXT]
    return -1


@njit(cache=True, nogil=True, _nrt=False)
def _nv_tx(X, nic, t, token):
    # = NvlinkNic.tx
    X.N[nic, N_CALLS] += 1
    if token != X.N[nic, N_TOKEN]:
        return
    port = X.N[nic, N_PORT]
    bu = X.P[port, P_BUSY]
    if bu > t:
        X.N[nic, N_PEND] = bu
        push(X, bu, _seq(X), E_TX, nic, token)
        return
    credit = X.P[port, P_CR]
    h = X.P[port, P_CHH]
    if h >= 0 and X.D[h, D_PSN] <= t:
        held = X.P[port, P_HELD]
        while h >= 0 and X.D[h, D_PSN] <= t:
            w = X.D[h, D_VAL]
            credit += w
            held -= w
            nx = X.D[h, D_NEXT]
            _free_node(X, h)
            h = nx
        X.P[port, P_CHH] = h
        X.P[port, P_HELD] = held
    stripe = X.N[nic, N_STRIPE]
    unit = X.N[nic, N_UNIT]
    while X.N[nic, N_AL]:
        slot = X.N[nic, N_AH]
        q = X.QN[slot, QN_QP]
        psn = _nv_psn(X, slot, nic)
        if psn >= X.Q[q, Q_NPSN]:
            _act_popleft(X, nic)
            X.QN[slot, QN_IN] = 0
            X.QN[slot, QN_CNT] = 0            # = stripe.pop(qp, None)
            continue
        payload = X.Q[q, Q_SIZE] - psn * unit
        if payload > unit:
            payload = unit
        npk = -(-payload // X.N[nic, N_PPAY])
        wire = payload + npk * X.N[nic, N_PHDR]
        if credit < wire:
            X.P[port, P_CR] = credit
            X.P[port, P_STALLS] += 1
            X.P[port, P_CRW] = 1
            h = X.P[port, P_CHH]
            if h >= 0:
                wake = X.D[h, D_PSN]
                X.N[nic, N_PEND] = wake
                push(X, wake, _seq(X), E_TX, nic, token)
            else:
                X.N[nic, N_BUSY] = 0
            return
        _act_append(X, nic, _act_popleft(X, nic))     # = active.rotate(-1)
        X.P[port, P_CR] = credit - wire
        X.P[port, P_CRW] = 0
        if not stripe:
            X.Q[q, Q_SEQ] = psn + 1
            last = psn + 1 >= X.Q[q, Q_NPSN]
        else:
            X.QN[slot, QN_CNT] += 1
            last = psn + X.Q[q, Q_NN] >= X.Q[q, Q_NPSN]
        row = X.Q[q, Q_MSG]
        X.M[row, M_INJ] += payload
        pkt = _pkt(X, q, X.Q[q, Q_DST], wire, payload, psn, t, npk, port, DATA)
        done = t + _ser(X, port, wire)
        X.P[port, P_BUSY] = done
        if X.M[row, M_ONSENT] and X.M[row, M_INJ] == X.M[row, M_SIZE]:
            _on_sent(X, row, done)      # its last unit: the connection's next message may start
        X.P[port, P_TXB] += wire
        X.P[port, P_TXP] += npk
        if done - t > X.P[port, P_PEAK]:
            X.P[port, P_PEAK] = done - t
        X.N[nic, N_SENT] += 1
        _enqueue_arrival(X, port, pkt, done + X.P[port, P_OFFSET])
        if last and X.N[nic, N_AL] == 1:
            _act_popleft(X, nic)              # = active.pop(): its last unit, nothing left here
            X.QN[slot, QN_IN] = 0
            X.QN[slot, QN_CNT] = 0
            X.N[nic, N_BUSY] = 0
            return
        if stripe and credit - wire < X.N[nic, N_UWIRE]:
            nxt = _credit_time(X, nic, done)
            if nxt < 0:
                X.P[port, P_CRW] = 1
                X.P[port, P_STALLS] += 1
                X.N[nic, N_BUSY] = 0
                return
            if nxt > done:
                X.P[port, P_CRW] = 1
                X.P[port, P_STALLS] += 1
                done = nxt
        X.N[nic, N_PEND] = done
        push(X, done, _seq(X), E_TX, nic, token)
        return
    X.P[port, P_CR] = credit
    X.N[nic, N_BUSY] = 0


@njit(cache=True, nogil=True, _nrt=False)
def _nv_arrive(X, sw, t, pkt):
    # = NvlinkSwitch.arrive: the egress starts the unit when it is free and the GPU behind it has
    #   credit (returns in FIFO order), the input link's credit comes back one delay after its last
    #   bit has left, and a GPU port waiting for credit is kicked
    ing = X.K[pkt, K_HOP]
    _advance_inflight(X, ing)
    port = _choose(X, sw, t, pkt)
    wire = X.K[pkt, K_WIRE]
    s = X.P[port, P_BUSY]
    if s < t:
        s = t
    credit = X.P[port, P_CR]
    while X.P[port, P_CQH] >= 0 and X.D[X.P[port, P_CQH], D_PSN] <= s:
        d = _fifo_popleft(X.P, port, P_CQH, P_CQT, X.D, D_NEXT)
        credit += X.D[d, D_VAL]
        _free_node(X, d)
    while credit < wire and X.P[port, P_CQH] >= 0:      # (the returns always suffice: credit is conserved)
        d = _fifo_popleft(X.P, port, P_CQH, P_CQT, X.D, D_NEXT)
        credit += X.D[d, D_VAL]
        if X.D[d, D_PSN] > s:
            s = X.D[d, D_PSN]
        _free_node(X, d)
    X.P[port, P_CR] = credit - wire
    end = s + _ser(X, port, wire)
    X.P[port, P_BUSY] = end
    q = _held(X, port, t) + wire
    _fifo_append(X.P, port, P_SCH, P_SCT, X.D, D_NEXT, _node(X, end, wire))
    X.P[port, P_SCHB] = q
    q = _drain_ps(X, port, q)                 # = q * PS_BITS // port.rate: the backlog in ps
    if q > X.P[port, P_PEAK]:
        X.P[port, P_PEAK] = q
    X.P[port, P_TXB] += wire
    X.P[port, P_TXP] += X.K[pkt, K_NPK]
    dly = X.P[port, P_DELAY]
    _fifo_append(X.P, port, P_CQH, P_CQT, X.D, D_NEXT, _node(X, end + dly + dly, wire))
    back = end + X.P[ing, P_DELAY]
    _sorted_insert(X, ing, back, wire)
    held = X.P[ing, P_HELD] + wire
    X.P[ing, P_HELD] = held
    if held > X.P[ing, P_BPEAK]:
        lim = t + X.P[ing, P_DELAY]
        occ = 0
        d = X.P[ing, P_CHH]
        while d >= 0:
            if X.D[d, D_PSN] > lim:
                occ += X.D[d, D_VAL]
            d = X.D[d, D_NEXT]
        if occ > X.P[ing, P_BPEAK]:
            X.P[ing, P_BPEAK] = occ
    if X.P[ing, P_CRW]:
        _kick(X, X.P[ing, P_NVN], back)
    _enqueue_arrival(X, port, pkt, end + X.P[port, P_OFFSET])


@njit(cache=True, nogil=True, _nrt=False)
def _nv_rx(X, t, pkt):
    # = NvlinkRx.arrive: latency, reorder statistics, goodput, completion on the last byte
    _advance_inflight(X, X.K[pkt, K_HOP])
    X.hist[int(math.log(t - X.K[pkt, K_TTX]) * X.f[F_INV])] += X.K[pkt, K_NPK]
    q = X.K[pkt, K_QP]
    row = X.Q[q, Q_MSG]
    X.M[row, M_RX] += 1
    _record_reorder(X, q, row, pkt, X.K[pkt, K_SEQ] + 1)
    _accept(X, t, pkt, row)
    if X.M[row, M_DELIV] >= X.M[row, M_SIZE] and not X.M[row, M_DONE]:
        X.M[row, M_DONE] = 1
        X.g[G_PY_KIND] = P_DONE
        X.g[G_PY_A] = row
    _free_pkt(X, pkt)


@njit(cache=True, nogil=True, _nrt=False)
def _more_releases(X, t):
    # the releases that follow the one being run in the agenda, at the same time t, popped with it (at most
    # X.RB's length; each an event): Python runs them in this order (CompiledKernel.run). Nothing else could
    # run between them: what Python pushes while releasing comes at t or later with a later seq, after them.
    # The batch ends at a progress report's event count (PROGRESS_EVERY), where Python reports after it
    n = 0
    H = X.HP
    while (n < len(X.RB) and X.g[G_RUN_N] & (PROGRESS_EVERY - 1) != PROGRESS_EVERY - 1 and X.g[G_HN] > 0
           and H[0, 0] == t and H[0, 2] == E_RELEASE):
        X.RB[n] = H[0, 3]
        _pop_root(X)
        X.g[G_EVENTS] += 1
        X.g[G_RUN_N] += 1
        n += 1
    return n


@njit(cache=True, nogil=True, _nrt=False, inline="always")
def _log_done(X, t):
    # slice 6: a quiet message's completion (M_QUIET) logged in X.CL for Python to record when it next
    # runs (CompiledKernel._drain: the same PacketEngine.message_done, in the same order, with what it
    # reads as it stood at t), rather than a return to Python now; False (return as before) when the
    # message is not quiet, when it may be the run's last, or when the log is full
    row = X.g[G_PY_A]
    n = X.g[G_CL_N]
    if not X.M[row, M_QUIET] or X.g[G_QUIET_LEFT] <= 0 or n >= X.CL.shape[0]:
        return False
    L = X.CL
    L[n, CL_ROW] = row
    L[n, CL_T] = t
    L[n, CL_DELIV] = X.g[G_DELIV]
    w = X.M.shape[1]
    for j in range(w):
        L[n, CL_M + j] = X.M[row, j]
    for j in range(X.m_rtx.shape[1]):
        L[n, CL_M + w + j] = X.m_rtx[row, j]
    X.g[G_CL_N] = n + 1
    X.g[G_QUIET_LEFT] -= 1
    return True


# ---------------------------------------------------------------- loop


@njit(cache=True, nogil=True, _nrt=False)
def settle_all(X, t):
    """= the settling loop of ``PacketEngine._finish``: every switch port's pending samples."""
    for port in range(X.P.shape[0]):
        if X.P[port, P_SW] >= 0 and X.P[port, P_PH] >= 0:
            _settle(X, port, t)


@njit(cache=True, nogil=True, _nrt=False)
def run(X, until_ps):
    """Run events with time <= ``until_ps`` until one needs Python or space (see the codes)."""
    g = X.g
    while True:
        if g[G_HN] == 0:
            return R_DRAINED
        t = X.HP[0, 0]
        if t > until_ps:
            g[G_NOW] = until_ps
            return R_TIME_LIMIT
        if (g[G_PNFREE] < SPACE or g[G_DNFREE] < SPACE or g[G_BNFREE] < SPACE or g[G_HN] + SPACE > X.HP.shape[0]
                or g[G_OLOG_N] + SPACE > X.OL.shape[1] or t // g[G_BIN] + 1 >= len(X.good)):
            return R_SPACE
        if g[G_CC] == CC_TELEMETRY and not _tel_space(X):
            return R_SPACE
        kind = X.HP[0, 2]
        a = X.HP[0, 3]
        b = X.HP[0, 4]
        g[G_NOW] = t
        if kind != E_DELIVER:
            _pop_root(X)                    # (a delivery leaves the root to _advance_inflight)
        if kind == E_DELIVER:
            code = X.P[X.K[a, K_HOP], P_DELIVER]
            if code == D_SWITCH:
                _switch_arrive(X, X.P[X.K[a, K_HOP], P_PEER_SW], t, a)
            elif code == D_LSWITCH:
                _lossless_arrive(X, X.P[X.K[a, K_HOP], P_PEER_SW], t, a)
            elif code == D_NVSW:
                _nv_arrive(X, X.P[X.K[a, K_HOP], P_PEER_SW], t, a)
            elif code == D_NVRX:
                _nv_rx(X, t, a)
            else:
                if code == D_HOST_SETTLE and not X.K[a, K_LANE] and X.P[X.K[a, K_HOP], P_PH] >= 0:
                    _settle(X, X.K[a, K_HOP], t)
                _to_host(X, t, a)
        elif kind == E_TX:
            if X.N[a, N_NV]:
                _nv_tx(X, a, t, b)
            else:
                _nic_tx(X, a, t, b)
        elif kind == E_RTO:
            _on_rto(X, a, t)
        elif kind == E_LDONE:
            _ldone(X, t, a)
        elif kind == E_PAUSE:
            _apply_pause(X, t, a)
        elif kind == E_RESUME:
            _apply_resume(X, t, a)
        elif kind == E_ACK_TIMER:
            _on_ack_timer(X, a, t, b)
        elif kind == E_CC_TIMER:
            _cc_timer(X, t, a, b)
        elif kind == E_RELEASE:
            g[G_PY_KIND] = P_RELEASE
            g[G_PY_A] = a
            g[G_PY_N] = _more_releases(X, t)
        elif kind == E_SAMPLE:
            g[G_PY_KIND] = P_SAMPLE
            g[G_PY_A] = a
        elif kind == E_SENT:
            g[G_PY_KIND] = P_SENT
            g[G_PY_A] = a
        else:
            g[G_ERR] = kind
            return R_ERROR
        g[G_EVENTS] += 1
        g[G_RUN_N] += 1
        if g[G_PY_KIND] != P_NONE:
            if g[G_PY_KIND] == P_DONE and _log_done(X, t):
                g[G_PY_KIND] = P_NONE
            else:
                g[G_PY_T] = t
                return R_PY
        if not g[G_RUN_N] & (PROGRESS_EVERY - 1):
            return R_PROGRESS


# ---------------------------------------------------------------- the disk cache


def shared_stamp() -> str:
    """A hash of the source of every function in :data:`SHARED`."""
    import hashlib
    import inspect
    h = hashlib.sha256()
    for fn in SHARED:
        h.update(inspect.getsource(fn).encode())
    return h.hexdigest()


def check_cache(path=None) -> bool:
    """Discard numba's cached core (``core.*.nbi`` / ``.nbc`` in ``path``, by default where numba
    keeps this module's cache) if it was compiled from other sources of :data:`SHARED` than the
    present ones (their stamp is kept next to it, ``core.shared``), so that an edit to a model's
    shared arithmetic always reaches the compiled core. Returns True if it discarded anything."""
    from pathlib import Path
    try:
        where = Path(path if path is not None else run._cache._cache_path)
        stamp = where / "core.shared"
        now = shared_stamp()
        if stamp.exists() and stamp.read_text() == now:
            return False
        gone = False
        for f in list(where.glob("core.*.nbi")) + list(where.glob("core.*.nbc")):
            f.unlink()
            gone = True
        where.mkdir(parents=True, exist_ok=True)
        stamp.write_text(now)
        return gone
    except OSError:          # a read-only cache: numba then keeps nothing on disk either
        return False
