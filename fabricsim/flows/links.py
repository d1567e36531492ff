"""The directed-link table: every egress port of a topology, numbered once for every engine.

Link ``2 i`` is the ``i``-th link of :meth:`Topology.links` from its lower to its higher node id
and ``2 i + 1`` the other direction, the order in which the packet engine creates its ports, so
``link_id`` in a results table names the same wire whichever engine produced it.

>>> from fabricsim.topology import build_topology
>>> from fabricsim.config.topology import LeafSpineConfig
>>> t = LinkTable(build_topology(LeafSpineConfig(hosts_per_leaf=2, leaves=2, spines=1)))
>>> len(t), t.between(0, 4).tolist(), t.between(4, 0).tolist()     # host 0 <-> leaf 4
(12, [0], [1])
>>> int(t.rate_bps[0]), t.kind[0]
(400000000000, 'host-leaf')
"""
from __future__ import annotations

import numpy as np


class LinkTable:
    """Directed links of a topology as columns (see the module doc).

    Attributes
    ----------
    src, dst : numpy.ndarray
        Node ids at the link's two ends (int64).
    rate_bps, delay_ps : numpy.ndarray
        Line rate and propagation delay (int64).
    peer_latency_ps : numpy.ndarray
        Forwarding latency of the node the link enters (its switch latency; 0 at a host).
    kind : numpy.ndarray
        The link's kind (object array of str, e.g. ``host-leaf``, ``leaf-spine``, ``nvlink``).
    """

    def __init__(self, topo):
        g = topo.graph
        n = g.number_of_edges()
        u = np.empty(n, dtype=np.int64)
        v = np.empty(n, dtype=np.int64)
        k = np.empty(n, dtype=np.int64)
        rate = np.empty(n, dtype=np.int64)
        delay = np.empty(n, dtype=np.int64)
        kinds = np.empty(n, dtype=object)
        # one pass over networkx's edges; the order of Topology.links() ((low, high, key)
        # ascending) by one lexsort instead of a Python sort of the edge tuples
        for i, (a, b, key, d) in enumerate(g.edges(keys=True, data=True)):
            u[i], v[i], k[i] = a, b, key
            rate[i], delay[i], kinds[i] = d["rate_bps"], d["delay_ps"], d["kind"]
        lo, hi = np.minimum(u, v), np.maximum(u, v)
        order = np.lexsort((k, hi, lo))
        lo, hi = lo[order], hi[order]
        self.topology = topo
        self.src = np.empty(2 * n, dtype=np.int64)     # link 2 i: low -> high, 2 i + 1: back
        self.dst = np.empty(2 * n, dtype=np.int64)
        self.src[0::2], self.src[1::2] = lo, hi
        self.dst[0::2], self.dst[1::2] = hi, lo
        self.rate_bps = np.repeat(rate[order], 2)
        self.delay_ps = np.repeat(delay[order], 2)
        self.kind = np.repeat(kinds[order], 2)
        nodes = max(g.nodes, default=-1) + 1
        lat = np.zeros(nodes, dtype=np.int64)
        for node, d in g.nodes(data=True):
            if d["type"] == "switch":
                lat[node] = d.get("switch_latency_ps", 0)
        self.peer_latency_ps = lat[self.dst]
        # (a, b) -> link ids in link order (parallel links): the links sorted by (a, b), stably
        self._nodes = nodes
        pair = self.src * nodes + self.dst
        self._by_pair = np.argsort(pair, kind="stable")
        self._pairs = pair[self._by_pair]
        self._between_np: dict[tuple[int, int], np.ndarray] = {}
        self._towards: dict[tuple, np.ndarray] = {}   # (node, next nodes) -> ports_towards

    def __len__(self) -> int:
        return len(self.src)

    def between(self, a: int, b: int) -> np.ndarray:
        """Ids of the links from node ``a`` to node ``b`` (parallel links in link order; empty if none)."""
        key = (a, b)
        out = self._between_np.get(key)
        if out is None:
            if 0 <= a < self._nodes and 0 <= b < self._nodes:
                p = a * self._nodes + b
                lo = int(np.searchsorted(self._pairs, p, side="left"))
                hi = int(np.searchsorted(self._pairs, p, side="right"))
                out = self._by_pair[lo:hi].copy()
            else:
                out = np.zeros(0, dtype=np.int64)
            self._between_np[key] = out
        return out

    def ports_towards(self, node: int, next_nodes) -> np.ndarray:
        """The equal-cost egress links of ``node`` towards ``next_nodes`` (neighbour ids, sorted),
        in the order a switch lists its candidate ports: by neighbour id, parallel links in link
        order (the order :func:`~fabricsim.routing.ecmp.ecmp_index` indexes)."""
        key = (node, tuple(next_nodes))
        out = self._towards.get(key)
        if out is None:
            if len(key[1]) <= 8:              # (few: pair by pair, each pair's links kept)
                parts = [self.between(node, b) for b in key[1]]
                out = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
            else:
                out = self.links_between(np.full(len(key[1]), node, dtype=np.int64),
                                         np.asarray(key[1], dtype=np.int64))[0]
            self._towards[key] = out
        return out

    def links_between(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`between` of many node pairs at once: ``(links, counts)``, the links of pair
        ``k`` (``counts[k]`` of them, parallel links in link order) after those of pair ``k - 1``.

        >>> from fabricsim.topology import build_topology
        >>> from fabricsim.config.topology import LeafSpineConfig
        >>> t = LinkTable(build_topology(LeafSpineConfig(hosts_per_leaf=2, leaves=2, spines=1)))
        >>> links, counts = t.links_between(np.array([4, 0, 1]), np.array([0, 4, 0]))
        >>> links.tolist(), counts.tolist()                # leaf 4 -> host 0, host 0 -> leaf 4, none
        ([1, 0], [1, 1, 0])
        """
        a = np.asarray(a, dtype=np.int64)
        b = np.asarray(b, dtype=np.int64)
        ok = (a >= 0) & (a < self._nodes) & (b >= 0) & (b < self._nodes)
        p = np.where(ok, a * self._nodes + b, -1)
        lo = np.searchsorted(self._pairs, p, side="left")
        hi = np.searchsorted(self._pairs, p, side="right")
        counts = np.where(ok, hi - lo, 0)
        if (counts == 1).all():
            return self._by_pair[lo], counts
        total = int(counts.sum())
        start = np.cumsum(counts) - counts
        idx = np.repeat(lo - start, counts) + np.arange(total)
        return self._by_pair[idx], counts
