"""Idle-fabric references: how long a message (or a whole pattern) takes with nothing else running.

For a message sent as a train of store-and-forward packets along a path of hops with
serialisation times ``ser_i(s)`` and per-hop latency ``d_i`` (propagation plus the next node's
forwarding latency), the last bit of ``n`` equal packets arrives after
``sum_i (ser_i(s) + d_i) + (n - 1) * max_i ser_i(s)``. Queue pairs each end in a shorter last
packet; those are appended with the exact tandem recursion
``T_h = max(T_prev_h, T_{h-1} + d_h) + ser_h(s')``.
Ideal figures always use real MTU packets, whatever ``cell_packets`` is, so the error of the
cell approximation shows up in the slowdown. Inside an NVLink domain with ``nvlink.transport:
credit`` they use the domain's units and NVLink framing (:func:`fabricsim.net.nvlink.nvlink_wire_bytes`),
as the engine sends them.
"""
from __future__ import annotations

import numpy as np

from ..net.nvlink import nvlink_wire_bytes

PS_BITS = 8 * 10**12


def ser_ps(nbytes: int, rate_bps: int) -> int:
    """Serialisation time of ``nbytes`` at ``rate_bps`` in ps, rounded up (as the engine's ports).

    >>> ser_ps(4178, 400 * 10**9)
    83560
    """
    return -((-nbytes * PS_BITS) // rate_bps)


_ser = ser_ps


def message_packets(size: int, qps: int, mtu: int, header: int,
                    packet_payload: int | None = None) -> tuple[int, list[int]]:
    """(number of full-MTU packets, sizes in wire bytes of the partial ones) of a message.

    With ``packet_payload`` (NVLink) ``mtu`` is the simulated unit and ``header`` is paid per
    ``packet_payload`` bytes of it."""
    base, extra = divmod(size, qps)
    full = 0
    partial = []
    for q in range(qps):
        b = base + (1 if q < extra else 0)
        f, r = divmod(b, mtu)
        full += f
        if r:
            partial.append(r + header if packet_payload is None else nvlink_wire_bytes(r, packet_payload, header))
    return full, partial


def path_hops(topo, paths, src, dst):
    """[(rate_bps, latency_ps)] for each link of one shortest path src -> dst."""
    nodes = paths.one_path(src, dst)
    g = topo.graph
    hops = []
    for a, b in zip(nodes, nodes[1:]):
        d = min(g.get_edge_data(a, b).values(), key=lambda e: (-e["rate_bps"], e["delay_ps"]))
        lat = d["delay_ps"] + (g.nodes[b].get("switch_latency_ps", 0) if g.nodes[b]["type"] == "switch" else 0)
        hops.append((d["rate_bps"], lat))
    return hops


def train_time(hops, full: int, full_wire: int, partial: list[int]) -> int:
    """Arrival of the last bit at the last hop for ``full`` packets of ``full_wire`` bytes then
    the ``partial`` packets, starting at 0 on an idle path."""
    T = [0] * len(hops)          # T[i]: when the last packet so far finishes serialising on hop i
    if full:
        acc = 0
        mx = 0
        for i, (rate, lat) in enumerate(hops):
            s = _ser(full_wire, rate)
            mx = max(mx, s)
            acc += s
            T[i] = acc + (full - 1) * mx
            acc += lat
    for w in sorted(partial, reverse=True):
        arrive = 0
        for i, (rate, lat) in enumerate(hops):
            T[i] = max(T[i], arrive) + _ser(w, rate)
            arrive = T[i] + lat
    # T[-1] is the departure of the last bit from the last port; add the final link latency
    return T[-1] + hops[-1][1]


def base_rtt_ps(topo, paths, src: int, dst: int, data_wire: int, ack_wire: int) -> int:
    """Round trip of one data packet of ``data_wire`` bytes from ``src`` to ``dst`` and of its
    ``ack_wire``-byte ACK back, each alone on one idle shortest path (ps): the base RTT the
    congestion-control algorithms are given (``Flow.base_rtt_ps``) and the shortest window
    ``goodput_while_all_active_fraction`` is computed over."""
    fwd = train_time(path_hops(topo, paths, src, dst), 1, data_wire, [])
    back = train_time(path_hops(topo, paths, dst, src), 1, ack_wire, [])
    return fwd + back


class IdealModel:
    """Idle-fabric references for one simulation: per-message ideal completion time, and the
    line rate a host can use towards a destination (its eligible ports, see
    ``EqualCostPaths.first_hops``). With ``k`` ports usable at once (per the plane-split policy)
    the message's packets are divided evenly over ``k`` identical paths."""

    def __init__(self, sim):
        from ..planes import SPLITS
        self.topo = sim.topology
        self.paths = sim.paths
        sc = sim.scenario
        self.mtu = sc.simulation.mtu
        self.header = sc.simulation.header
        self.ack_size = sc.receiver.params.ack_size
        self.pxn = bool(sc.nic.params is not None and sc.nic.params.pxn)
        self.split = SPLITS.get(sc.nic.name)(sc.nic.params, None)
        self._hops: dict = {}
        self._fastest: dict = {}
        self._inner: dict = {}
        self._ports: dict = {}
        self._framing: dict = {}
        self._hc = None                 # host -> host class (:meth:`host_classes`)
        self._link_table = getattr(sim, "link_table", None)     # () -> the run's LinkTable, if it has one
        self._pc: dict = {}             # (class of src, class of dst) -> pair class id
        self._pc_coarse: dict = {}      # (src facing dst, dst facing src) -> pair class id
        self._pc_rep: list = []         # pair class id -> a representative (src, dst)
        self._train_memo: dict = {}     # (pair class, size, qps) -> :meth:`_train`
        self._relay_memo: dict = {}     # (src, attachments of dst) -> PXN relay or -1
        self._ag: dict = {}             # attachment set -> id
        self._link_memo: dict = {}      # (switch level, next level) -> :meth:`_fastest_link`
        self._level_memo: dict = {}     # (switch level, attachments of dst it can reach) -> next level

    def framing(self, src: int, dst: int) -> tuple[int, int, int | None]:
        """(unit payload bytes, header bytes, packet payload bytes or None) of ``src`` -> ``dst``:
        NVLink units and framing inside a credit-flow-controlled NVLink domain, else MTU packets
        with ``simulation.header``."""
        key = (src, dst)
        v = self._framing.get(key)
        if v is None:
            g = self.topo.graph
            first = self.paths.first_hops(src, dst)
            a = g.nodes[first[0]] if first else {}
            if a.get("nvlink_transport") == "credit":
                v = (a["nvlink_unit_bytes"], a["nvlink_packet_header_bytes"], a["nvlink_packet_payload_bytes"])
            else:
                v = (self.mtu, self.header, None)
            self._framing[key] = v
        return v

    def ports(self, src: int, dst: int) -> tuple[frozenset, int, int]:
        """(eligible first-hop switches, number of links to them, their total rate in bit/s)."""
        key = (src, dst)
        v = self._ports.get(key)
        if v is None:
            first = frozenset(self.paths.first_hops(src, dst))
            g = self.topo.graph
            rates = [d["rate_bps"] for s in first for d in g.get_edge_data(src, s).values()]
            v = self._ports[key] = (first, len(rates), sum(rates))
        return v

    def parallel_rate(self, msg) -> int:
        """Line rate (bit/s) ``msg`` can use alone on an idle fabric at its two endpoints: the
        share of each host's eligible ports the plane-split policy lets one message of its queue
        pairs use (``k`` of ``n``), the smaller of the sender's and the receiver's."""
        out = []
        for a, b in ((msg.src, msg.dst), (msg.dst, msg.src)):
            _first, n, rate = self.ports(a, b)
            out.append(rate * self.split.parallel(msg.qps, n) // n)
        return min(out)

    def base_rtt(self, src: int, dst: int) -> int:
        """Idle base RTT of the flow ``src -> dst`` (:func:`base_rtt_ps` with one MTU packet)."""
        return base_rtt_ps(self.topo, self.paths, src, dst, self.mtu + self.header, self.ack_size)

    def packets(self, src: int, dst: int, size: int, qps: int) -> tuple[int, int, list[int]]:
        """(number of full units, wire bytes of one full unit, wire bytes of each partial one) of
        ``size`` bytes split over ``qps`` queue pairs from ``src`` to ``dst``, framed as the engine
        frames them (:meth:`framing`)."""
        unit, hdr, pp = self.framing(src, dst)
        full, partial = message_packets(size, qps, unit, hdr, pp)
        return full, unit + hdr if pp is None else nvlink_wire_bytes(unit, pp, hdr), partial

    def wire_bytes(self, msg) -> int:
        """Wire bytes of ``msg`` (first transmissions, every header included)."""
        full, full_wire, partial = self.packets(msg.src, msg.dst, msg.size_bytes, msg.qps)
        return full * full_wire + sum(partial)

    def hops(self, src: int, dst: int) -> list[tuple[int, int]]:
        """[(rate_bps, latency_ps)] per hop of ``src -> dst`` that the ideal times use: the
        fastest link of any shortest path at each hop (:meth:`fastest_hops`). Where the equal-cost
        paths look alike (every built topology without failures) that is every path's; where they
        differ (a degraded or failed link, parallel links of unequal rate, a dual-homed host) it is
        the best the idle fabric offers at each hop, so the ideal is a lower bound of every path
        rather than the time along one path that may hold the slow link (it was the first path
        :func:`path_hops` found: a message through a degraded link then had an ideal of 92.7 us
        where the fabric allows 47 us, and the flow engine, whose packet-train floor is this
        ideal, could not beat it)."""
        return self.fastest_hops(src, dst)

    def fastest_hops(self, src: int, dst: int) -> list[tuple[int, int]]:
        """[(rate_bps, latency_ps)] per hop of ``src -> dst``, each the fastest over every shortest
        path: the largest rate and the smallest latency (propagation plus the next switch's
        forwarding) of any link at that hop. Equal to :meth:`hops` when the equal-cost paths look
        alike (every built topology); never above any path's, so sums over it bound every path
        from below (what the lower bound's heads and tails use). The switch-to-switch part depends
        on ``dst`` only through its attachment switches the first hops can reach
        (:meth:`EqualCostPaths.attachments_reachable`) and is cached per (first hops, those): per
        leaf pair, not per host pair."""
        key = (src, dst)
        hops = self._fastest.get(key)
        if hops is None:
            paths = self.paths
            first = paths.first_hops(src, dst)
            if not first:
                raise ValueError(f"no route from {src} to {dst}")
            ikey = (frozenset(first), paths.attachments_reachable(first, dst))
            inner = self._inner.get(ikey)
            if inner is None:
                inner = self._inner[ikey] = self._switch_levels(first, dst, ikey[1])
            levels, last = inner
            hops = self._fastest[key] = [self._fastest_link(src, first)] + levels + [self._fastest_link(last, [dst])]
        return hops

    def _fastest_link(self, sources, targets) -> tuple[int, int]:
        """(largest rate, smallest latency incl. the target switch's forwarding) over the links
        from ``sources`` (a node or an iterable of nodes) to ``targets``; a level pair of switch
        lists (tuples) is computed once (the levels of a fabric's tiers recur for every pair of
        source and destination switch sets)."""
        if isinstance(sources, tuple) and isinstance(targets, tuple):
            memo = self._link_memo
            key = (sources, targets)
            v = memo.get(key)
            if v is None:
                v = memo[key] = self._fastest_link_scan(sources, targets)
            return v
        return self._fastest_link_scan(sources, targets)

    def _fastest_link_scan(self, sources, targets) -> tuple[int, int]:
        g = self.topo.graph
        rate, lat = 0, None
        for a in ([sources] if isinstance(sources, int) else sources):
            for b in targets:
                data = g.get_edge_data(a, b)
                if not data:
                    continue
                fwd = g.nodes[b].get("switch_latency_ps", 0) if g.nodes[b]["type"] == "switch" else 0
                for e in data.values():
                    rate = max(rate, e["rate_bps"])
                    lat = e["delay_ps"] + fwd if lat is None else min(lat, e["delay_ps"] + fwd)
        return rate, lat

    def _switch_levels(self, first, dst, attach):
        """The fastest link per switch-to-switch hop from the level ``first`` to the switches
        attached to ``dst``, and that last level. ``attach``: the attachments of ``dst`` the
        levels can meet (:meth:`EqualCostPaths.attachments_reachable` of ``first``; the levels
        stay in the components of ``first``)."""
        level, levels = tuple(sorted(first)), []
        steps = self._level_memo
        while True:
            # the next level depends on dst only through its attachment switches (or is [dst])
            inside = sum(a in attach for a in level)
            if level and inside == len(level):    # every next hop is dst itself
                return levels, list(level)
            key = (level, attach)
            nxt = steps.get(key) if not inside else None
            if nxt is None:
                nxt = tuple(sorted({b for a in level for b in self.paths.next_hops(a, dst)}))
                if not inside:
                    steps[key] = nxt
            if not nxt:
                raise ValueError(f"no route to {dst}")
            levels.append(self._fastest_link(level, nxt))
            level = nxt

    def relay(self, msg) -> int | None:
        """The PXN relay GPU of ``msg`` (``nic.pxn``), as the engine chooses it, or None."""
        return self.paths.pxn_relay(msg.src, msg.dst) if self.pxn else None

    def fct(self, msg) -> int:
        """Ideal completion time of ``msg`` alone on an idle fabric (ps).

        Direct messages: exact, for store-and-forward packets along one shortest path. A
        PXN-relayed message (the relay stores each chunk before forwarding it): a lower bound,
        the larger of its two legs' idle times (sender -> relay over NVLink, relay -> destination).
        """
        relay = self.relay(msg)
        if relay is None:
            return self.train(msg.src, msg.dst, msg.size_bytes, msg.qps)
        return max(self.train(msg.src, relay, msg.size_bytes, 1),
                   self.train(relay, msg.dst, msg.size_bytes, msg.qps))

    # ------------------------------------------------------------------ classes and columns
    def host_classes(self) -> np.ndarray:
        """Host id -> host class (-1 for other nodes): hosts with the same attachment switches and
        the same links to each of them (multiset of (rate, delay)) share a class. Every per-pair
        figure of this model and of the lower bound (:meth:`ports`, :meth:`framing`, :meth:`hops`,
        :meth:`fastest_hops`, :meth:`base_rtt`, the receiver links of
        :class:`~fabricsim.analysis.bound.LowerBound`) depends on ``src`` and ``dst`` only through
        their classes: first hops and the switch part of a path through ``src``'s neighbours and
        ``dst``'s attachment set, the first and last links through the links' data. (The PXN relay
        is a host, not a class figure: :meth:`relays`.)"""
        if self._hc is None:
            g = self.topo.graph
            hosts = list(self.topo.hosts)
            hc = np.full(max(hosts, default=-1) + 1, -1, dtype=np.int64)
            sigs: dict = {}
            directed = g.is_directed()
            if not directed and self._link_table is not None:
                self._hc, self._hc_sig = self._host_classes_from_links(hosts, hc)
                self._n_hc = max(len(self._hc_sig), 1)
                return self._hc
            for h in hosts:
                sig = []
                for s in sorted(set(g.neighbors(h))):
                    fwd = tuple(sorted((e["rate_bps"], e["delay_ps"]) for e in g.get_edge_data(h, s).values()))
                    back = tuple(sorted((e["rate_bps"], e["delay_ps"]) for e in (g.get_edge_data(s, h) or {}).values())) \
                        if directed else ()
                    sig.append((s, fwd, back))
                hc[h] = sigs.setdefault(tuple(sig), len(sigs))
            self._hc = hc
            self._n_hc = max(len(sigs), 1)
            self._hc_sig = list(sigs)           # host class -> its (switch, links out, links in)
        return self._hc

    def _host_classes_from_links(self, hosts: list, hc: np.ndarray) -> tuple[np.ndarray, list]:
        """:meth:`host_classes` from the run's :class:`~fabricsim.flows.links.LinkTable` (an
        undirected topology): each host's links sorted by (switch, rate, delay) are its signature,
        compared as bytes; classes numbered in host order, as the graph walk numbers them."""
        L = self._link_table()
        is_host = np.zeros(max(int(L.src.max(initial=-1)), len(hc) - 1) + 1, dtype=bool)
        is_host[hosts] = True
        out = np.flatnonzero(is_host[L.src])
        out = out[np.lexsort((L.delay_ps[out], L.rate_bps[out], L.dst[out], L.src[out]))]
        rows = np.column_stack([L.dst[out], L.rate_bps[out], L.delay_ps[out]]).astype(np.int64)
        src = L.src[out]
        lo = np.searchsorted(src, hosts, side="left").tolist()
        hi = np.searchsorted(src, hosts, side="right").tolist()
        ids: dict = {}
        sigs: list = []
        for h, a, b in zip(hosts, lo, hi):
            key = rows[a:b].tobytes()
            c = ids.get(key)
            if c is None:
                c = ids[key] = len(sigs)
                sig: dict = {}
                for s_, rate, delay in rows[a:b].tolist():
                    sig.setdefault(s_, []).append((rate, delay))
                sigs.append(tuple((s_, tuple(v), ()) for s_, v in sig.items()))
            hc[h] = c
        return hc, sigs

    def _facing(self, h: int, other: int) -> tuple:
        """The part of ``h``'s class signature (:meth:`host_classes`) in the switch-graph
        components of ``other``'s attachments: the switches by which ``h`` reaches ``other`` or
        is reached from it, with their links (paths never leave a component)."""
        comp = self.paths.component
        reach = {comp(s) for s in self.paths.attachments(other)}
        return tuple(x for x in self._hc_sig[int(self._hc[h])] if comp(x[0]) in reach)

    def _pair_id(self, fine: int, src: int, dst: int) -> int:
        """The pair class of ``src -> dst`` whose classes make the key ``fine``: pairs whose ends
        face each other alike (:meth:`_facing`, both ways) share it."""
        cid = self._pc.get(fine)
        if cid is None:
            coarse = (self._facing(src, dst), self._facing(dst, src))
            cid = self._pc_coarse.get(coarse)
            if cid is None:
                cid = self._pc_coarse[coarse] = len(self._pc_rep)
                self._pc_rep.append((int(src), int(dst)))
            self._pc[fine] = cid
        return cid

    def pair_class(self, src: int, dst: int) -> int:
        """The pair class of ``src -> dst``: pairs share one when each end faces the other with
        the same switches and links (:meth:`_facing`: its class signature in the components of
        the other end's attachments). Every figure of a pair depends on it only through that:
        the first hops are the source's switches there (by NVLink preference and distance, both
        read in those components), everything between stays in them, and the last hop is the
        destination's links there. So GPUs of different racks on the same rails share a class
        for traffic between racks (a pair within a rack still names the rack's NVLink chips)."""
        hc = self.host_classes()
        return self._pair_id(int(hc[src]) * self._n_hc + int(hc[dst]), int(src), int(dst))

    def pair_classes(self, src, dst) -> np.ndarray:
        """:meth:`pair_class` of each ``src[i] -> dst[i]`` (numpy arrays)."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        if not len(src):
            return np.zeros(0, dtype=np.int64)
        hc = self.host_classes()
        key = hc[src] * self._n_hc + hc[dst]
        uk, first, inv = np.unique(key, return_index=True, return_inverse=True)
        ids = np.empty(len(uk), dtype=np.int64)
        for j, (k, f) in enumerate(zip(uk.tolist(), first.tolist())):
            ids[j] = self._pair_id(k, int(src[f]), int(dst[f]))
        return ids[inv.ravel()]

    def representative(self, cid: int) -> tuple[int, int]:
        """A (src, dst) pair of the pair class ``cid``."""
        return self._pc_rep[cid]

    def relays(self, src, dst) -> np.ndarray:
        """:meth:`relay` of each ``src[i] -> dst[i]``, -1 for none (all -1 without ``nic.pxn``);
        the relay depends on ``dst`` only through its attachment set."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        if not self.pxn or not len(src):
            return np.full(len(src), -1, dtype=np.int64)
        hosts = list(self.topo.hosts)
        ag = np.full(max(hosts) + 1, -1, dtype=np.int64)
        for h in hosts:
            ag[h] = self._ag.setdefault(self.paths.attachments(h), len(self._ag))
        key = src * (len(self._ag) + 1) + ag[dst]
        uk, first, inv = np.unique(key, return_index=True, return_inverse=True)
        out = np.empty(len(uk), dtype=np.int64)
        for j, f in enumerate(first.tolist()):
            a, b = int(src[f]), int(dst[f])
            mk = (a, int(ag[b]))
            r = self._relay_memo.get(mk)
            if r is None:
                r = self.paths.pxn_relay(a, b)
                r = self._relay_memo[mk] = -1 if r is None else r
            out[j] = r
        return out[inv.ravel()]

    def train(self, src: int, dst: int, size: int, qps: int) -> int:
        """:meth:`_train` memoised per (pair class, size, qps)."""
        key = (self.pair_class(src, dst), size, qps)
        v = self._train_memo.get(key)
        if v is None:
            a, b = self._pc_rep[key[0]]
            v = self._train_memo[key] = self._train(a, b, size, qps)
        return v

    def trains(self, src, dst, size, qps) -> np.ndarray:
        """:meth:`train` of each row of the arrays (one Python evaluation per distinct
        (pair class, size, qps))."""
        cid = self.pair_classes(src, dst)
        fc = self._fct_classes(np.unique(cid, return_inverse=True)[0])
        return self.per_key(lambda c, sz, q: self._train(*self._fc_rep[c], sz, q), self._fc_memo,
                            fc[cid], size, qps)

    def _fct_classes(self, cids) -> np.ndarray:
        """Pair class -> class of equal :meth:`_train` inputs (framing, ports, hops): pair classes
        whose trains are the same function of (size, qps) share one, and one memo."""
        if not hasattr(self, "_fc_of"):
            self._fc_of: dict = {}      # pair class -> fct class
            self._fc_ids: dict = {}     # (framing, ports, hops) -> fct class
            self._fc_rep: list = []     # fct class -> representative (src, dst)
            self._fc_memo: dict = {}
        for c in np.asarray(cids).tolist():
            if c not in self._fc_of:
                a, b = self._pc_rep[c]
                key = (self.framing(a, b), self.ports(a, b)[1], tuple(self.hops(a, b)))
                f = self._fc_ids.get(key)
                if f is None:
                    f = self._fc_ids[key] = len(self._fc_rep)
                    self._fc_rep.append((a, b))
                self._fc_of[c] = f
        out = np.full(len(self._pc_rep), -1, dtype=np.int64)
        for c, f in self._fc_of.items():
            out[c] = f
        return out

    @staticmethod
    def per_key(fn, memo, *cols) -> np.ndarray:
        """``fn(*key)`` of every row of the int64 columns ``cols``, evaluated once per distinct key
        (and remembered in ``memo``, a dict keyed by the tuple of Python ints)."""
        n = len(cols[0])
        if not n:
            return np.zeros(0, dtype=np.int64)
        codes = []
        uniques = []
        for c in cols:
            c = np.broadcast_to(np.asarray(c, dtype=np.int64), (n,))
            u, inv = np.unique(c, return_inverse=True)
            uniques.append(u)
            codes.append(inv.ravel())
        key = codes[0]
        for u, code in zip(uniques[1:], codes[1:]):
            key = key * len(u) + code
        uk, first, inv = np.unique(key, return_index=True, return_inverse=True)
        vals = np.empty(len(uk), dtype=np.int64)
        for j, f in enumerate(first.tolist()):
            k = tuple(int(u[code[f]]) for u, code in zip(uniques, codes))
            v = memo.get(k)
            if v is None:
                v = memo[k] = fn(*k)
            vals[j] = v
        return vals[inv.ravel()]

    def fct_columns(self, src, dst, size, qps) -> np.ndarray:
        """:meth:`fct` of the messages given as columns (numpy arrays), identical to it message by
        message."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        n = len(src)
        size = np.broadcast_to(np.asarray(size, dtype=np.int64), (n,))
        qps = np.broadcast_to(np.asarray(qps, dtype=np.int64), (n,))
        relay = self.relays(src, dst)
        direct = relay < 0
        out = np.empty(n, dtype=np.int64)
        if direct.all():
            return self.trains(src, dst, size, qps)
        d = np.flatnonzero(direct)
        out[d] = self.trains(src[d], dst[d], size[d], qps[d])
        r = np.flatnonzero(~direct)
        out[r] = np.maximum(self.trains(src[r], relay[r], size[r], 1),
                            self.trains(relay[r], dst[r], size[r], qps[r]))
        return out

    def fct_rows(self, table, rows=None) -> np.ndarray:
        """:meth:`fct` of the rows ``rows`` (all if None) of a
        :class:`~fabricsim.flows.MessageTable`, as an int64 array."""
        if rows is None:
            cached = getattr(self, "_fct_all", None)
            if cached is None or cached[0] is not table or len(cached[1]) != len(table):
                cached = self._fct_all = (table, self.fct_columns(table.src, table.dst, table.size_bytes, table.qps))
            return cached[1].copy()
        rows = np.asarray(rows, dtype=np.int64)
        return self.fct_columns(table.src[rows], table.dst[rows], table.size_bytes[rows], table.qps[rows])

    def min_window(self, src, dst) -> int:
        """The longest :meth:`base_rtt` over the pairs ``src[i] -> dst[i]`` (numpy arrays, not
        empty): one evaluation per pair class (the way back is of the reverse class)."""
        best = None
        for c in np.unique(self.pair_classes(src, dst), return_inverse=True)[0].tolist():
            v = self.base_rtt(*self._pc_rep[c])
            best = v if best is None else max(best, v)
        return best

    def _train(self, src: int, dst: int, size: int, qps: int) -> int:
        full, full_wire, partial = self.packets(src, dst, size, qps)
        k = self.split.parallel(qps, self.ports(src, dst)[1])
        if k > 1:
            full = -(-full // k)
            partial = sorted(partial, reverse=True)[:-(-len(partial) // k)]
        return train_time(self.hops(src, dst), full, full_wire, partial)
