"""The compiled event loop of slice 1 (docs/compiled-core.md, section 4.2), over the flat state
of :mod:`fabricsim.engine.compiled.state`.

Every function here mirrors one Python method of the packet engine, line for line, and says
which (``# = Nic.tx``): the same decisions in the same order, the same ``seq`` drawn at the same
point, so the agenda pops the same entries in the same ``(time_ps, seq)`` order and the state is
equal after every event. Model arithmetic longer than one expression is not rewritten: it is the
model's own function compiled from its source (:data:`ecmp_pick`, :data:`packet_draw_fields`,
:data:`red_below`; see :func:`_rebind`).

The message lifecycle is Python's: an agenda entry of kind ``E_RELEASE`` or ``E_SAMPLE``, and a
datapath event that ends in a message completion (``P_DONE``) or a queue pair's failure
(``P_FAIL``), return to the Python driver (:class:`fabricsim.engine.compiled.CompiledKernel`),
which runs the unchanged :class:`~fabricsim.engine.packet.PacketEngine` method and resumes.

Hash arithmetic is uint64 throughout (numba types ``uint64 op int64`` as int64, whose ``>>``
sign-extends: docs/compiled-core.md 3.3); times and byte counts are int64, which floors ``//``
like Python.
"""
from __future__ import annotations

import math
import types

import numpy as np
from numba import literal_unroll, njit

from ...flows import identity
from ...net import switch as switch_mod
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


# ---------------------------------------------------------------- state layout
# The rows of the state's 2-D int64 arrays (state.py builds them): one array per kind of object,
# one row per field, so that a call passes a few arrays (each argument costs a reference count
# when numba's reference counting is on; every function here is compiled without it).
PORT_FIELDS = ("busy", "txb", "txp", "peak", "ih", "it", "ph", "pt", "k", "offset", "deliver", "peer_sw", "sw",
               "buffer", "drops", "dropb", "cdrops", "ecn", "cb", "cp", "prio", "rate")
NIC_FIELDS = ("port", "busy", "token", "pend", "ah", "at", "al", "ch", "ct", "calls", "sent")
QP_FIELDS = ("uid", "msg", "src", "dst", "size", "npsn", "seq", "una", "high", "outb", "rack", "nok", "nic", "inact",
             "anext", "rto_at", "armed", "tmo", "done", "reo", "gbc", "sentb", "ackb", "active", "base", "rh", "rt",
             "oh", "ot", "ol", "rcum", "rmax", "rmaxt", "rn", "rhold", "runack", "rce", "racks", "rport")
PKT_FIELDS = ("qp", "dst", "wire", "pay", "seq", "ttx", "npk", "hop", "kind", "ce", "sack", "tdata", "at", "aseq",
              "next", "pnext", "pstart", "ptx", "pprio", "live")
NODE_FIELDS = ("psn", "val", "next")
MSG_FIELDS = ("size", "deliv", "drop", "inj", "dup", "rx", "ooo", "peakh", "rw", "rwmax", "ecn", "acks", "ctrl_arr",
              "ctrl_drop", "done", "q0", "qn")
HOST_FIELDS = ("hold", "peak", "made", "order")
(P_BUSY, P_TXB, P_TXP, P_PEAK, P_IH, P_IT, P_PH, P_PT, P_K, P_OFFSET, P_DELIVER, P_PEER_SW, P_SW, P_BUFFER, P_DROPS, P_DROPB, P_CDROPS, P_ECN, P_CB, P_CP, P_PRIO, P_RATE,) = range(len(PORT_FIELDS))
(N_PORT, N_BUSY, N_TOKEN, N_PEND, N_AH, N_AT, N_AL, N_CH, N_CT, N_CALLS, N_SENT,) = range(len(NIC_FIELDS))
(Q_UID, Q_MSG, Q_SRC, Q_DST, Q_SIZE, Q_NPSN, Q_SEQ, Q_UNA, Q_HIGH, Q_OUTB, Q_RACK, Q_NOK, Q_NIC, Q_INACT, Q_ANEXT, Q_RTO_AT, Q_ARMED, Q_TMO, Q_DONE, Q_REO, Q_GBC, Q_SENTB, Q_ACKB, Q_ACTIVE, Q_BASE, Q_RH, Q_RT, Q_OH, Q_OT, Q_OL, Q_RCUM, Q_RMAX, Q_RMAXT, Q_RN, Q_RHOLD, Q_RUNACK, Q_RCE, Q_RACKS, Q_RPORT,) = range(len(QP_FIELDS))
(K_QP, K_DST, K_WIRE, K_PAY, K_SEQ, K_TTX, K_NPK, K_HOP, K_KIND, K_CE, K_SACK, K_TDATA, K_AT, K_ASEQ, K_NEXT, K_PNEXT, K_PSTART, K_PTX, K_PPRIO, K_LIVE,) = range(len(PKT_FIELDS))
(D_PSN, D_VAL, D_NEXT,) = range(len(NODE_FIELDS))
(M_SIZE, M_DELIV, M_DROP, M_INJ, M_DUP, M_RX, M_OOO, M_PEAKH, M_RW, M_RWMAX, M_ECN, M_ACKS, M_CTRL_ARR, M_CTRL_DROP, M_DONE, M_Q0, M_QN,) = range(len(MSG_FIELDS))
(H_HOLD, H_PEAK, H_MADE, H_ORDER,) = range(len(HOST_FIELDS))

# ---------------------------------------------------------------- codes

# scalar slots of X.g (int64)
G_SEQ, G_NOW, G_EVENTS, G_HN, G_PFREE, G_PNFREE, G_DFREE, G_DNFREE = range(8)
G_DROP_PAY, G_DROP_PK, G_DROP_CTRL, G_TIMEOUTS, G_SPURIOUS = range(8, 13)
G_DELIV, G_LFA, G_DLFA, G_HN_MADE, G_OLOG_N, G_GOOD_HI = range(13, 19)
G_MTU, G_HDR, G_SEG, G_ACK, G_RTO_LOW, G_RTO_HIGH, G_RTO_LOW_UNITS, G_RETRY, G_REO, G_REO_MAX = range(19, 29)
G_BIN, G_ROUTE, G_PY_KIND, G_PY_A, G_PY_T, G_RUN_N, G_ERR = range(29, 36)
NG = 36

# agenda entry kinds
E_DELIVER, E_TX, E_RTO, E_RELEASE, E_SAMPLE = 0, 1, 2, 3, 4
# port delivery: to a switch, to a host, to a host after settling dequeue-time samples
D_SWITCH, D_HOST, D_HOST_SETTLE = 0, 1, 2
# returns of run()
R_DRAINED, R_TIME_LIMIT, R_PY, R_PROGRESS, R_SPACE, R_ERROR = 0, 1, 2, 3, 4, 5
# what R_PY hands to Python (X.g[G_PY_KIND])
P_NONE, P_RELEASE, P_SAMPLE, P_DONE, P_FAIL = 0, 1, 2, 3, 4
# packet kinds (net/packet.py), rtx causes (columns of MessageState.rtx_bytes)
DATA, ACK = 0, 1
C_SACK, C_TIMEOUT, C_NAK = 0, 1, 2
# per-PSN flags
F_SACKED, F_LOST, F_HELD = 1, 2, 4
ABSENT = np.iinfo(np.int64).min
ROUTE_ECMP, ROUTE_SPRAY = 0, 1
#: free packets / list nodes / agenda slots an event may need
SPACE = 16
PROGRESS_EVERY = 1 << 16

# ---------------------------------------------------------------- agenda (binary heap, (t, seq) keys)


@njit(cache=True, nogil=True, _nrt=False)
def push(X, t, s, kind, a, b):
    H = X.HP
    i = X.g[G_HN]
    X.g[G_HN] = i + 1
    while i > 0:
        p = (i - 1) >> 1
        pt = H[0, p]
        if pt < t or (pt == t and H[1, p] < s):
            break
        H[0, i] = pt
        H[1, i] = H[1, p]
        H[2, i] = H[2, p]
        H[3, i] = H[3, p]
        H[4, i] = H[4, p]
        i = p
    H[0, i] = t
    H[1, i] = s
    H[2, i] = kind
    H[3, i] = a
    H[4, i] = b


@njit(cache=True, nogil=True, _nrt=False)
def _pop_into(X):
    """Remove the head; it is left in the heap arrays' slot ``n`` (the old last) for the caller."""
    H = X.HP
    n = X.g[G_HN] - 1
    X.g[G_HN] = n
    t0, s0, k0, a0, b0 = H[0, 0], H[1, 0], H[2, 0], H[3, 0], H[4, 0]
    t, s, k, a, b = H[0, n], H[1, n], H[2, n], H[3, n], H[4, n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and (H[0, c + 1] < H[0, c] or (H[0, c + 1] == H[0, c] and H[1, c + 1] < H[1, c])):
            c += 1
        if t < H[0, c] or (t == H[0, c] and s < H[1, c]):
            break
        H[0, i] = H[0, c]
        H[1, i] = H[1, c]
        H[2, i] = H[2, c]
        H[3, i] = H[3, c]
        H[4, i] = H[4, c]
        i = c
    H[0, i] = t
    H[1, i] = s
    H[2, i] = k
    H[3, i] = a
    H[4, i] = b
    H[0, n] = t0
    H[1, n] = s0
    H[2, n] = k0
    H[3, n] = a0
    H[4, n] = b0
    return n


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
    X.g[G_PFREE] = X.K[K_NEXT, i]
    X.g[G_PNFREE] -= 1
    X.K[K_QP, i] = qp
    X.K[K_DST, i] = dst
    X.K[K_WIRE, i] = wire
    X.K[K_PAY, i] = payload
    X.K[K_SEQ, i] = seq
    X.K[K_TTX, i] = t_tx
    X.K[K_NPK, i] = npk
    X.K[K_HOP, i] = hop
    X.K[K_KIND, i] = kind
    X.K[K_CE, i] = 0
    X.K[K_SACK, i] = 0
    X.K[K_TDATA, i] = 0
    X.K[K_NEXT, i] = -1
    X.K[K_PNEXT, i] = -1
    X.K[K_LIVE, i] = 1
    return i


@njit(cache=True, nogil=True, _nrt=False)
def _free_pkt(X, i):
    X.K[K_LIVE, i] = 0
    X.K[K_NEXT, i] = X.g[G_PFREE]
    X.g[G_PFREE] = i
    X.g[G_PNFREE] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _node(X, psn, val):
    i = X.g[G_DFREE]
    X.g[G_DFREE] = X.D[D_NEXT, i]
    X.g[G_DNFREE] -= 1
    X.D[D_PSN, i] = psn
    X.D[D_VAL, i] = val
    X.D[D_NEXT, i] = -1
    return i


@njit(cache=True, nogil=True, _nrt=False)
def _free_node(X, i):
    X.D[D_NEXT, i] = X.g[G_DFREE]
    X.g[G_DFREE] = i
    X.g[G_DNFREE] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _rtx_append(X, q, psn, cause):
    d = _node(X, psn, cause)
    if X.Q[Q_RH, q] < 0:
        X.Q[Q_RH, q] = d
    else:
        X.D[D_NEXT, X.Q[Q_RT, q]] = d
    X.Q[Q_RT, q] = d


@njit(cache=True, nogil=True, _nrt=False)
def _rtx_popleft(X, q):
    d = X.Q[Q_RH, q]
    X.Q[Q_RH, q] = X.D[D_NEXT, d]
    if X.Q[Q_RH, q] < 0:
        X.Q[Q_RT, q] = -1
    _free_node(X, d)


@njit(cache=True, nogil=True, _nrt=False)
def _rtx_clear(X, q):
    while X.Q[Q_RH, q] >= 0:
        _rtx_popleft(X, q)


@njit(cache=True, nogil=True, _nrt=False)
def _out_append(X, q, psn, ts):
    d = _node(X, psn, ts)
    if X.Q[Q_OH, q] < 0:
        X.Q[Q_OH, q] = d
    else:
        X.D[D_NEXT, X.Q[Q_OT, q]] = d
    X.Q[Q_OT, q] = d
    X.Q[Q_OL, q] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _out_popleft(X, q):
    d = X.Q[Q_OH, q]
    X.Q[Q_OH, q] = X.D[D_NEXT, d]
    if X.Q[Q_OH, q] < 0:
        X.Q[Q_OT, q] = -1
    X.Q[Q_OL, q] -= 1
    _free_node(X, d)


@njit(cache=True, nogil=True, _nrt=False)
def _out_clear(X, q):
    while X.Q[Q_OH, q] >= 0:
        _out_popleft(X, q)

# ---------------------------------------------------------------- ports: inflight FIFOs


@njit(cache=True, nogil=True, _nrt=False)
def _enqueue_arrival(X, port, pkt, at):
    # = entry = (at, next(seq), port.deliver, pkt); pkt.hop = port; inflight.append(entry);
    #   if len(inflight) == 1: push(entry)
    s = _seq(X)
    X.K[K_AT, pkt] = at
    X.K[K_ASEQ, pkt] = s
    X.K[K_HOP, pkt] = port
    X.K[K_NEXT, pkt] = -1
    if X.P[P_IH, port] < 0:
        X.P[P_IH, port] = pkt
        X.P[P_IT, port] = pkt
        push(X, at, s, E_DELIVER, pkt, 0)
    else:
        X.K[K_NEXT, X.P[P_IT, port]] = pkt
        X.P[P_IT, port] = pkt


@njit(cache=True, nogil=True, _nrt=False)
def _advance_inflight(X, port):
    # = inflight.popleft(); if inflight: push(inflight[0])
    h = X.P[P_IH, port]
    nx = X.K[K_NEXT, h]
    X.P[P_IH, port] = nx
    if nx < 0:
        X.P[P_IT, port] = -1
    else:
        push(X, X.K[K_AT, nx], X.K[K_ASEQ, nx], E_DELIVER, nx, 0)

# ---------------------------------------------------------------- switch


@njit(cache=True, nogil=True, _nrt=False)
def _mark(X, sw, q, pkt):
    # = Switch.mark
    if q > X.s_kmax[sw]:
        return True
    d = packet_draw_fields(X.s_salt[sw], X.Q[Q_UID, X.K[K_QP, pkt]], X.K[K_SEQ, pkt], X.K[K_TTX, pkt], X.K[K_KIND, pkt],
                           X.s_node[sw])
    return red_below(d, q, X.s_kmin[sw], X.s_kmax[sw], X.s_pmax[sw])


@njit(cache=True, nogil=True, _nrt=False)
def _settle(X, port, t):
    # = Switch.settle (the port's owning switch), without INT
    sw = X.P[P_SW, port]
    count = X.P[P_TXB, port] - X.P[P_PRIO, port]
    kmin = X.s_kmin[sw]
    while True:
        h = X.P[P_PH, port]
        if h < 0 or X.K[K_PSTART, h] > t:
            break
        X.P[P_PH, port] = X.K[K_PNEXT, h]
        if X.P[P_PH, port] < 0:
            X.P[P_PT, port] = -1
        q = count - (X.K[K_PTX, h] - X.K[K_PPRIO, h])
        if kmin >= 0 and q > kmin and _mark(X, sw, q, h):
            X.K[K_CE, h] = 1
            X.P[P_ECN, port] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _drop(X, port, pkt):
    # = PacketEngine.drop
    X.P[P_DROPS, port] += 1
    X.P[P_DROPB, port] += X.K[K_WIRE, pkt]
    row = X.Q[Q_MSG, X.K[K_QP, pkt]]
    if X.K[K_KIND, pkt] != DATA:
        X.P[P_CDROPS, port] += 1
        X.g[G_DROP_CTRL] += 1
        X.M[M_CTRL_DROP, row] += 1
    else:
        X.g[G_DROP_PAY] += X.K[K_PAY, pkt]
        X.g[G_DROP_PK] += X.K[K_NPK, pkt]
        X.M[M_DROP, row] += X.K[K_PAY, pkt]
    _free_pkt(X, pkt)


@njit(cache=True, nogil=True, _nrt=False)
def _switch_arrive(X, sw, t, pkt):
    # = Switch.arrive (lossy, no INT, no shared pool; strict-priority kinds never occur: coverage)
    hop = X.K[K_HOP, pkt]
    _advance_inflight(X, hop)
    h = X.P[P_PH, hop]
    if h >= 0 and X.K[K_PSTART, h] <= t:
        _settle(X, hop, t)
    dst = X.K[K_DST, pkt]
    n = X.r_cnt[sw, dst]
    off = X.r_off[sw, dst]
    kind = X.K[K_KIND, pkt]
    if n == 1:
        port = X.r_ports[off]
    elif X.g[G_ROUTE] == ROUTE_ECMP:
        # = Ecmp.choose (its cache memoises a pure function)
        qp = X.K[K_QP, pkt]
        port = X.r_ports[off + np.int64(ecmp_pick(X.q_hash[qp], X.route_salt[0], np.uint64(X.s_node[sw]),
                                                 np.uint64(n), kind != DATA))]
    else:
        # = Spray.choose
        d = packet_draw_fields(X.route_salt[0], X.Q[Q_UID, X.K[K_QP, pkt]], X.K[K_SEQ, pkt], X.K[K_TTX, pkt], kind,
                               X.s_node[sw])
        port = X.r_ports[off + np.int64(d % np.uint64(n))]
    h = X.P[P_PH, port]
    if h >= 0 and X.K[K_PSTART, h] <= t:
        _settle(X, port, t)
    wire = X.K[K_WIRE, pkt]
    bu = X.P[P_BUSY, port]
    k = X.P[P_K, port]
    if bu < t:
        bu = t
        q = 0
    else:
        q = (bu - t) // k                   # = (bu - t) * port.rate // PS_BITS (rate * k == PS_BITS)
        if X.P[P_BUFFER, port] >= 0 and q + wire > X.P[P_BUFFER, port]:
            _drop(X, port, pkt)
            return
    kmin = X.s_kmin[sw]
    at_dequeue = X.s_deq[sw]
    if kmin >= 0 and not at_dequeue and q > kmin and kind == DATA and _mark(X, sw, q, pkt):
        X.K[K_CE, pkt] = 1
        X.P[P_ECN, port] += 1
    start = bu
    bu += wire * k
    X.P[P_BUSY, port] = bu
    if bu - t > X.P[P_PEAK, port]:
        X.P[P_PEAK, port] = bu - t
    X.P[P_TXB, port] += wire
    X.P[P_TXP, port] += X.K[K_NPK, pkt]
    if kind != DATA:
        X.P[P_CB, port] += wire
        X.P[P_CP, port] += 1
    elif at_dequeue:
        if start > t and kmin >= 0:
            # = pend.append((start, bu, port.tx_bytes, port.prio_bytes, pkt))
            X.K[K_PSTART, pkt] = start
            X.K[K_PTX, pkt] = X.P[P_TXB, port]
            X.K[K_PPRIO, pkt] = X.P[P_PRIO, port]
            X.K[K_PNEXT, pkt] = -1
            if X.P[P_PH, port] < 0:
                X.P[P_PH, port] = pkt
            else:
                X.K[K_PNEXT, X.P[P_PT, port]] = pkt
            X.P[P_PT, port] = pkt
    _enqueue_arrival(X, port, pkt, bu + X.P[P_OFFSET, port])

# ---------------------------------------------------------------- NIC


@njit(cache=True, nogil=True, _nrt=False)
def _kick(X, nic, t):
    # = Nic.kick (no PFC)
    bu = X.P[P_BUSY, X.N[N_PORT, nic]]
    if bu > t:
        t = bu
    if X.N[N_BUSY, nic] and X.N[N_PEND, nic] <= t:
        return
    X.N[N_BUSY, nic] = 1
    X.N[N_PEND, nic] = t
    X.N[N_TOKEN, nic] += 1
    push(X, t, _seq(X), E_TX, nic, X.N[N_TOKEN, nic])


@njit(cache=True, nogil=True, _nrt=False)
def _act_append(X, nic, q):
    X.Q[Q_ANEXT, q] = -1
    if X.N[N_AH, nic] < 0:
        X.N[N_AH, nic] = q
    else:
        X.Q[Q_ANEXT, X.N[N_AT, nic]] = q
    X.N[N_AT, nic] = q
    X.N[N_AL, nic] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _act_popleft(X, nic):
    q = X.N[N_AH, nic]
    X.N[N_AH, nic] = X.Q[Q_ANEXT, q]
    if X.N[N_AH, nic] < 0:
        X.N[N_AT, nic] = -1
    X.N[N_AL, nic] -= 1
    return q


@njit(cache=True, nogil=True, _nrt=False)
def nic_add(X, nic, q, t):
    # = Nic.add (no window: congestion control none)
    if X.Q[Q_RH, q] < 0:
        psn = X.Q[Q_SEQ, q]
        if psn >= X.Q[Q_NPSN, q]:
            return
        nok = X.Q[Q_NOK, q]
        if nok > t:
            t = nok
    if not X.Q[Q_INACT, q]:
        X.Q[Q_INACT, q] = 1
        _act_append(X, nic, q)
    _kick(X, nic, t)


@njit(cache=True, nogil=True, _nrt=False)
def _ctrl_out(X, nic, t, pkt):
    # = Nic._ctrl_out
    port = X.N[N_PORT, nic]
    bu = X.P[P_BUSY, port]
    if bu < t:
        bu = t
    wire = X.K[K_WIRE, pkt]
    bu += wire * X.P[P_K, port]
    X.P[P_BUSY, port] = bu
    X.P[P_TXB, port] += wire
    X.P[P_CB, port] += wire
    X.P[P_CP, port] += 1
    X.P[P_TXP, port] += 1
    _enqueue_arrival(X, port, pkt, bu + X.P[P_OFFSET, port])


@njit(cache=True, nogil=True, _nrt=False)
def _send_ctrl(X, nic, t, pkt):
    # = Nic.send_ctrl
    bu = X.P[P_BUSY, X.N[N_PORT, nic]]
    if X.N[N_CH, nic] >= 0 or (X.N[N_BUSY, nic] and X.N[N_PEND, nic] == (bu if bu > t else t)):
        X.K[K_NEXT, pkt] = -1
        if X.N[N_CH, nic] < 0:
            X.N[N_CH, nic] = pkt
        else:
            X.K[K_NEXT, X.N[N_CT, nic]] = pkt
        X.N[N_CT, nic] = pkt
        return
    _ctrl_out(X, nic, t, pkt)


@njit(cache=True, nogil=True, _nrt=False)
def _rto(X, q):
    # = Sender.rto, rto_mode fixed
    return X.g[G_RTO_LOW] if X.Q[Q_OL, q] <= X.g[G_RTO_LOW_UNITS] else X.g[G_RTO_HIGH]


@njit(cache=True, nogil=True, _nrt=False)
def _arm(X, q, t):
    # = Sender.arm
    X.Q[Q_ARMED, q] = 1
    X.Q[Q_RTO_AT, q] = t + _rto(X, q)
    push(X, X.Q[Q_RTO_AT, q], _seq(X), E_RTO, q, 0)


@njit(cache=True, nogil=True, _nrt=False)
def _nic_tx(X, nic, t, token):
    # = Nic.tx (no PFC, no window, no pacing below line rate, no on_sent: coverage)
    X.N[N_CALLS, nic] += 1
    if token != X.N[N_TOKEN, nic]:
        return
    port = X.N[N_PORT, nic]
    if X.N[N_CH, nic] >= 0:
        c = X.N[N_CH, nic]
        while c >= 0:
            nx = X.K[K_NEXT, c]
            _ctrl_out(X, nic, t, c)
            c = nx
        X.N[N_CH, nic] = -1
        X.N[N_CT, nic] = -1
        t = X.P[P_BUSY, port]
    bu = X.P[P_BUSY, port]
    if bu > t:
        X.N[N_PEND, nic] = bu
        push(X, bu, _seq(X), E_TX, nic, token)
        return
    mtu = X.g[G_MTU]
    seg = X.g[G_SEG]
    wake = -1
    for _ in range(X.N[N_AL, nic]):
        q = _act_popleft(X, nic)
        cause = -1
        psn = 0
        while X.Q[Q_RH, q] >= 0:
            d = X.Q[Q_RH, q]
            psn = X.D[D_PSN, d]
            cause = X.D[D_VAL, d]
            if X.a_flag[X.Q[Q_BASE, q] + psn] & F_LOST:
                break
            _rtx_popleft(X, q)
            cause = -1
        if cause < 0:
            psn = X.Q[Q_SEQ, q]
            if psn >= X.Q[Q_NPSN, q]:
                X.Q[Q_INACT, q] = 0
                continue
        nok = X.Q[Q_NOK, q]
        if nok > t:
            _act_append(X, nic, q)
            if wake < 0 or nok < wake:
                wake = nok
            continue
        size = X.Q[Q_SIZE, q]
        payload = size - psn * mtu
        if payload > seg:
            payload = seg
        npk = -(-payload // mtu)
        row = X.Q[Q_MSG, q]
        a = X.Q[Q_BASE, q] + psn
        if cause >= 0:
            _rtx_popleft(X, q)
            X.a_flag[a] &= ~F_LOST
            X.a_resent[a] = t
        else:
            X.Q[Q_SEQ, q] = psn + npk
            if psn < X.Q[Q_HIGH, q]:
                cause = X.Q[Q_GBC, q]
                X.a_resent[a] = t
            else:
                X.Q[Q_HIGH, q] = psn + npk
                X.M[M_INJ, row] += payload
        if cause >= 0:
            X.m_rtx[row, cause] += payload
        X.Q[Q_OUTB, q] += payload
        _out_append(X, q, psn, t)
        end = X.Q[Q_SEQ, q] * mtu
        X.Q[Q_SENTB, q] = end if end < size else size
        wire = payload + npk * X.g[G_HDR]
        pkt = _pkt(X, q, X.Q[Q_DST, q], wire, payload, psn, t, npk, port, DATA)
        ser = wire * X.P[P_K, port]
        done = t + ser
        X.P[P_BUSY, port] = done
        X.P[P_TXB, port] += wire
        X.P[P_TXP, port] += npk
        if ser > X.P[P_PEAK, port]:
            X.P[P_PEAK, port] = ser
        if not X.Q[Q_ARMED, q]:
            _arm(X, q, t)
        X.N[N_SENT, nic] += 1
        _enqueue_arrival(X, port, pkt, done + X.P[P_OFFSET, port])
        if X.N[N_AL, nic] == 0 and X.Q[Q_RH, q] < 0 and X.Q[Q_SEQ, q] >= X.Q[Q_NPSN, q]:
            X.Q[Q_INACT, q] = 0
            X.N[N_BUSY, nic] = 0
            return
        _act_append(X, nic, q)
        X.N[N_PEND, nic] = done
        push(X, done, _seq(X), E_TX, nic, token)
        return
    if wake >= 0:
        X.N[N_PEND, nic] = wake
        push(X, wake, _seq(X), E_TX, nic, token)
    else:
        X.N[N_BUSY, nic] = 0

# ---------------------------------------------------------------- sender


@njit(cache=True, nogil=True, _nrt=False)
def _payload(X, q, psn):
    # = Sender.payload
    p = X.Q[Q_SIZE, q] - psn * X.g[G_MTU]
    return p if p < X.g[G_SEG] else X.g[G_SEG]


@njit(cache=True, nogil=True, _nrt=False)
def _kick_qp(X, q, t):
    # = Sender.kick (one NIC port per queue pair in slice 1)
    nic_add(X, X.Q[Q_NIC, q], q, t)


@njit(cache=True, nogil=True, _nrt=False)
def _advance(X, q, t, cum):
    # = Sender._advance
    newly = 0
    if cum > X.Q[Q_UNA, q]:
        psn = X.Q[Q_UNA, q]
        base = X.Q[Q_BASE, q]
        while psn < cum:
            f = X.a_flag[base + psn]
            if f & F_SACKED:
                X.a_flag[base + psn] = f & ~F_SACKED
            elif f & F_LOST:
                X.a_flag[base + psn] = f & ~F_LOST
            else:
                newly += _payload(X, q, psn)
            psn += 1
        X.Q[Q_UNA, q] = cum
        X.Q[Q_TMO, q] = 0
        X.Q[Q_RTO_AT, q] = t + _rto(X, q)
        end = cum * X.g[G_MTU]
        X.Q[Q_ACKB, q] = end if end < X.Q[Q_SIZE, q] else X.Q[Q_SIZE, q]
    return newly


@njit(cache=True, nogil=True, _nrt=False)
def _stale(X, q, psn, ts):
    # psn < una or psn in sacked or (psn in resent and resent[psn] != ts) or psn in lost
    a = X.Q[Q_BASE, q] + psn
    r = X.a_resent[a]
    return (psn < X.Q[Q_UNA, q] or X.a_flag[a] & F_SACKED or (r != ABSENT and r != ts)
            or X.a_flag[a] & F_LOST)


@njit(cache=True, nogil=True, _nrt=False)
def _on_ack(X, q, t, pkt):
    # = Sender._on_ack: the legacy set-up (one ACK per unit, fixed timeouts: no D-SACK, no RTT
    #   samples), selective, no congestion-control hook
    newly = _advance(X, q, t, X.K[K_SEQ, pkt])
    s = X.K[K_SACK, pkt]
    base = X.Q[Q_BASE, q]
    if s >= 0:
        a = base + s
        if s >= X.Q[Q_UNA, q] and not X.a_flag[a] & F_SACKED:
            X.a_flag[a] |= F_SACKED
            if X.a_flag[a] & F_LOST:
                X.a_flag[a] &= ~F_LOST
            else:
                newly += _payload(X, q, s)
        td = X.K[K_TDATA, pkt]
        if td > X.Q[Q_RACK, q]:
            X.Q[Q_RACK, q] = td
        r = X.a_resent[a]
        if r != ABSENT and td < r:
            X.g[G_SPURIOUS] += 1
            w = 2 * (X.Q[Q_REO, q] if X.Q[Q_REO, q] else X.g[G_REO])
            X.Q[Q_REO, q] = w if w < X.g[G_REO_MAX] else X.g[G_REO_MAX]
    X.Q[Q_OUTB, q] -= newly
    if newly:
        X.Q[Q_TMO, q] = 0
        X.Q[Q_RTO_AT, q] = t + _rto(X, q)
    found = False
    limit = X.Q[Q_RACK, q] - (X.Q[Q_REO, q] if X.Q[Q_REO, q] else X.g[G_REO])
    while X.Q[Q_OH, q] >= 0:
        d = X.Q[Q_OH, q]
        psn = X.D[D_PSN, d]
        ts = X.D[D_VAL, d]
        if _stale(X, q, psn, ts):
            _out_popleft(X, q)
            continue
        if ts >= limit:
            break
        _out_popleft(X, q)
        X.a_flag[base + psn] |= F_LOST
        X.Q[Q_OUTB, q] -= _payload(X, q, psn)
        _rtx_append(X, q, psn, C_SACK)
        found = True
    if X.Q[Q_UNA, q] >= X.Q[Q_NPSN, q]:
        # = Sender._finish
        X.Q[Q_DONE, q] = 1
        X.Q[Q_OUTB, q] = 0
        X.Q[Q_ACTIVE, q] = 0
        return
    if found or newly:
        _kick_qp(X, q, t)


@njit(cache=True, nogil=True, _nrt=False)
def _stop_message(X, row):
    # = PacketEngine._stop
    for q in range(X.M[M_Q0, row], X.M[M_Q0, row] + X.M[M_QN, row]):
        X.Q[Q_DONE, q] = 1
        X.Q[Q_ACTIVE, q] = 0
        _rtx_clear(X, q)
        X.Q[Q_SEQ, q] = X.Q[Q_NPSN, q]


@njit(cache=True, nogil=True, _nrt=False)
def _on_rto(X, q, t):
    # = Sender._on_rto, fixed timeouts, selective
    if X.Q[Q_DONE, q] or (X.Q[Q_UNA, q] >= X.Q[Q_HIGH, q] and X.Q[Q_RH, q] < 0 and X.Q[Q_SEQ, q] >= X.Q[Q_NPSN, q]):
        X.Q[Q_ARMED, q] = 0
        return
    if X.Q[Q_UNA, q] >= X.Q[Q_HIGH, q]:
        X.Q[Q_ARMED, q] = 0
        return
    if t < X.Q[Q_RTO_AT, q]:
        push(X, X.Q[Q_RTO_AT, q], _seq(X), E_RTO, q, 0)
        return
    X.Q[Q_TMO, q] += 1
    X.g[G_TIMEOUTS] += 1
    if X.Q[Q_TMO, q] > X.g[G_RETRY]:
        X.Q[Q_ARMED, q] = 0
        # = PacketEngine.fail_qp: stop the message's queue pairs here; Python records the failure
        row = X.Q[Q_MSG, q]
        _stop_message(X, row)
        if not X.M[M_DONE, row]:
            X.M[M_DONE, row] = 1
            X.g[G_PY_KIND] = P_FAIL
            X.g[G_PY_A] = q
        return
    d = X.Q[Q_OH, q]
    base = X.Q[Q_BASE, q]
    while d >= 0:
        psn = X.D[D_PSN, d]
        if not _stale(X, q, psn, X.D[D_VAL, d]):
            X.a_flag[base + psn] |= F_LOST
            X.Q[Q_OUTB, q] -= _payload(X, q, psn)
            _rtx_append(X, q, psn, C_TIMEOUT)
        d = X.D[D_NEXT, d]
    _out_clear(X, q)
    X.Q[Q_RTO_AT, q] = t + _rto(X, q)
    push(X, X.Q[Q_RTO_AT, q], _seq(X), E_RTO, q, 0)
    _kick_qp(X, q, t)

# ---------------------------------------------------------------- receiver


@njit(cache=True, nogil=True, _nrt=False)
def _send_ack(X, q, t, seq, trigger):
    # = Receiver.send_now (kind ACK; ``trigger`` -1 = None), then reply_nic (one port: r_port)
    pkt = _pkt(X, q, X.Q[Q_SRC, q], X.g[G_ACK], 0, seq, t, 1, -1, ACK)
    if trigger >= 0:
        X.K[K_SACK, pkt] = X.K[K_SEQ, trigger]
        X.K[K_TDATA, pkt] = X.K[K_TTX, trigger]
    else:
        X.K[K_SACK, pkt] = -1
    X.K[K_CE, pkt] = X.Q[Q_RCE, q]
    X.Q[Q_RCE, q] = 0
    X.Q[Q_RUNACK, q] = 0
    X.Q[Q_RACKS, q] += 1
    _send_ctrl(X, X.Q[Q_RPORT, q], t, pkt)
    X.M[M_ACKS, X.Q[Q_MSG, q]] += 1


@njit(cache=True, nogil=True, _nrt=False)
def _accept(X, t, pkt, row):
    # = Receiver.accept (every message is final: no PXN in slice 1)
    b = t // X.g[G_BIN]
    if b > X.g[G_GOOD_HI]:
        X.g[G_GOOD_HI] = b
    X.good[b] += X.K[K_PAY, pkt]
    X.g[G_DELIV] += X.K[K_PAY, pkt]
    if not X.M[M_DELIV, row]:
        # = Recorder.on_first_arrival
        X.g[G_LFA] = t
        X.g[G_DLFA] = X.g[G_DELIV]
    X.M[M_DELIV, row] += X.K[K_PAY, pkt]


@njit(cache=True, nogil=True, _nrt=False)
def _on_packet(X, t, pkt):
    # = Receiver.on_packet, ack_every 1, legacy duplicates, ddp (on_gap holds), no CNPs
    npk = X.K[K_NPK, pkt]
    X.hist[int(math.log(t - X.K[K_TTX, pkt]) * X.f[0])] += npk
    q = X.K[K_QP, pkt]
    row = X.Q[Q_MSG, q]
    if X.K[K_CE, pkt]:
        # = Receiver._marked (cnp_interval None)
        X.M[M_ECN, row] += npk
        X.Q[Q_RCE, q] += npk
    seq = X.K[K_SEQ, pkt]
    cum = X.Q[Q_RCUM, q]
    base = X.Q[Q_BASE, q]
    if seq < cum or (X.Q[Q_RN, q] and X.a_flag[base + seq] & F_HELD):
        X.M[M_DUP, row] += X.K[K_PAY, pkt]
        _send_ack(X, q, t, cum, -1)
        return
    X.M[M_RX, row] += 1
    end = seq + npk
    # = record_reorder
    if X.K[K_TTX, pkt] < X.Q[Q_RMAXT, q]:
        X.M[M_OOO, row] += 1
        d = X.Q[Q_RMAX, q] - end
        if d < 0:
            d = 0
        n = X.g[G_OLOG_N]
        X.OL[0, n] = row
        X.OL[1, n] = d
        X.g[G_OLOG_N] = n + 1
    else:
        X.Q[Q_RMAXT, q] = X.K[K_TTX, pkt]
    if end > X.Q[Q_RMAX, q]:
        X.Q[Q_RMAX, q] = end
    if seq == cum:
        _accept(X, t, pkt, row)
        cum = end
        if X.Q[Q_RN, q]:
            # = Receiver._join_held
            h = X.Q[Q_DST, q]
            npsn = X.Q[Q_NPSN, q]
            while cum < npsn and X.a_flag[base + cum] & F_HELD:
                X.a_flag[base + cum] &= ~F_HELD
                X.Q[Q_RN, q] -= 1
                p = X.Q[Q_SIZE, q] - cum * X.g[G_MTU]
                if p > X.g[G_SEG]:
                    p = X.g[G_SEG]
                X.Q[Q_RHOLD, q] -= p
                X.HO[H_HOLD, h] -= p
                w = t - X.a_rarr[base + cum]
                X.M[M_RW, row] += w
                if w > X.M[M_RWMAX, row]:
                    X.M[M_RWMAX, row] = w
                cum += 1
            if cum > npsn:
                cum = npsn
        X.Q[Q_RCUM, q] = cum
        X.Q[Q_RUNACK, q] += 1
        _send_ack(X, q, t, cum, pkt)          # (r_unacked >= ack_every = 1)
    else:
        # = Receiver._hold
        a = base + seq
        X.a_flag[a] |= F_HELD
        X.Q[Q_RN, q] += 1
        X.a_rarr[a] = t
        p = X.K[K_PAY, pkt]
        X.Q[Q_RHOLD, q] += p
        if X.Q[Q_RHOLD, q] > X.M[M_PEAKH, row]:
            X.M[M_PEAKH, row] = X.Q[Q_RHOLD, q]
        h = X.Q[Q_DST, q]
        if not X.HO[H_MADE, h]:
            X.HO[H_MADE, h] = 1
            X.HO[H_ORDER, X.g[G_HN_MADE]] = h
            X.g[G_HN_MADE] += 1
        X.HO[H_HOLD, h] += p
        if X.HO[H_HOLD, h] > X.HO[H_PEAK, h]:
            X.HO[H_PEAK, h] = X.HO[H_HOLD, h]
        _accept(X, t, pkt, row)
        _send_ack(X, q, t, cum, pkt)
    if X.M[M_DELIV, row] >= X.M[M_SIZE, row] and not X.M[M_DONE, row]:
        X.M[M_DONE, row] = 1
        X.g[G_PY_KIND] = P_DONE
        X.g[G_PY_A] = row


@njit(cache=True, nogil=True, _nrt=False)
def _to_host(X, t, pkt):
    # = PacketEngine._to_host (data to the receiver; control counted, then to the sender)
    _advance_inflight(X, X.K[K_HOP, pkt])
    if X.K[K_KIND, pkt] == DATA:
        _on_packet(X, t, pkt)
    else:
        q = X.K[K_QP, pkt]
        X.M[M_CTRL_ARR, X.Q[Q_MSG, q]] += 1
        if not X.Q[Q_DONE, q]:                 # = Sender.on_ctrl (ACKs only: no NAK, no CNP)
            _on_ack(X, q, t, pkt)
    _free_pkt(X, pkt)

# ---------------------------------------------------------------- loop


@njit(cache=True, nogil=True, _nrt=False)
def settle_all(X, t):
    """= the settling loop of ``PacketEngine._finish``: every switch port's pending samples."""
    for port in range(X.P.shape[1]):
        if X.P[P_SW, port] >= 0 and X.P[P_PH, port] >= 0:
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
        if (g[G_PNFREE] < SPACE or g[G_DNFREE] < SPACE or g[G_HN] + SPACE > X.HP.shape[1]
                or g[G_OLOG_N] + SPACE > X.OL.shape[1] or t // g[G_BIN] + 1 >= len(X.good)):
            return R_SPACE
        i = _pop_into(X)
        kind = X.HP[2, i]
        a = X.HP[3, i]
        g[G_NOW] = t
        if kind == E_DELIVER:
            code = X.P[P_DELIVER, X.K[K_HOP, a]]
            if code == D_SWITCH:
                _switch_arrive(X, X.P[P_PEER_SW, X.K[K_HOP, a]], t, a)
            else:
                if code == D_HOST_SETTLE and X.P[P_PH, X.K[K_HOP, a]] >= 0:
                    _settle(X, X.K[K_HOP, a], t)
                _to_host(X, t, a)
        elif kind == E_TX:
            _nic_tx(X, a, t, X.HP[4, i])
        elif kind == E_RTO:
            _on_rto(X, a, t)
        elif kind == E_RELEASE:
            g[G_PY_KIND] = P_RELEASE
            g[G_PY_A] = a
        elif kind == E_SAMPLE:
            g[G_PY_KIND] = P_SAMPLE
            g[G_PY_A] = a
        else:
            g[G_ERR] = kind
            return R_ERROR
        g[G_EVENTS] += 1
        g[G_RUN_N] += 1
        if g[G_PY_KIND] != P_NONE:
            g[G_PY_T] = t
            return R_PY
        if not g[G_RUN_N] & (PROGRESS_EVERY - 1):
            return R_PROGRESS
