"""Two-tier leaf-spine (folded Clos) builder."""
from __future__ import annotations

import networkx as nx

from ..config.topology import LeafSpineConfig
from .model import Topology


def build_leaf_spine(cfg: LeafSpineConfig, name: str = "leaf_spine") -> Topology:
    """Build a leaf-spine: host ``h`` attaches to leaf ``h // hosts_per_leaf``; every leaf has
    ``links_per_spine`` links to every spine.

    >>> t = build_leaf_spine(LeafSpineConfig(hosts_per_leaf=2, leaves=2, spines=2))
    >>> t.describe()["links_per_kind"]
    {'host-leaf': 4, 'leaf-spine': 4}
    """
    g = nx.MultiGraph()
    H = cfg.hosts_per_leaf * cfg.leaves
    buf = cfg.buffer.size_bytes
    for h in range(H):
        g.add_node(h, type="host", tier=0, name=f"h{h}")
    leaf0 = H
    spine0 = H + cfg.leaves
    for i in range(cfg.leaves):
        g.add_node(leaf0 + i, type="switch", tier=1, name=f"leaf{i}", switch_latency_ps=cfg.switch_latency,
                   buffer_bytes=buf, buffer_mode=cfg.buffer.mode)
    for j in range(cfg.spines):
        g.add_node(spine0 + j, type="switch", tier=2, name=f"spine{j}", switch_latency_ps=cfg.switch_latency,
                   buffer_bytes=buf, buffer_mode=cfg.buffer.mode)
    for h in range(H):
        g.add_edge(h, leaf0 + h // cfg.hosts_per_leaf, rate_bps=cfg.host_link.rate, delay_ps=cfg.host_link.delay,
                   kind="host-leaf")
    for i in range(cfg.leaves):
        for j in range(cfg.spines):
            for _ in range(cfg.links_per_spine):
                g.add_edge(leaf0 + i, spine0 + j, rate_bps=cfg.fabric_link.rate, delay_ps=cfg.fabric_link.delay,
                           kind="leaf-spine")
    meta = {"builder": "leaf_spine", "oversubscription": cfg.actual_oversubscription if cfg.spines else None}
    return Topology(g, name=name, meta=meta)
