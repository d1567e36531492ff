"""Equal-cost next hops on a topology: the routing semantics every engine shares.

A packet for host ``d`` at switch ``s`` may leave by any link to a neighbour that is one hop
closer to ``d``; switches never forward through a host. Distances are computed lazily by a
multi-source BFS from a destination's attachment switches and cached per set (next hops use the
part of the set in the switch's component, :meth:`EqualCostPaths.attachments_near`), so hosts
under the same leaf share one BFS.
"""
from __future__ import annotations

from collections import deque

from .model import Topology


class EqualCostPaths:
    """``next_hops(switch, dst_host)`` -> sorted neighbour ids one hop closer to ``dst_host``."""

    def __init__(self, topo: Topology):
        self.topo = topo
        g = topo.graph
        self._nvlink = {n for n in topo.switches if g.nodes[n].get("domain") == "nvlink"}
        self._host_nbrs = {h: sorted(set(g.neighbors(h))) for h in topo.hosts}
        # hosts with the same neighbours (the GPUs of a rack on one rail) share first hops
        classes: dict[tuple, int] = {}
        self._nbr_class = {h: classes.setdefault(tuple(n), len(classes)) for h, n in self._host_nbrs.items()}
        self._first_hops: dict[tuple[int, frozenset], list[int]] = {}
        self._next_hops: dict[tuple[int, frozenset], list[int]] = {}
        self._switch_nbrs = {n: sorted({m for m in g.neighbors(n) if g.nodes[m]["type"] == "switch"})
                             for n in topo.switches}
        self._attach = {h: frozenset(g.neighbors(h)) for h in topo.hosts}
        self._dist: dict[frozenset, dict[int, int]] = {}
        # the switch graph's connected components (an Ethernet plane; an NVLink switch chip, as
        # chips link to GPUs only): paths never leave one, as switches never forward through a host
        self._comp: dict[int, int] = {}
        c = -1
        for s in sorted(topo.switches):
            if s not in self._comp:
                c += 1
                self._comp[s] = c
                q = deque([s])
                while q:
                    x = q.popleft()
                    for y in self._switch_nbrs[x]:
                        if y not in self._comp:
                            self._comp[y] = c
                            q.append(y)
        self._near: dict[tuple[int, frozenset], frozenset] = {}

    def neighbour_classes(self) -> list[int]:
        """Per host (by id, 0 .. hosts - 1), the number of its neighbour class: hosts with the
        same neighbours have the same :meth:`first_hops` to any destination."""
        return [self._nbr_class[h] for h in sorted(self._nbr_class)]

    def attachments(self, host: int) -> frozenset:
        return self._attach[host]

    def component(self, switch: int) -> int:
        """The number of ``switch``'s component in the switch graph (its Ethernet plane, or the
        connected part of it failures leave; an NVLink switch chip is one of its own); ``-1`` for
        a host."""
        return self._comp.get(switch, -1)

    def attachments_near(self, node: int, dst: int) -> frozenset:
        """The attachment switches of ``dst`` in the switch-graph component of switch ``node``
        (its Ethernet plane, or the connected part of it failures leave; an NVLink switch chip is
        a component of its own, linked to GPUs only), the only ones its paths to ``dst`` can reach;
        all of them for a host. What lies between ``node`` and ``dst`` (:meth:`next_hops` from
        ``node`` and beyond, their distances) depends on ``dst`` only through them, so callers
        may key it by them: GPUs of different racks on one rail share them in every plane.

        >>> from fabricsim.topology import load_topology_file
        >>> from fabricsim.topology.catalog import preset_path
        >>> paths = EqualCostPaths(load_topology_file(preset_path("gb300_2048_4x200g")))
        >>> names = lambda nodes: sorted(paths.topo.graph.nodes[s]["name"] for s in nodes)
        >>> len(paths.attachments(0))                # 18 NVLink switches of its rack, 4 leaves
        22
        >>> leaf = min(s for s in paths.attachments(0) if names([s]) == ["p0.leaf0"])
        >>> names(paths.attachments_near(leaf, 0)), paths.attachments(0) == paths.attachments(72)
        (['p0.leaf0'], False)
        >>> paths.attachments_near(leaf, 0) == paths.attachments_near(leaf, 72)    # GPU 0 of rack 1
        True
        """
        attach = self._attach[dst]
        c = self._comp.get(node)
        if c is None:
            return attach
        key = (c, attach)
        got = self._near.get(key)
        if got is None:
            got = self._near[key] = frozenset(s for s in attach if self._comp[s] == c)
        return got

    def attachments_reachable(self, switches, dst: int) -> frozenset:
        """:meth:`attachments_near` of ``dst`` over several switches (their union): the
        attachments paths from any of them can end at (a walk from a host's first hops)."""
        got = [self.attachments_near(s, dst) for s in switches]
        return got[0].union(*got[1:]) if got else frozenset()

    def _distances(self, leaves: frozenset) -> dict[int, int]:
        d = self._dist.get(leaves)
        if d is None:
            d = {s: 0 for s in leaves}
            q = deque(sorted(leaves))
            nbrs = self._switch_nbrs
            while q:
                x = q.popleft()
                for y in nbrs[x]:
                    if y not in d:
                        d[y] = d[x] + 1
                        q.append(y)
            self._dist[leaves] = d
        return d

    def next_hops(self, switch: int, dst: int) -> list[int]:
        leaves = self._attach[dst]
        if switch in leaves:
            return [dst]
        # the answer depends on dst only through its attachment switches in the switch's
        # component (:meth:`attachments_near`): kept per (switch, those) (a spine of a large
        # cluster has hundreds of neighbours to scan; callers only read it)
        key = (switch, self.attachments_near(switch, dst))
        hops = self._next_hops.get(key)
        if hops is None:
            d = self._distances(key[1])       # (the component's part: the same distances there)
            here = d.get(switch)
            hops = [] if here is None else [n for n in self._switch_nbrs[switch] if d.get(n, -1) == here - 1]
            self._next_hops[key] = hops
        return hops

    def first_hops(self, src: int, dst: int) -> list[int]:
        """The switches a host may hand a packet for ``dst`` to: among its neighbours that can
        reach ``dst``, those of the scale-up (NVLink) domain if any can, else the closest ones.
        A GPU reaches a GPU of its own NVLink domain over NVLink, never through its NIC. The answer
        depends on ``dst`` only through :meth:`attachments` (the distances are to those switches),
        so callers may share it between destinations with the same attachments."""
        key = (self._nbr_class[src], self._attach[dst])     # (kept per neighbours and attachments)
        hops = self._first_hops.get(key)
        if hops is None:
            d = self._distances(self._attach[dst])
            ranked = [((0 if s in self._nvlink else 1), d[s], s) for s in self._host_nbrs[src] if s in d]
            if not ranked:
                hops = []
            else:
                best = min(r[:2] for r in ranked)
                hops = [s for pref, dist, s in ranked if (pref, dist) == best]
            self._first_hops[key] = hops
        return hops

    def _nic_distance(self, host: int, d: dict) -> int | None:
        """Hops from ``host``'s NIC-facing switches to a destination (``d`` = its distance map)."""
        best = None
        for s in self._host_nbrs[host]:
            if s not in self._nvlink and s in d and (best is None or d[s] < best):
                best = d[s]
        return best

    def pxn_relay(self, src: int, dst: int) -> int | None:
        """PXN-style relay: the GPU of ``src``'s NVLink domain whose NIC is closest to ``dst``
        (ideally on the destination's rail, under the same leaf), if it is closer than
        ``src``'s own NIC; else None. Only for destinations outside the NVLink domain.
        Ties go to the same tray, then the lowest id."""
        key = ("pxn", src, dst)
        if key in self._first_hops:
            return self._first_hops[key]
        relay = None
        first = self.first_hops(src, dst)
        if first and not (set(first) & self._nvlink):
            d = self._distances(self._attach[dst])
            own = self._nic_distance(src, d)
            g = self.topo.graph
            tray = g.nodes[src].get("tray")
            peers = sorted({h for s in self._host_nbrs[src] if s in self._nvlink for h in g.neighbors(s)} - {src})
            ranked = []
            for h in peers:
                dist = self._nic_distance(h, d)
                if dist is not None:
                    ranked.append((dist, g.nodes[h].get("tray") != tray, h))
            if ranked and own is not None and min(ranked)[0] < own:
                relay = min(ranked)[2]
        self._first_hops[key] = relay
        return relay

    def one_path(self, src: int, dst: int) -> list[int]:
        """One shortest host-to-host node path (first choice at every hop)."""
        path = [src]
        first = self.first_hops(src, dst)
        if not first:
            raise ValueError(f"no route from {src} to {dst}")
        path.append(first[0])
        while path[-1] != dst:
            nh = self.next_hops(path[-1], dst)
            if not nh:
                raise ValueError(f"no route from {src} to {dst}")
            path.append(nh[0])
        return path
