"""The lower bound on a pattern's duration (``pattern.ideal_duration_ps``) and on each traced
operation's time (``collectives.ideal_time_ps``), valid for traces with dependencies.

Notation, for a set of messages J with origin ``t0`` (the pattern's first release; for one
operation its first release, dependencies on messages outside the operation counting as
satisfied then): ``f_j`` is the message's ideal FCT (:meth:`IdealModel.fct`, alone on an idle
fabric), ``g_j`` its gap, ``s_j`` its ``start_ps``.

1. **Earliest start and finish.** ``ES_j = max(s_j, t0, max over deps d in J of EF_d + g_j)``,
   ``EF_j = ES_j + f_j``. The *critical path* is ``max_j EF_j - t0``.
2. **Delivery tail.** ``q_j = max(0, max over dependents k of j in J of g_k + f_k + q_k)``: after
   ``j`` completes, its longest chain of dependents still needs ``q_j``.
3. **Port load with release heads and delivery tails.** A message loads two *port groups*: its
   sender's eligible ports towards the destination and the receiver's ports towards the sender
   (``(host, direction, eligible port set)``, :meth:`IdealModel.ports`; total rate ``R``); a
   PXN-relayed message (:meth:`IdealModel.relay`) loads the groups of both legs, sender -> relay
   and relay -> destination. For a group and a threshold ``tau`` (each ``ES`` of its messages),
   with ``J_tau`` its messages of ``ES >= tau`` and ``W`` their wire bytes, the bound is
   ``tau + min head_j + W / R + min (tail_j + q_j)`` (mins over ``J_tau``), less ``t0``.
   ``head``/``tail`` along the leg's path of hops ``(rate_i, lat_i)``, ``p_j`` the wire size of the
   message's smallest packet: sending side ``head = 0``,
   ``tail = lat_1 + sum_{i>=2} (ser_i(p_j) + lat_i)``; receiving side
   ``head = sum_{i<H} (ser_i(p_j) + lat_i)``, ``tail = lat_H``.

The bound is the larger of 1 and 3 (:class:`Bound`). Without dependencies ``ES_j = s_j``, ``q = 0``
and 3 at the group's first ``tau`` is the former per-host figure (a host's wire bytes at line
rate plus its smallest latency): the new figure is at least that, except that the tail now
uses the smallest packet (the former pipeline latency ``f_j - w_j / rate`` assumed a full-size
last packet, which a multi-queue-pair message with short packets can beat by one packet time).

**Why each term bounds any schedule of the packet engine** (times absolute; the makespan is the
last completion less ``t0``):

- The engine releases a message at ``s_j``, or once its last dependency completed at
  ``max(end_d + g_j, s_j)`` (later with ``simulation.compute: gpu``), and never before ``t0``,
  the first release of the set. A message released at ``r`` ends no earlier than ``r + f_j``:
  ``f_j`` is the exact idle store-and-forward time of its packets (queueing, pausing, pacing,
  retransmission and sharing only delay them; a PXN message's ``f_j`` is already the larger of its
  two legs, each a lower bound). By induction along the dependency order ``release_j >= ES_j``
  and ``end_j >= EF_j``, so the makespan is at least the critical path, and a chain of
  dependents after ``j`` finishes no earlier than ``end_j + q_j``.
- Every message of ``J_tau`` is released at or after ``tau``, so its bytes cross the group's
  links after ``tau``: a host sends a message only on its eligible ports (the engine's
  ``eligible_nics``, the same first hops), and on the receiving side the bytes arrive over the
  links from the receiver's first-hop switches towards the sender (shortest paths are
  symmetric in every built topology). The links carry at most ``R`` bit/s together, so the last
  byte of ``J_tau`` is on them no earlier than ``tau + W / R`` (``W``: the first transmissions'
  wire bytes, counted as the engine frames them, NVLink framing included; retransmissions,
  control packets and INT bytes only add). On the receiving side nothing of ``J_tau`` reaches the
  last link before its first packet has been stored and forwarded over the other hops
  (``head``). The message owning that last byte completes at least ``tail`` later (the rest of
  its path for that packet, at least ``p_j``) and its dependents ``q_j`` after that. Mins over
  ``J_tau`` make the figure independent of which message is last; any subset of a group's
  messages gives a valid figure, so ties in ``ES`` need no care.
- Several ports (``k`` of ``n`` usable by one message): ``R`` is the rate of all ``n``, which no
  split can exceed. PXN legs: their wire bytes are counted for the fewest packets any chunking can
  have (``size + header x ceil(size / payload per header)``), their smallest packet as 0 bytes
  (a chunk's last packet can be tiny), and each leg's head and tail ignore the other leg, so they
  are smaller than the truth.
- ``cell_packets > 1``: a cell of ``k`` MTU packets is serialised as one unit and stored before it
  is forwarded, so on an idle path it arrives no earlier than its last packet would in the packet
  train, except that its serialisation is rounded up to a picosecond once instead of once per
  packet (rates such as 900 Gbit/s, where a byte is not a whole number of ps). The critical path
  therefore uses ``f_j - k x (packets_j + hops_j)`` ps with cells (the largest accumulated
  rounding along the train's recursion; nanoseconds on a millisecond pattern); ``ideal_fct_ps``
  itself stays packet-exact so the cell error shows in ``slowdown``.

Assumption inherited from :class:`IdealModel`: equal-cost paths between two hosts have the same
hop rates and latencies (the references follow one shortest path).

Cost: per message a few path look-ups (cached per host pair); the dependency passes go level by
level with numpy (one step per level of the DAG), the port sweep is one sort, so ~O(M log M).
"""
from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .ideal import IdealModel, _ser

PS_BITS = 8 * 10**12
_NONE = np.iinfo(np.int64).min


@dataclass(frozen=True)
class Bound:
    """The lower bound on the makespan of a set of messages (ps, relative to its ``t0_ps``).

    ``duration_ps = max(critical_path_ps, port_ps)``; ``message_ids``, ``earliest_start_ps`` and
    ``earliest_finish_ps`` (absolute ES / EF, docs in :mod:`fabricsim.analysis.bound`) are aligned."""

    t0_ps: int
    duration_ps: int
    critical_path_ps: int
    port_ps: int
    message_ids: np.ndarray
    earliest_start_ps: np.ndarray
    earliest_finish_ps: np.ndarray


class LowerBound:
    """Per-message pieces of the bound for one simulation, computed once; :meth:`of` gives the
    bound of any subset of the messages (the whole pattern, one operation).

    Parameters
    ----------
    model:
        The run's idle-fabric references.
    messages:
        The pattern's messages.
    fct_ps:
        Message id -> ideal FCT, if already computed (else :meth:`IdealModel.fct` is called).
    cell_packets:
        ``simulation.cell_packets`` (see the module docstring).
    """

    def __init__(self, model: IdealModel, messages: Sequence, fct_ps: Mapping[int, int] | None = None,
                 cell_packets: int = 1):
        self.ids = np.array([m.id for m in messages], dtype=np.int64)
        self.index = {int(i): k for k, i in enumerate(self.ids)}
        self.start = np.array([m.start_ps for m in messages], dtype=np.int64)
        self.gap = np.array([m.gap_ps for m in messages], dtype=np.int64)
        fct = [fct_ps[m.id] if fct_ps is not None else model.fct(m) for m in messages]
        self.dep_u, self.dep_v = self._dependency_edges(messages)
        groups: dict = {}               # (host, direction, eligible ports) -> group id
        rates: list[int] = []           # group id -> total rate of its ports (bit/s)
        pairs: dict = {}                # (a, b) -> hops and the two groups of a leg a -> b
        ends: dict = {}                 # (a, b, smallest packet) -> (sending tail, receiving head)

        def group(key, rate):
            gid = groups.get(key)
            if gid is None:
                gid = groups[key] = len(rates)
                rates.append(rate)
            return gid

        def pair(a, b):
            v = pairs.get((a, b))
            if v is None:
                out_ports, _n, out_rate = model.ports(a, b)
                in_ports, _n, in_rate = model.ports(b, a)
                v = pairs[(a, b)] = (model.hops(a, b), group((a, "out", out_ports), out_rate),
                                     group((b, "in", in_ports), in_rate))
            return v

        def head_tail(a, b, hops, p):
            v = ends.get((a, b, p))
            if v is None:
                sers = [_ser(p, rate) if p else 0 for rate, _lat in hops]
                lats = [lat for _rate, lat in hops]
                v = ends[(a, b, p)] = (lats[0] + sum(sers[1:]) + sum(lats[1:]), sum(sers[:-1]) + sum(lats[:-1]))
            return v

        leg_msg, leg_group, leg_wire, leg_head, leg_tail = [], [], [], [], []
        slack = []
        for k, m in enumerate(messages):
            relay = model.relay(m)
            route = ((m.src, m.dst, m.qps, True),) if relay is None else \
                ((m.src, relay, 1, False), (relay, m.dst, m.qps, False))
            packets = hops_n = 0
            for a, b, qps, exact in route:
                hops, g_out, g_in = pair(a, b)
                full, full_wire, partial = model.packets(a, b, m.size_bytes, qps)
                packets += full + len(partial)
                hops_n += len(hops)
                if exact:
                    wire = full * full_wire + sum(partial)
                    p = min(partial) if partial else full_wire
                else:
                    wire = _fewest_packets_wire(model, a, b, m.size_bytes)
                    p = 0
                tail_out, head_in = head_tail(a, b, hops, p)
                leg_msg += (k, k)
                leg_group += (g_out, g_in)
                leg_wire += (wire, wire)
                leg_head += (0, head_in)
                leg_tail += (tail_out, hops[-1][1])
            slack.append(cell_packets * (packets + hops_n) if cell_packets > 1 else 0)
        self.fct = np.array(fct, dtype=np.int64)
        self.f = self.fct - np.array(slack, dtype=np.int64)
        self.group_rate = np.array(rates, dtype=np.float64)
        self.leg_msg = np.array(leg_msg, dtype=np.int64)
        self.leg_group = np.array(leg_group, dtype=np.int64)
        self.leg_wire = np.array(leg_wire, dtype=np.int64)
        self.leg_head = np.array(leg_head, dtype=np.int64)
        self.leg_tail = np.array(leg_tail, dtype=np.int64)

    def _dependency_edges(self, messages):
        """(u, v) message indices of every dependency ``u -> v`` on a message of the list."""
        counts = np.fromiter((len(m.deps) for m in messages), dtype=np.int64, count=len(messages))
        deps = np.fromiter(itertools.chain.from_iterable(m.deps for m in messages), dtype=np.int64,
                           count=int(counts.sum()))
        v = np.repeat(np.arange(len(messages), dtype=np.int64), counts)
        order = np.argsort(self.ids, kind="stable")
        pos = np.minimum(np.searchsorted(self.ids, deps, sorter=order), max(len(order) - 1, 0))
        u = order[pos] if len(order) else pos
        known = self.ids[u] == deps if len(order) else np.zeros(0, dtype=bool)
        return u[known], v[known]

    def of(self, t0_ps: int, message_ids=None) -> Bound:
        """The bound of the messages ``message_ids`` (all if None) released no earlier than
        ``t0_ps``; dependencies on messages outside the set count as satisfied at ``t0_ps``."""
        n = len(self.ids)
        if message_ids is None:
            sel = np.ones(n, dtype=bool)
        else:
            sel = np.zeros(n, dtype=bool)
            sel[[self.index[int(i)] for i in message_ids]] = True
        t0 = int(t0_ps)
        edges = self._edges(sel)
        es, ef, levels = self._forward(sel, t0, edges)
        q = self._tails(levels, edges)
        members = np.flatnonzero(sel)
        crit = int(ef[members].max()) - t0 if len(members) else 0
        port = self._port(sel, es, q) - t0 if len(members) else 0
        return Bound(t0, max(crit, port), crit, port, self.ids[members], es[members], ef[members])

    # ------------------------------------------------------------------ passes
    def _edges(self, sel):
        """(u, v, ptr): the dependency edges ``u -> v`` inside the selection, sorted by ``u``, and
        the offset of each node's first out-edge."""
        keep = sel[self.dep_u] & sel[self.dep_v]
        u, v = self.dep_u[keep], self.dep_v[keep]
        order = np.argsort(u, kind="stable")
        u, v = u[order], v[order]
        return u, v, np.searchsorted(u, np.arange(len(self.ids) + 1))

    @staticmethod
    def _out_edges(nodes, ptr):
        """Positions in (u, v) of the edges leaving ``nodes`` (CSR gather)."""
        lo, hi = ptr[nodes], ptr[nodes + 1]
        counts = hi - lo
        total = int(counts.sum())
        if not total:
            return np.empty(0, dtype=np.int64)
        offs = np.repeat(lo - np.cumsum(counts) + counts, counts)
        return offs + np.arange(total)

    def _forward(self, sel, t0, edges):
        """ES / EF of the selected messages, level by level (Kahn); the levels, for the tails."""
        n = len(self.ids)
        u, v, ptr = edges
        indeg = np.bincount(v, minlength=n)
        inmax = np.full(n, _NONE, dtype=np.int64)
        es = np.maximum(self.start, t0)
        ef = np.zeros(n, dtype=np.int64)
        frontier = np.flatnonzero(sel & (indeg == 0))
        levels = []
        while len(frontier):
            levels.append(frontier)
            dep = inmax[frontier] != _NONE
            fr = frontier[dep]
            es[fr] = np.maximum(es[fr], inmax[fr] + self.gap[fr])
            ef[frontier] = es[frontier] + self.f[frontier]
            pos = self._out_edges(frontier, ptr)
            if not len(pos):
                break
            uu, vv = u[pos], v[pos]
            np.maximum.at(inmax, vv, ef[uu])
            indeg -= np.bincount(vv, minlength=n)
            cand = np.unique(vv)
            frontier = cand[indeg[cand] == 0]
        return es, ef, levels

    def _tails(self, levels, edges):
        """q: the longest chain of dependents (gaps + FCTs) after each message, deepest level first."""
        u, v, ptr = edges
        q = np.zeros(len(self.ids), dtype=np.int64)
        for frontier in reversed(levels):
            pos = self._out_edges(frontier, ptr)
            if len(pos):
                uu, vv = u[pos], v[pos]
                np.maximum.at(q, uu, self.gap[vv] + self.f[vv] + q[vv])
        return q

    def _port(self, sel, es, q) -> int:
        """Largest ``tau + min head + W / R + min (tail + q)`` over port groups and thresholds."""
        keep = sel[self.leg_msg]
        msg = self.leg_msg[keep]
        df = pd.DataFrame({"g": self.leg_group[keep], "es": es[msg], "w": self.leg_wire[keep],
                           "head": self.leg_head[keep], "tq": self.leg_tail[keep] + q[msg]})
        df = df.sort_values(["g", "es"], ascending=[True, False], kind="stable")
        by = df.groupby("g", sort=False)
        w = by["w"].cumsum().to_numpy(dtype=np.float64)
        head = by["head"].cummin().to_numpy()
        tq = by["tq"].cummin().to_numpy()
        rate = self.group_rate[df["g"].to_numpy()]
        # W * 8e12 / R in float (W * 8e12 overflows int64 beyond ~1 MB), floored and less 1 ps
        ser = np.maximum(np.floor(w * PS_BITS / rate) - 1, 0).astype(np.int64)
        return int((df["es"].to_numpy() + head + ser + tq).max())


def _fewest_packets_wire(model: IdealModel, src: int, dst: int, size: int) -> int:
    """Wire bytes of ``size`` payload bytes ``src -> dst`` cut into the fewest packets any chunking
    allows: one header per MTU (or per NVLink packet payload) of payload, rounded up."""
    unit, hdr, pp = model.framing(src, dst)
    per = unit if pp is None else pp
    return size + -(-size // per) * hdr
