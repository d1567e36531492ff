"""Topology from an explicit list of nodes and links."""
from __future__ import annotations

import difflib
from collections import deque

import networkx as nx

from ..config.topology import ExplicitTopologyConfig
from ..errors import TopologyError
from .model import Topology


def build_explicit(cfg: ExplicitTopologyConfig, source: str = "<topology>", prefix: str = "topology",
                   name: str = "explicit") -> Topology:
    """Hosts get ids 0..H-1 in the order listed, switches follow. Tiers missing from the file are
    the hop distance from the nearest host. Raises :class:`TopologyError` naming the item."""
    def at(sub: str) -> str:
        return f"{prefix}.{sub}" if prefix else sub

    index = {n.name: i for i, n in reversed(list(enumerate(cfg.nodes)))}
    ids: dict[str, int] = {}
    hosts = [n for n in cfg.nodes if n.type == "host"]
    switches = [n for n in cfg.nodes if n.type == "switch"]
    if not hosts:
        raise TopologyError("a topology needs at least one host", source=source, field=at("nodes"))
    for i, n in enumerate(cfg.nodes):
        if index[n.name] != i:
            raise TopologyError(f"duplicate node name {n.name!r} (first at nodes[{index[n.name]}])",
                                source=source, field=at(f"nodes[{i}].name"))
    for i, n in enumerate(hosts + switches):
        ids[n.name] = i
    g = nx.MultiGraph()
    for n in hosts:
        if n.tier not in (None, 0):
            raise TopologyError(f"host {n.name!r} must be tier 0, got {n.tier}", source=source,
                                field=at(f"nodes[{index[n.name]}].tier"))
        g.add_node(ids[n.name], type="host", tier=0, name=n.name)
    for n in switches:
        buf = n.buffer or cfg.buffer
        g.add_node(ids[n.name], type="switch", tier=n.tier, name=n.name,
                   switch_latency_ps=cfg.switch_latency if n.switch_latency is None else n.switch_latency,
                   buffer_bytes=buf.size_bytes, buffer_mode=buf.mode)
    for i, link in enumerate(cfg.links):
        for end in ("a", "b"):
            nm = getattr(link, end)
            if nm not in ids:
                close = difflib.get_close_matches(nm, list(ids), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                raise TopologyError(f"unknown node {nm!r} (allowed: a name listed in nodes){hint}", source=source,
                                    field=at(f"links[{i}].{end}"))
        if link.a == link.b:
            raise TopologyError("a link must join two different nodes", source=source, field=at(f"links[{i}]"))
        u, v = ids[link.a], ids[link.b]
        if g.nodes[u]["type"] == "host" and g.nodes[v]["type"] == "host":
            raise TopologyError("hosts connect to switches, not to each other", source=source,
                                field=at(f"links[{i}]"))
        for _ in range(link.count):
            g.add_edge(u, v, rate_bps=link.rate, delay_ps=link.delay, kind="")
    for n in hosts:
        if g.degree(ids[n.name]) == 0:
            raise TopologyError(f"host {n.name!r} has no link", source=source, field=at(f"nodes[{index[n.name]}]"))
    if not nx.is_connected(g):
        comps = sorted(nx.connected_components(g), key=len)
        lonely = sorted(g.nodes[x]["name"] for x in comps[0])[:3]
        raise TopologyError(f"the topology is disconnected; e.g. {', '.join(lonely)} cannot reach the rest",
                            source=source, field=at("links"))
    _check_switch_paths(g, [ids[n.name] for n in hosts], source, at("links"))
    # tiers by distance from the hosts where not given
    dist = {h: 0 for h in range(len(hosts))}
    q = deque(dist)
    while q:
        x = q.popleft()
        for y in g.neighbors(x):
            if y not in dist:
                dist[y] = dist[x] + 1
                q.append(y)
    for x, d in g.nodes(data=True):
        if d["tier"] is None:
            d["tier"] = dist[x]
    from .model import tier_name
    for u, v, k, d in g.edges(keys=True, data=True):
        a, b = sorted((g.nodes[u]["tier"], g.nodes[v]["tier"]))
        d["kind"] = f"{tier_name(a)}-{tier_name(b)}"
    return Topology(g, name=name, meta={"builder": "explicit"})


def _check_switch_paths(g: nx.MultiGraph, hosts: list[int], source: str, field: str) -> None:
    """Every two hosts must share a connected group of switches (joined by switch-to-switch
    links): switches never forward through a host (topology/paths.py), so hosts joined only
    through a third, multi-homed host cannot reach each other (the engines found no port)."""
    switch_only = g.subgraph(n for n, d in g.nodes(data=True) if d["type"] == "switch")
    group = {}
    for k, comp in enumerate(nx.connected_components(switch_only)):
        for n in comp:
            group[n] = k
    reach = {h: frozenset(group[s] for s in g.neighbors(h)) for h in hosts}
    first = {}
    for h in hosts:                         # one host per distinct set of switch groups
        first.setdefault(reach[h], h)
    sets = list(first)
    for i, a in enumerate(sets):
        for b in sets[i + 1:]:
            if a & b:
                continue
            ha, hb = first[a], first[b]
            via = next((h for h in hosts if reach[h] & a and reach[h] & b), None)
            name = lambda n: repr(g.nodes[n]["name"])  # noqa: E731
            through = f" only through host {name(via)}" if via is not None else ""
            raise TopologyError(
                f"hosts {name(ha)} and {name(hb)} are connected{through}, not by switch-to-switch links; hosts "
                f"do not forward (allowed: switches of every two hosts joined by switch links)",
                source=source, field=field)
