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

Cost: over columns (a :class:`~fabricsim.flows.MessageTable`; a list is converted once). Every
per-leg figure depends on the two hosts only through their pair class
(:meth:`IdealModel.pair_class`: how each end faces the other), so it is computed once per
class of equal inputs and per
(size, queue pairs), on a representative pair; the PXN relay once per (source, attachment set of
the destination). The dependency passes go level by level with numpy over the table's
dependents CSR (one step per level of the DAG, at most ``CHUNK_EDGES`` edges gathered at once),
the port sweep is one sort, so ~O(M log M + E) with no per-message Python.
"""
from __future__ import annotations

import copy
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
        from ..flows.table import MessageTable
        t = MessageTable.from_messages(messages)
        self.model = model
        self.ids = np.asarray(t.id, dtype=np.int64)
        self.start = np.asarray(t.start_ps, dtype=np.int64)
        self.gap = np.asarray(t.gap_ps, dtype=np.int64)
        n = len(t)
        order = np.argsort(self.ids, kind="stable")
        self._sorted_ids, self._order = self.ids[order], order
        self.out_ptr, self.out_v = self._dependency_csr(t)
        self.out_counts = np.diff(self.out_ptr)
        src = np.asarray(t.src, dtype=np.int64)
        dst = np.asarray(t.dst, dtype=np.int64)
        size = np.broadcast_to(np.asarray(t.size_bytes, dtype=np.int64), (n,))
        qps = np.broadcast_to(np.asarray(t.qps, dtype=np.int64), (n,))
        # legs: (message, a, b, qps, exact) in message order, route order
        relay = model.relays(src, dst)
        direct = relay < 0
        nlegs = np.where(direct, 1, 2)
        leg_msg = np.repeat(np.arange(n, dtype=np.int64), nlegs)
        first = np.concatenate([[0], np.cumsum(nlegs)[:-1]]) if n else np.zeros(0, dtype=np.int64)
        la = src[leg_msg].copy()
        lb = dst[leg_msg].copy()
        lq = qps[leg_msg].copy()
        r = np.flatnonzero(~direct)
        if len(r):
            lb[first[r]] = relay[r]              # src -> relay
            la[first[r] + 1] = relay[r]          # relay -> dst
            lq[first[r]] = -1                    # PXN legs: any chunking (qps None)
            lq[first[r] + 1] = -1
        ls = size[leg_msg]
        c_ab = model.pair_classes(la, lb)
        c_ba = model.pair_classes(lb, la)
        self._sides: dict = {}
        self._legs: dict = {}
        figs = np.empty((len(la), 5), dtype=np.int64) if len(la) else np.zeros((0, 5), dtype=np.int64)
        # legs whose per-message figures are the same function of (size, qps) share a class
        ncls = len(model._pc_rep)
        pk = c_ab * ncls + c_ba
        upk, inv_pk = np.unique(pk, return_inverse=True)
        leg_cls: dict = {}
        self._leg_rep: list = []
        lc = np.empty(len(upk), dtype=np.int64)
        for j, k in enumerate(upk.tolist()):
            ab, ba = divmod(k, ncls)
            hops, (o_rate, o_top, k_out), (i_rate, i_top, k_in), (a, b) = self._side(ab, ba)
            sig = (tuple(hops), model.framing(a, b), o_rate, o_top, i_rate, i_top, self._sig[(ab, ba)])
            cl = leg_cls.get(sig)
            if cl is None:
                cl = leg_cls[sig] = len(self._leg_rep)
                self._leg_rep.append((ab, ba))
            lc[j] = cl
        leg_class = lc[inv_pk.ravel()] if len(la) else np.zeros(0, dtype=np.int64)
        codes = []
        uniques = []
        for col in (leg_class, ls, lq):
            u, inv = np.unique(col, return_inverse=True)
            uniques.append(u)
            codes.append(inv.ravel())
        if len(la):
            key = codes[0]
            for u, code in zip(uniques[1:], codes[1:]):
                key = key * len(u) + code
            uk, firstk, invk = np.unique(key, return_index=True, return_inverse=True)
            vals = np.array([self._leg(*self._leg_rep[int(uniques[0][codes[0][f]])],
                                       *(int(u[code[f]]) for u, code in zip(uniques[1:], codes[1:])))
                             for f in firstk.tolist()], dtype=np.int64).reshape(len(uk), 5)
            figs = vals[invk.ravel()]
        phi, wire, tail_out, head_in, lat_last = figs.T
        min_fct = np.zeros(n, dtype=np.int64)
        if n:
            np.maximum.at(min_fct, leg_msg, phi)
        # port groups (host, direction, eligible ports): the sender's towards b, the receiver's back
        ps_ids: dict = {}
        out_ps = np.zeros(ncls, dtype=np.int64)
        out_rate = np.zeros(ncls, dtype=np.int64)
        for c in range(ncls):
            first_ports, _n, rate = model.ports(*model.representative(c))
            out_ps[c] = ps_ids.setdefault(first_ports, len(ps_ids))
            out_rate[c] = rate
        nps = max(len(ps_ids), 1)
        g_key = np.empty(2 * len(la), dtype=np.int64)
        g_key[0::2] = (la * nps + out_ps[c_ab]) * 2
        g_key[1::2] = (lb * nps + out_ps[c_ba]) * 2 + 1
        g_rate = np.empty(2 * len(la), dtype=np.int64)
        g_rate[0::2] = out_rate[c_ab]
        g_rate[1::2] = out_rate[c_ba]
        uk, firstg, inv = np.unique(g_key, return_index=True, return_inverse=True)
        #: per message, the shortest completion time any routing can give it alone (module docstring)
        self.shortest_fct_ps = min_fct
        self.group_rate = g_rate[firstg].astype(np.float64)
        self.leg_msg = np.repeat(leg_msg, 2)
        self.leg_group = inv.ravel().astype(np.int64)
        self.leg_wire = np.repeat(wire, 2)
        self.leg_head = np.zeros(2 * len(la), dtype=np.int64)
        self.leg_head[1::2] = head_in
        self.leg_tail = np.empty(2 * len(la), dtype=np.int64)
        self.leg_tail[0::2] = tail_out
        self.leg_tail[1::2] = lat_last

    # ------------------------------------------------------------------ per class figures
    def _side(self, c_ab: int, c_ba: int):
        """Hops and the sending / receiving sides of a leg of pair class ``c_ab`` (reverse class
        ``c_ba``): what the per-message figures need, computed on the classes' representatives."""
        key = (c_ab, c_ba)
        v = self._sides.get(key)
        if v is None:
            model = self.model
            a, b, hops, n_out, out_rate, top_out, reach = self._sending(c_ab)
            n_in, in_rate, top_in = self._receiving(c_ba)

            def k_out(qps, n_out=n_out):
                return model.split.parallel(qps, n_out)

            def k_in(qps, n_in=n_in, reach=reach):
                # the receiver's links a message can arrive by: those its k sending links reach
                # (a plane split limits the sender, not the receiver: a dual-homed receiver can
                # take one queue pair over both its links)
                return max(1, min(n_in, sum(reach[:k_out(qps)])))
            self.__dict__.setdefault("_sig", {})[key] = (n_out, n_in, reach)
            v = self._sides[key] = (hops, (out_rate, top_out, k_out), (in_rate, top_in, k_in), (a, b))
        return v

    def _sending(self, c_ab: int) -> tuple:
        """The sending side of a leg of pair class ``c_ab`` (on its representative ``a -> b``):
        ``(a, b, fastest hops, number of ports, their rate, the fastest port's rate, the receiver's links
        each port reaches, largest first)``; kept per class."""
        memo = self.__dict__.setdefault("_sending_memo", {})
        v = memo.get(c_ab)
        if v is None:
            model = self.model
            a, b = model.representative(c_ab)
            g = model.topo.graph
            out_ports, n_out, out_rate = model.ports(a, b)
            reach = tuple(sorted((self._receiver_links(s, b) for s in out_ports for _ in g.get_edge_data(a, s)),
                                 reverse=True))
            v = memo[c_ab] = (a, b, model.fastest_hops(a, b), n_out, out_rate, self._fastest_port(a, out_ports),
                              reach)
        return v

    def _fastest_port(self, host: int, switches) -> int:
        """The rate of ``host``'s fastest single port to ``switches`` (hosts with ports of unequal
        rates)."""
        g = self.model.topo.graph
        return max(e["rate_bps"] for s in switches for e in g.get_edge_data(host, s).values())

    def _receiving(self, c_ba: int) -> tuple:
        """The receiving side of a leg whose reverse has pair class ``c_ba`` (its representative
        ``b -> a`` read from ``b``): ``(number of ports, their rate, the fastest port's rate)``; kept per class."""
        memo = self.__dict__.setdefault("_receiving_memo", {})
        v = memo.get(c_ba)
        if v is None:
            b2, a2 = self.model.representative(c_ba)
            in_ports, n_in, in_rate = self.model.ports(b2, a2)
            v = memo[c_ba] = (n_in, in_rate, self._fastest_port(b2, in_ports))
        return v

    def _receiver_links(self, s, b):
        """Links into host ``b`` that a packet handed to switch ``s`` may arrive by (every
        shortest path from ``s``); the switch part is shared by hosts whose attachments in ``s``'s
        component are the same (:meth:`EqualCostPaths.attachments_near`)."""
        model = self.model
        memo = self.__dict__.setdefault("_links_memo", {})
        key = (s, int(model.host_classes()[b]))     # the class fixes b's attachments and links
        v = memo.get(key)
        if v is None:
            g = model.topo.graph
            v = memo[key] = sum(len(g.get_edge_data(x, b))
                                for x in self._last_switches(s, b, model.paths.attachments_near(s, b)))
        return v

    def _last_switches(self, s, b, attach):
        """The switches next to ``b`` that shortest paths from switch ``s`` end at: ``{s}`` at one
        of ``b``'s attachments, else the union over ``s``'s next hops. Walked level by level (the
        switches one hop closer to ``b`` than a level form the next), each step memoised per
        (level, attachment set): the levels of a tier are shared by every switch below them."""
        cache = self.__dict__.setdefault("_last_cache", {})
        key = (s, attach)
        last = cache.get(key)
        if last is None:
            last = cache[key] = self._settle(frozenset((s,)), b, attach)
        return last

    def _settle(self, level: frozenset, b, attach) -> frozenset:
        """The attachments of ``b`` that shortest paths from the switches ``level`` end at."""
        steps = self.__dict__.setdefault("_settle_cache", {})
        key = (level, attach)
        out = steps.get(key)
        if out is None:
            here = level & attach                     # at b: their paths end here
            rest = level - here
            nxt = frozenset(y for x in rest for y in self.model.paths.next_hops(x, b))
            out = here | self._settle(nxt, b, attach) if nxt else here
            steps[key] = out
        return out

    def _leg(self, c_ab: int, c_ba: int, size: int, qps: int):
        """(shortest FCT of the leg, wire bytes, sending tail, receiving head, last hop's latency)
        of ``size`` bytes on a leg of pair class ``c_ab``; ``qps`` -1: a PXN leg (any chunking)."""
        key = (c_ab, c_ba, size, qps)
        v = self._legs.get(key)
        if v is not None:
            return v
        model = self.model
        hops, side_out, side_in, (a, b) = self._side(c_ab, c_ba)
        if qps >= 0:
            full, full_wire, partial = model.packets(a, b, size, qps)
            counts: dict = {}
            for sz, cnt in ([(full_wire, full)] if full else []) + [(x, 1) for x in partial]:
                counts[sz] = counts.get(sz, 0) + cnt
            units = sorted(counts.items())
            wire = sum(sz * cnt for sz, cnt in units)
            sizes = [sz for sz, _cnt in units]
            q = qps
        else:
            wire = _fewest_packets_wire(model, a, b, size)
            units, sizes, q = [(wire, 1)], [0], None
        p = sizes[0]                   # the smallest packet
        phi = 0
        for c in sizes:
            tail_out, head_in = _head_tail(hops, c)
            phi = max(phi, _busiest_port_ps(units, c, q, side_out) + tail_out,
                      head_in + _busiest_port_ps(units, c, q, side_in) + hops[-1][1])
        tail_out, head_in = _head_tail(hops, p)
        v = self._legs[key] = (phi, wire, tail_out, head_in, hops[-1][1])
        return v

    def _dependency_csr(self, t):
        """(ptr, v): the dependency edges ``u -> v`` on messages of the table as a CSR by ``u``
        (row numbers); dependencies on ids outside the table are left out."""
        n = len(t)
        try:
            return t.dependents()
        except KeyError:
            pass
        deps = np.asarray(t.dep_ids, dtype=np.int64)
        v = np.repeat(np.arange(n, dtype=np.int64), np.diff(t.dep_ptr))
        pos = np.minimum(np.searchsorted(self._sorted_ids, deps), max(n - 1, 0))
        u = self._order[pos] if n else pos
        known = self.ids[u] == deps if n else np.zeros(0, dtype=bool)
        u, v = u[known], v[known]
        order = np.argsort(u, kind="stable")
        ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(u, minlength=n), out=ptr[1:])
        return ptr, v[order]

    def rows_of(self, message_ids) -> np.ndarray:
        """Positions of ``message_ids`` among the messages (``KeyError`` for an unknown id)."""
        ids = np.asarray(list(message_ids) if not hasattr(message_ids, "__array__") else message_ids,
                         dtype=np.int64)
        n = len(self.ids)
        pos = np.minimum(np.searchsorted(self._sorted_ids, ids), max(n - 1, 0))
        if len(ids) and (not n or np.any(self._sorted_ids[pos] != ids)):
            bad = ids[self._sorted_ids[pos] != ids] if n else ids
            raise KeyError(int(bad[0]))
        return self._order[pos] if n else pos

    def of(self, t0_ps: int, message_ids=None) -> Bound:
        """The bound of the messages ``message_ids`` (all if None) released no earlier than
        ``t0_ps``; dependencies on messages outside the set count as satisfied at ``t0_ps``."""
        n = len(self.ids)
        if message_ids is None:
            sel = None
        else:
            sel = np.zeros(n, dtype=bool)
            sel[self.rows_of(message_ids)] = True
        t0 = int(t0_ps)
        # the passes over the dependencies among the selected messages only (the edges leaving the
        # set gathered and dropped once, not by each pass): on the subgraph they induce, every
        # message outside the set has no edge and changes nothing
        g = self if sel is None else self._induced(sel)
        es, ef, levels = g._forward(t0)
        q = g._tails(levels)
        members = np.arange(n) if sel is None else np.flatnonzero(sel)
        crit = int(ef[members].max()) - t0 if len(members) else 0
        port = self._port(np.ones(n, dtype=bool) if sel is None else sel, es, q) - t0 if len(members) else 0
        return Bound(t0, max(crit, port), crit, port, self.ids[members], es[members], ef[members])

    def _induced(self, sel) -> "LowerBound":
        """This bound with only the dependency edges between messages of ``sel`` (a shallow copy
        sharing every other array)."""
        ptr = np.zeros(len(self.ids) + 1, dtype=np.int64)
        parts = []
        for nodes, counts in self._chunks(np.flatnonzero(sel)):
            vv, kept = self._out_edges(nodes, counts, sel)
            ptr[nodes + 1] = kept
            parts.append(vv)
        sub = copy.copy(self)
        np.cumsum(ptr, out=ptr)
        sub.out_ptr = ptr
        sub.out_v = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        sub.out_counts = np.diff(ptr)
        return sub

    # ------------------------------------------------------------------ passes
    #: dependency edges gathered at once by the passes (bounds their temporaries: ~8 bytes each)
    CHUNK_EDGES = 1 << 22

    def _chunks(self, nodes):
        """``nodes`` (sorted rows) cut into runs of at most ~:attr:`CHUNK_EDGES` out-edges."""
        counts = self.out_counts[nodes]
        total = int(counts.sum())
        if total <= self.CHUNK_EDGES:
            yield nodes, counts
            return
        ends = np.searchsorted(np.cumsum(counts), np.arange(self.CHUNK_EDGES, total, self.CHUNK_EDGES),
                               side="right")
        lo = 0
        for end in ends.tolist() + [len(nodes)]:
            hi = min(max(end, lo + 1), len(nodes))      # at least one node a run, each node once
            if hi > lo:
                yield nodes[lo:hi], counts[lo:hi]
                lo = hi

    def _out_edges(self, nodes, counts, sel):
        """(targets, count per node) of the edges leaving ``nodes`` (sorted rows, their out-degrees
        ``counts``), targets in ``sel``: grouped by node in the order of ``nodes`` (CSR gather)."""
        total = int(counts.sum())
        if not total:
            return np.empty(0, dtype=np.int64), counts
        lo = self.out_ptr[nodes]
        if total == len(self.out_v) and len(nodes) and lo[0] == 0:
            vv = self.out_v                      # every edge, in order: no gather
        else:
            offs = np.repeat(lo - np.cumsum(counts) + counts, counts)
            offs += np.arange(total)
            vv = self.out_v[offs]
            del offs
        if sel is not None:
            keep = sel[vv]
            if not keep.all():
                vv = vv[keep]
                starts = np.cumsum(counts) - counts
                nz = counts > 0
                kept = np.zeros(len(counts), dtype=np.int64)
                kept[nz] = np.add.reduceat(keep.astype(np.int64), starts[nz])
                counts = kept
        return vv, counts

    def _forward(self, t0):
        """ES / EF of every message, level by level (Kahn), over this bound's dependency edges (a
        set's induced ones: :meth:`_induced`); the levels, for the tails."""
        n = len(self.ids)
        indeg = np.bincount(self.out_v, minlength=n)
        frontier = np.flatnonzero(indeg == 0)
        inmax = np.full(n, _NONE, dtype=np.int64)
        es = np.maximum(self.start, t0)
        ef = np.zeros(n, dtype=np.int64)
        levels = []
        while len(frontier):
            levels.append(frontier)
            dep = inmax[frontier] != _NONE
            fr = frontier[dep]
            es[fr] = np.maximum(es[fr], inmax[fr] + self.gap[fr])
            ef[frontier] = es[frontier] + self.shortest_fct_ps[frontier]
            mark = np.zeros(n, dtype=bool)     # np.unique of the targets, without a sort of the edges
            any_edge = False
            for nodes, counts in self._chunks(frontier):
                vv, counts = self._out_edges(nodes, counts, None)
                if not len(vv):
                    continue
                any_edge = True
                np.maximum.at(inmax, vv, np.repeat(ef[nodes], counts))
                indeg -= np.bincount(vv, minlength=n)
                mark[vv] = True
            if not any_edge:
                break
            cand = np.flatnonzero(mark)
            frontier = cand[indeg[cand] == 0]
        return es, ef, levels

    def _tails(self, levels):
        """q: the longest chain of dependents (gaps + FCTs) after each message, deepest level first."""
        q = np.zeros(len(self.ids), dtype=np.int64)
        for frontier in reversed(levels):
            for nodes, counts in self._chunks(frontier):
                vv, counts = self._out_edges(nodes, counts, None)
                if len(vv):
                    vals = self.gap[vv] + self.shortest_fct_ps[vv] + q[vv]
                    nz = counts > 0
                    starts = (np.cumsum(counts) - counts)[nz]
                    u = nodes[nz]
                    q[u] = np.maximum(q[u], np.maximum.reduceat(vals, starts))
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


def _busiest_port_ps(units, c, qps, side):
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


def _head_tail(hops, p):
    """(sending tail, receiving head) of a ``p``-byte packet along ``hops`` (0: no serialisation)."""
    sers = [ser_ps(p, rate) if p else 0 for rate, _lat in hops]
    lats = [lat for _rate, lat in hops]
    return lats[0] + sum(sers[1:]) + sum(lats[1:]), sum(sers[:-1]) + sum(lats[:-1])


def _fewest_packets_wire(model: IdealModel, src: int, dst: int, size: int) -> int:
    """Wire bytes of ``size`` payload bytes ``src -> dst`` cut into the fewest packets any chunking
    allows: one header per MTU (or per NVLink packet payload) of payload, rounded up."""
    unit, hdr, pp = model.framing(src, dst)
    per = unit if pp is None else pp
    return size + -(-size // per) * hdr
