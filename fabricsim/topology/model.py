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
        counts: dict[str, int] = {}
        for _, d in self.graph.nodes(data=True):
            counts[tier_name(d["tier"])] = counts.get(tier_name(d["tier"]), 0) + 1
        return counts

    def link_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for _, _, _, d in self.links():
            counts[d["kind"]] = counts.get(d["kind"], 0) + 1
        return counts

    def bisection_bps(self) -> int:
        """Capacity of the cut between the first and second half of the hosts (grouped by leaf).

        Computed exactly as a max-flow (one direction) for that split. For a leaf-spine
        this split is the worst balanced cut, so it is the bisection bandwidth; for other
        graphs it is an upper bound on the true bisection.
        """
        if self.num_hosts < 2:
            return 0
        order = sorted(self.hosts, key=lambda h: (self.edge_switch(h), h))
        half = len(order) // 2
        a, b = order[:half], order[half:]
        dg = nx.DiGraph()
        for u, v, _, d in self.links():
            for x, y in ((u, v), (v, u)):
                cap = d["rate_bps"]
                if dg.has_edge(x, y):
                    dg[x][y]["capacity"] += cap
                else:
                    dg.add_edge(x, y, capacity=cap)
        for h in a:
            dg.add_edge("SRC", h, capacity=self.host_rate_bps(h))
        for h in b:
            dg.add_edge(h, "DST", capacity=self.host_rate_bps(h))
        value, _ = nx.maximum_flow(dg, "SRC", "DST")
        return int(value)

    def describe(self) -> dict:
        """Counts, tiers and capacities, as printed by ``fabricsim topo show``."""
        rates = sorted({d["rate_bps"] for *_, d in self.links()})
        return {
            "name": self.name,
            "nodes": self.graph.number_of_nodes(),
            "links": self.graph.number_of_edges(),
            "nodes_per_tier": self.tier_counts(),
            "links_per_kind": self.link_counts(),
            "hosts": self.num_hosts,
            "switches": len(self.switches),
            "link_rates_bps": rates,
            "bisection_bps": self.bisection_bps(),
            **self.meta,
        }
