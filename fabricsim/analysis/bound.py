"""The lower bound on a pattern's duration (``pattern.ideal_duration_ps``) and on each traced
operation's time (``collectives.ideal_time_ps``), valid for traces with dependencies.

Notation, for a set of messages J with origin ``t0`` (the pattern's first release; for one
operation its first release, dependencies on messages outside the operation counting as
satisfied then): ``g_j`` the message's gap, ``s_j`` its ``start_ps``, and per leg of its route
(one leg ``src -> dst``; a PXN-relayed message, :meth:`IdealModel.relay`, two: ``src -> relay``,
``relay -> dst``) the hops ``(rate_i, lat_i)`` of :meth:`IdealModel.hops`, its wire bytes ``W_j``
and the wire size ``p_j`` of its smallest packet. Per leg, on the sending side
``tail = lat_1 + sum_{i>=2} (ser_i(p_j) + lat_i)`` (the way of a last packet after it left the
host) and on the receiving side ``head = sum_{i<H} (ser_i(p_j) + lat_i)`` (the way of a first
packet to the receiver's link), ``tail = lat_H``.

0. **Shortest FCT** ``f_j`` = max over legs and over the sizes ``c`` of the message's packets of
   ``max(B_c / r_out + tail_out(c), head_in(c) + B_c / r_in + lat_H)``: of its ``N_c`` packets of
   at least ``c`` bytes one of the ``k`` ports a message can use (of a side's ``n``,
   :meth:`IdealModel.parallel_rate`) carries at least ``ceil(N_c / k)``, ``B_c`` the bytes of the
   smallest that many, ``r`` one port's rate; ``tail(c)`` / ``head(c)`` taken with a ``c``-byte
   packet. Not
   :meth:`IdealModel.fct`: that is the exact time along *one* path, and a message whose packets
   take several paths (spray, adaptive routing, several queue pairs) can beat it, its short last
   packets overtaking full ones between the first and the last link (measured: slowdown 0.9935, a
   5-rank ring of 9830 B chunks, 2 queue pairs, spray). ``f_j <= ideal_fct_j``, equal for a
   message of full packets on equal-rate hops, short of it by about one short packet's
   serialisation otherwise.
1. **Earliest start and finish.** ``ES_j = max(s_j, t0, max over deps d in J of EF_d + g_j)``,
   ``EF_j = ES_j + f_j``. The *critical path* is ``max_j EF_j - t0``.
2. **Delivery tail.** ``q_j = max(0, max over dependents k of j in J of g_k + f_k + q_k)``.
3. **Port load with release heads and delivery tails.** A leg loads two *port groups*: its
   sending host's eligible ports towards the other end and the receiving host's ports back
   (``(host, direction, eligible port set)``, :meth:`IdealModel.ports`; total rate ``R``). For a
   group and a threshold ``tau`` (each ``ES`` of its messages), with ``J_tau`` its messages of
   ``ES >= tau`` and ``W`` their wire bytes: ``tau + min head + W / R + min (tail + q) - t0``
   (mins over ``J_tau``; ``head = 0`` on the sending side).

The bound is the larger of 1 and 3 (:class:`Bound`). Without dependencies ``ES_j = s_j``, ``q = 0``
and 3 at the group's first ``tau`` is the former per-host figure (a host's wire bytes at line
rate plus its smallest latency), the tail taken with the smallest packet.

**Why each term bounds any schedule of the packet engine** (times absolute; the makespan is the
last completion less ``t0``):

- ``f_j``: a message released at ``r`` puts ``W_j`` wire bytes (first transmissions, headers
  and NVLink framing as the engine frames them; retransmissions, control packets and INT only
  add) through at most ``k`` of its host's ports. Of its packets of at least ``c`` bytes one port
  carries ``ceil(N_c / k)`` or more, out no earlier than ``r + B_c / r_out``, and the last of
  them still has every later hop to be
  stored, serialised and forwarded (``tail(c)``); on the receiving side none of them reaches the
  last link before a ``c``-byte packet could make its way there (``head(c)``), and the busiest
  of the receiver's links must then carry ``B_c``. No single path is assumed, so every routing
  policy is covered.
- The engine releases a message at ``s_j``, or once its last dependency completed at
  ``max(end_d + g_j, s_j)`` (later with ``simulation.compute: gpu``), and never before ``t0``,
  the first release of the set. By induction along the dependency order ``release_j >= ES_j``
  and ``end_j >= EF_j``, so the makespan is at least the critical path, and a chain of
  dependents after ``j`` finishes no earlier than ``end_j + q_j``.
- Every message of ``J_tau`` is released at or after ``tau``, so its bytes cross the group's
  links after ``tau``: a host sends a message only on its eligible ports (the engine's
  ``eligible_nics``, the same first hops), and the bytes arrive over the links from the
  receiver's first-hop switches towards the sender (shortest paths are symmetric in every built
  topology). The links carry at most ``R`` bit/s together, so the last byte of ``J_tau`` is on
  them no earlier than ``tau + head + W / R``; the message owning it completes at least ``tail``
  later and its dependents ``q_j`` after that. Mins over ``J_tau`` make the figure independent
  of which message is last; any subset of a group's messages gives a valid figure, so ties in
  ``ES`` need no care. ``R`` is the rate of all ``n`` ports, which no plane split can exceed.
- PXN legs: the engine moves a relayed message as chunks, several at once, each on its own queue
  pairs; a leg counts the fewest packets any chunking can have
  (``size + header x ceil(size / payload per header)``), its smallest packet as 0 bytes, any ``k``
  of ``n`` ports, and ignores the other leg, so its figures are smaller than the truth.
- ``cell_packets > 1``: a cell of several MTU packets of one queue pair has their wire bytes
  and is serialised, stored and forwarded as one unit, at least as long as any packet in it, so
  ``B_c / r``, ``head(c)`` and ``tail(c)`` hold as they are (packets counted inside cells;
  serialisation times floored over a port's bytes, never rounded per packet): no correction (unlike
  ``ideal_fct_ps``, which stays packet-exact so the cell error shows in ``slowdown``, and which a
  cell train can beat by rounding its serialisation to a picosecond once per cell).

Latencies and serialisation times per hop are the fastest of any shortest path's at that hop
(:meth:`IdealModel.fastest_hops`), so heads and tails bound every path from below, and the
receiving side counts the receiver's links the sending links reach (a dual-homed receiver can take
one queue pair over both); a side's busiest port is taken at the rate of its fastest port (hosts
whose ports have unequal rates). A run that beats the bound anyway gets a warning in
``summary.warnings`` (an error under ``FABRICSIM_CHECK_BOUND=1``, which the test suite sets).

Cost: per message a few cached look-ups; the dependency passes go level by level with numpy
(one step per level of the DAG), the port sweep is one sort, so ~O(M log M + E).
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .ideal import IdealModel, ser_ps

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

    Examples
    --------
    A permutation of 64 KiB messages (16 full packets each, no dependencies): the critical path is
    the longest ideal FCT, and each host's one message makes the port term no larger.

    >>> from fabricsim.api import prepare
    >>> _, sim = prepare({"name": "doc", "traffic": {"pattern": "permutation", "message_size": "64KiB"}})
    >>> model = IdealModel(sim)
    >>> b = LowerBound(model, sim.messages).of(0)
    >>> b.critical_path_ps == max(model.fct(m) for m in sim.messages) == b.duration_ps >= b.port_ps
    True
    """

    def __init__(self, model: IdealModel, messages: Sequence):
        self.ids = np.array([m.id for m in messages], dtype=np.int64)
        self.index = {int(i): k for k, i in enumerate(self.ids)}
        self.start = np.array([m.start_ps for m in messages], dtype=np.int64)
        self.gap = np.array([m.gap_ps for m in messages], dtype=np.int64)
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

        last_cache: dict = {}           # (switch, destination's attachments) -> last switches

        def receiver_links(s, b):
            """Links into host ``b`` that a packet handed to switch ``s`` may arrive by (every
            shortest path from ``s``); the switch part is shared by hosts of one attachment set."""
            key = (s, model.paths.attachments(b))
            last = last_cache.get(key)
            if last is None:
                seen, stack, found = {s}, [s], set()
                while stack:
                    x = stack.pop()
                    nh = model.paths.next_hops(x, b)
                    if nh == [b]:
                        found.add(x)
                        continue
                    for y in nh:
                        if y not in seen:
                            seen.add(y)
                            stack.append(y)
                last = last_cache[key] = found
            g = model.topo.graph
            return sum(len(g.get_edge_data(x, b)) for x in last)

        def pair(a, b):
            v = pairs.get((a, b))
            if v is None:
                out_ports, n_out, out_rate = model.ports(a, b)
                in_ports, n_in, in_rate = model.ports(b, a)
                g = model.topo.graph
                # receiver links reachable through each of the sender's eligible links, largest first
                reach = sorted((receiver_links(s, b) for s in out_ports for _ in g.get_edge_data(a, s)), reverse=True)

                def k_out(qps, n_out=n_out):
                    return model.split.parallel(qps, n_out)

                def k_in(qps, n_in=n_in, reach=reach):
                    # the receiver's links a message can arrive by: those its k sending links reach
                    # (a plane split limits the sender, not the receiver: a dual-homed receiver can
                    # take one queue pair over both its links)
                    return max(1, min(n_in, sum(reach[:k_out(qps)])))
                # the fastest single port of each side (hosts with ports of unequal rates)
                top_out = max(e["rate_bps"] for s in out_ports for e in g.get_edge_data(a, s).values())
                top_in = max(e["rate_bps"] for s in in_ports for e in g.get_edge_data(b, s).values())
                v = pairs[(a, b)] = (model.fastest_hops(a, b), group((a, "out", out_ports), out_rate),
                                     group((b, "in", in_ports), in_rate), (out_rate, top_out, k_out),
                                     (in_rate, top_in, k_in))
            return v

        def busiest_port_ps(units, c, qps, side):
            """Floor of the time the busiest of the ports one message can use (``k`` of the side's
            ``n``: on the sending side :meth:`IdealModel.parallel_rate`'s share, on the receiving
            side the receiver links those ``k`` reach) needs for its share of the message's packets
            of at least ``c`` bytes: at least ``ceil(N_c / k)`` of them, the smallest ones, at the
            side's fastest port rate (every port's, when they are equal).
            ``units`` [(wire bytes, count)] ascending; ``qps`` None: any chunking, bytes only."""
            total_rate, rate, ports_used = side
            if qps is None:                      # all of the side's ports at once
                return units[0][0] * PS_BITS // total_rate
            k = ports_used(qps)
            left = -(-sum(cnt for size, cnt in units if size >= c) // k)
            total = 0
            for size, cnt in units:
                if size >= c and left:
                    take = min(cnt, left)
                    total += take * size
                    left -= take
            return total * PS_BITS // rate

        def head_tail(a, b, hops, p):
            v = ends.get((a, b, p))
            if v is None:
                sers = [ser_ps(p, rate) if p else 0 for rate, _lat in hops]
                lats = [lat for _rate, lat in hops]
                v = ends[(a, b, p)] = (lats[0] + sum(sers[1:]) + sum(lats[1:]), sum(sers[:-1]) + sum(lats[:-1]))
            return v

        leg_msg, leg_group, leg_wire, leg_head, leg_tail = [], [], [], [], []
        min_fct = []
        for k, m in enumerate(messages):
            relay = model.relay(m)
            # a PXN leg moves several chunks at once, each its own queue pairs: any k of n ports
            route = ((m.src, m.dst, m.qps, True),) if relay is None else \
                ((m.src, relay, None, False), (relay, m.dst, None, False))
            phi = 0
            for a, b, qps, exact in route:
                hops, g_out, g_in, side_out, side_in = pair(a, b)
                if exact:
                    full, full_wire, partial = model.packets(a, b, m.size_bytes, m.qps)
                    counts: dict = {}
                    for size, cnt in ([(full_wire, full)] if full else []) + [(x, 1) for x in partial]:
                        counts[size] = counts.get(size, 0) + cnt
                    units = sorted(counts.items())
                    wire = sum(size * cnt for size, cnt in units)
                    sizes = [size for size, _cnt in units]
                else:
                    wire = _fewest_packets_wire(model, a, b, m.size_bytes)
                    units, sizes = [(wire, 1)], [0]
                p = sizes[0]                   # the smallest packet
                for c in sizes:
                    tail_out, head_in = head_tail(a, b, hops, c)
                    phi = max(phi, busiest_port_ps(units, c, qps, side_out) + tail_out,
                              head_in + busiest_port_ps(units, c, qps, side_in) + hops[-1][1])
                tail_out, head_in = head_tail(a, b, hops, p)
                leg_msg += (k, k)
                leg_group += (g_out, g_in)
                leg_wire += (wire, wire)
                leg_head += (0, head_in)
                leg_tail += (tail_out, hops[-1][1])
            min_fct.append(phi)
        #: per message, the shortest completion time any routing can give it alone (module docstring)
        self.shortest_fct_ps = np.array(min_fct, dtype=np.int64)
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
            ef[frontier] = es[frontier] + self.shortest_fct_ps[frontier]
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
                np.maximum.at(q, uu, self.gap[vv] + self.shortest_fct_ps[vv] + q[vv])
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
