"""The topology model shared by every engine: a networkx multigraph with typed nodes and links.

Nodes: integer ids. Hosts (GPU endpoints) are ``0..H-1`` so a GPU id is a node id; switches
follow. Node attributes: ``type`` ("host" | "switch"), ``tier`` (0 for hosts, 1 leaf, 2 spine,
...), ``name``, and for switches ``switch_latency_ps``, ``buffer_bytes`` (None = unbounded) and
``buffer_mode`` ("per_port" | "shared"). Each edge is one bidirectional link with ``rate_bps``,
``delay_ps`` and ``kind`` (e.g. "host-leaf"). A host may have several links (NIC ports).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

TIER_NAMES = {0: "host", 1: "leaf", 2: "spine", 3: "superspine"}


def tier_name(tier: int) -> str:
    return TIER_NAMES.get(tier, f"tier{tier}")


@dataclass
class Topology:
    """A built fabric. ``graph`` is a :class:`networkx.MultiGraph`; see the module doc."""

    graph: nx.MultiGraph
    name: str = "topology"
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        g = self.graph
        self.hosts = sorted(n for n, d in g.nodes(data=True) if d["type"] == "host")
        if self.hosts != list(range(len(self.hosts))):
            raise ValueError("host node ids must be 0..H-1")
        self.switches = sorted(n for n, d in g.nodes(data=True) if d["type"] == "switch")

    @property
    def num_hosts(self) -> int:
        return len(self.hosts)

    def name_of(self, node: int) -> str:
        return self.graph.nodes[node]["name"]

    def tier_of(self, node: int) -> int:
        return self.graph.nodes[node]["tier"]

    def edge_switch(self, host: int) -> int:
        """The switch a host's first NIC port attaches to (its leaf)."""
        for nbr in sorted(self.graph.neighbors(host)):
            return nbr
        raise ValueError(f"host {host} has no link")

    def host_rate_bps(self, host: int) -> int:
        """Total NIC line rate of a host (sum over its ports)."""
        return sum(d["rate_bps"] for _, _, d in self.graph.edges(host, data=True))

    def links(self):
        """Yield ``(u, v, key, attrs)`` for every bidirectional link, in a stable order."""
        for u, v, k, d in sorted(self.graph.edges(keys=True, data=True), key=lambda e: (min(e[0], e[1]),
                                                                                          max(e[0], e[1]), e[2])):
            a, b = (u, v) if u < v else (v, u)
            yield a, b, k, d

    def tier_counts(self) -> dict[str, int]:
        """Nodes per tier name; NVLink switches (``domain="nvlink"``) count as ``nvswitch``."""
        counts: dict[str, int] = {}
        for _, d in self.graph.nodes(data=True):
            key = "nvswitch" if d.get("domain") == "nvlink" else tier_name(d["tier"])
            counts[key] = counts.get(key, 0) + 1
        order = {"host": 0, "nvswitch": 1, "leaf": 2, "spine": 3, "superspine": 4}
        return dict(sorted(counts.items(), key=lambda kv: order.get(kv[0], 9)))

    def link_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _, _, _, d in self.links():
            counts[d["kind"]] = counts.get(d["kind"], 0) + 1
        return counts

    def bisection_bps(self) -> int:
        """Capacity of the cut between the first and second half of the hosts (grouped by leaf).

        Builders that know their structure (``kind: cluster``, ``nvl72_rack``, ``hgx_node``) store
        it in ``meta["bisection_bps"]`` (computed analytically per plane; a max-flow at 8k GPUs
        would take minutes), and that value is returned. Otherwise it is computed exactly as a
        max-flow (one direction) for that split. For a leaf-spine this split is the worst
        balanced cut, so it is the bisection bandwidth; for other graphs it is an upper bound on
        the true bisection.
        """
        if "bisection_bps" in self.meta:
            return self.meta["bisection_bps"]
        if self.num_hosts < 2:
            return 0
        order = sorted(self.hosts, key=lambda h: (self.edge_switch(h), h))
        half = len(order) // 2
        return maxflow_cut(self.graph, None, order[:half], order[half:])

    def describe(self) -> dict:
        """Counts, tiers and capacities, as printed by ``fabricsim topo show``."""
        g = self.graph
        rates = sorted({d["rate_bps"] for *_, d in g.edges(keys=True, data=True)})
        kinds: dict[str, int] = {}
        for *_, kind in g.edges(keys=True, data="kind"):
            kinds[kind] = kinds.get(kind, 0) + 1
        return {
            "name": self.name,
            "nodes": g.number_of_nodes(),
            "links": g.number_of_edges(),
            "nodes_per_tier": self.tier_counts(),
            "links_per_kind": dict(sorted(kinds.items(), key=lambda kv: _KIND_ORDER.get(kv[0], 99))),
            "hosts": self.num_hosts,
            "switches": len(self.switches),
            "link_rates_bps": rates,
            "bisection_bps": self.bisection_bps(),
            **self.meta,
        }


_KIND_ORDER = {"nvlink": 0, "host-leaf": 1, "leaf-spine": 2, "spine-superspine": 3}


def maxflow_cut(graph: nx.MultiGraph, nodes, a, b) -> int:
    """Max-flow (one direction) from hosts ``a`` to hosts ``b`` over the subgraph on ``nodes``
    (all nodes if None); each host can send or receive at most its line rate in that subgraph.
    Parallel links add up; hosts do not forward."""
    sub = graph if nodes is None else graph.subgraph(nodes)
    hosts = set(a) | set(b)
    dg = nx.DiGraph()
    rate: dict = {}
    for u, v, d in sub.edges(data=True):
        cap = d["rate_bps"]
        for x, y in ((u, v), (v, u)):
            if x in hosts:
                rate[x] = rate.get(x, 0) + cap
            if y in hosts and x in hosts:
                continue
            if dg.has_edge(x, y):
                dg[x][y]["capacity"] += cap
            else:
                dg.add_edge(x, y, capacity=cap)
    # hosts only source or sink: drop switch -> source-host and sink-host -> switch arcs
    for h in a:
        for x in list(dg.predecessors(h)) if h in dg else []:
            dg.remove_edge(x, h)
    for h in b:
        for y in list(dg.successors(h)) if h in dg else []:
            dg.remove_edge(h, y)
    for h in a:
        if rate.get(h):
            dg.add_edge("SRC", h, capacity=rate[h])
    for h in b:
        if rate.get(h):
            dg.add_edge(h, "DST", capacity=rate[h])
    if "SRC" not in dg or "DST" not in dg:
        return 0
    value, _ = nx.maximum_flow(dg, "SRC", "DST")
    return int(value)
