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
        src, dst, rate, delay, kind, key = [], [], [], [], [], []
        for u, v, k, d in topo.links():
            for a, b in ((u, v), (v, u)):
                src.append(a)
                dst.append(b)
                rate.append(d["rate_bps"])
                delay.append(d["delay_ps"])
                kind.append(d["kind"])
                key.append(k)
        self.topology = topo
        self.src = np.asarray(src, dtype=np.int64)
        self.dst = np.asarray(dst, dtype=np.int64)
        self.rate_bps = np.asarray(rate, dtype=np.int64)
        self.delay_ps = np.asarray(delay, dtype=np.int64)
        self.kind = np.asarray(kind, dtype=object)
        lat = {n: (d.get("switch_latency_ps", 0) if d["type"] == "switch" else 0) for n, d in g.nodes(data=True)}
        self.peer_latency_ps = np.fromiter((lat[b] for b in dst), dtype=np.int64, count=len(dst))
        # (a, b) -> link ids in link order (parallel links)
        self._between: dict[tuple[int, int], list[int]] = {}
        for i, (a, b) in enumerate(zip(src, dst)):
            self._between.setdefault((a, b), []).append(i)
        self._between_np = {}

    def __len__(self) -> int:
        return len(self.src)

    def between(self, a: int, b: int) -> np.ndarray:
        """Ids of the links from node ``a`` to node ``b`` (parallel links in link order; empty if none)."""
        key = (a, b)
        out = self._between_np.get(key)
        if out is None:
            out = self._between_np[key] = np.asarray(self._between.get(key, ()), dtype=np.int64)
        return out

    def ports_towards(self, node: int, next_nodes) -> np.ndarray:
        """The equal-cost egress links of ``node`` towards ``next_nodes`` (neighbour ids, sorted),
        in the order a switch lists its candidate ports: by neighbour id, parallel links in link
        order (the order :func:`~fabricsim.routing.ecmp.ecmp_index` indexes)."""
        parts = [self.between(node, b) for b in next_nodes]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
