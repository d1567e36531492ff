"""Draw a small topology as a layered picture (``fabricsim topo show FILE --draw out.png``).

Rows from the bottom: NVLink switches, GPUs, leaves, spines, super-spines. Scale-out switches
and their links are coloured by plane; NVLink links are grey. Meant for small instances
(``topologies/cluster_small_draw.yaml``); larger graphs are refused.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import TopologyError
from .model import Topology

MAX_NODES = 600


def draw_topology(topo: Topology, path: str | Path, source: str = "--draw") -> Path:
    """Write a PNG of ``topo`` to ``path``; raises TopologyError when it is too large to draw."""
    g = topo.graph
    if g.number_of_nodes() > MAX_NODES:
        raise TopologyError(f"{g.number_of_nodes()} nodes are too many to draw (allowed: at most {MAX_NODES}; "
                            f"try topologies/cluster_small_draw.yaml)", source=source, field="--draw")
    # a Figure outside pyplot: rendered by Agg on savefig, no backend selected or changed
    import matplotlib
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure

    def row(n):
        d = g.nodes[n]
        if d["type"] == "host":
            return 1
        if d.get("domain") == "nvlink":
            return 0
        return 1 + d["tier"]

    rows: dict[int, list[int]] = {}
    for n in sorted(g.nodes, key=lambda n: (g.nodes[n].get("plane", -1), n)):
        rows.setdefault(row(n), []).append(n)
    pos = {}
    for y, members in rows.items():
        w = len(members)
        for i, n in enumerate(members):
            pos[n] = ((i + 0.5) / w, y)
    cmap = matplotlib.colormaps["tab10"]
    fig = Figure(figsize=(12, 2 + 1.4 * len(rows)))
    ax = fig.add_subplot()
    by_colour: dict = {}
    for u, v, d in g.edges(data=True):
        colour = (0.6, 0.6, 0.6, 0.35) if d.get("kind") == "nvlink" else cmap(d.get("plane", 0) % 10)
        by_colour.setdefault(colour, []).append((pos[u], pos[v]))
    for colour, segs in by_colour.items():
        ax.add_collection(LineCollection(segs, colors=[colour], linewidths=0.6, alpha=0.5))
    for y, members in rows.items():
        xs = [pos[n][0] for n in members]
        cs = [("black" if g.nodes[n]["type"] == "host" else
               (0.45, 0.45, 0.45) if g.nodes[n].get("domain") == "nvlink" else cmap(g.nodes[n].get("plane", 0) % 10))
              for n in members]
        ax.scatter(xs, [y] * len(xs), s=30 if y != 1 else 12, c=cs, zorder=3,
                   marker="s" if y != 1 else "o")
    labels = {0: "NVLink switches", 1: "GPUs", 2: "leaves", 3: "spines", 4: "super-spines"}
    ax.set_yticks(sorted(rows))
    ax.set_yticklabels([labels.get(y, f"tier {y - 1}") for y in sorted(rows)])
    ax.set_xticks([])
    ax.set_xlim(0, 1)
    ax.set_ylim(min(rows) - 0.5, max(rows) + 0.5)
    d = topo.meta
    planes = d.get("planes")
    ax.set_title(f"{topo.name}: {topo.num_hosts} GPUs" + (f", {planes} planes (colours)" if planes else ""))
    for s in ("top", "right", "bottom"):
        ax.spines[s].set_visible(False)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    return out
