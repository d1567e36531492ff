"""How a queue pair's bytes spread over the links: the flow-level meaning of routing and plane split.

The flow engine (:mod:`fabricsim.engine.flow`) does not move packets; it needs, for every queue
pair, the share of its rate that crosses each directed link (:class:`~fabricsim.flows.links.LinkTable`).
That share is built from the same pieces the packet engine uses:

1. **First hop.** The source host's ports towards the destination
   (:meth:`EqualCostPaths.first_hops`, in the NIC order of the packet engine) and the plane-split
   policy's choice among them (``nic.plane_split``: ``per_packet`` keeps all of them, ``per_flow``
   the one its hash picks). A queue pair using several ports splits its rate over them in
   proportion to their line rates (a NIC port is work-conserving; the ports drain one queue).
2. **Switch to switch.** From each first-hop switch towards the switches the destination is
   attached to, the routing policy's flow-level meaning (``RoutingPolicy.fluid``):

   - ``per_flow`` (``ecmp``): at every switch the flow follows ``policy.weights()``, i.e. the
     port :func:`~fabricsim.routing.ecmp.ecmp_index` gives its 5-tuple hash with the run's salt:
     the packet engine's own path, so the same collisions appear;
   - ``uniform`` (``spray``): an even split over the equal-cost ports at every switch;
   - ``balanced`` (``adaptive``, ``flowlet``): a split in proportion to each equal-cost port's
     capacity towards the destination (its rate, or less if the links beyond it carry less):
     the fluid limit of per-packet load balancing on a fabric with no other traffic (docs/fidelity.md).
3. **Last hop.** From the destination's attachment switches to the destination host.

The usage of a queue pair is stored factorised, ``A = F @ V``: ``V`` has one row per *segment*
(a piece of spread shared by many queue pairs: the first hop of a host, the switch-to-switch
spread between two groups of attachment switches, the last hop into a host), ``F`` one row per
queue pair holding the weights of its segments. At 8,192 GPUs ``A`` itself would hold hundreds of
millions of entries; ``F`` holds three per queue pair (uniform and balanced policies). For a
per-flow policy the switch-to-switch path is the queue pair's own: it is written on the links
(segment ``l`` < number of links is link ``l`` alone), so ``V`` never grows during a run.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from ..errors import ConfigError


class SpreadBuilder:
    """Segments and queue-pair rows for one run (see the module doc).

    Parameters
    ----------
    links : LinkTable
    paths : EqualCostPaths
    policy : RoutingPolicy
        The run's routing policy instance (its ``fluid`` attribute and ``weights()``).
    split : PlaneSplit
        The run's plane-split policy instance.
    """

    def __init__(self, links, paths, policy, split):
        kind = getattr(policy, "fluid", "")
        if kind not in ("per_flow", "uniform", "balanced"):
            name = getattr(policy, "registry_name", type(policy).__name__)
            raise ConfigError(f"routing policy {name!r} has no flow-level model (allowed with simulation.engine "
                              f"flow: policies whose `fluid` is set: ecmp, spray, adaptive, flowlet)",
                              field="routing.policy")
        self.kind = kind
        self.links = links
        self.paths = paths
        self.policy = policy
        self.split = split
        self.seg_links: list[np.ndarray] = []
        self.seg_coef: list[np.ndarray] = []
        self._up: dict = {}
        self._mid: dict = {}
        self._down: dict = {}
        self._cap_to: dict = {}
        self._rows: dict = {}
        self._switch_stub: dict = {}
        rate = links.rate_bps.astype(np.float64)
        self._rate = rate
        if self.kind == "per_flow":
            # per-flow paths are written on the links themselves: segment l is link l, so a
            # queue pair's path adds entries to F, never rows to V (V is fixed once built)
            for link in range(len(links)):
                self.seg_links.append(np.array([link], dtype=np.int64))
                self.seg_coef.append(np.ones(1))

    # ------------------------------------------------------------------ segments
    @property
    def segments(self) -> int:
        return len(self.seg_links)

    def _segment(self, acc: dict) -> int:
        ids = np.fromiter(acc.keys(), dtype=np.int64, count=len(acc))
        coef = np.fromiter(acc.values(), dtype=np.float64, count=len(acc))
        order = np.argsort(ids)
        self.seg_links.append(ids[order])
        self.seg_coef.append(coef[order])
        return len(self.seg_links) - 1

    def _stub(self, node: int):
        s = self._switch_stub.get(node)
        if s is None:
            s = self._switch_stub[node] = SimpleNamespace(id=node)
        return s

    # ------------------------------------------------------------------ the three parts
    def _first_ports(self, src: int, dst: int) -> np.ndarray:
        first = self.paths.first_hops(src, dst)
        if not first:
            raise ValueError(f"host {src} has no port towards host {dst}")
        return self.links.ports_towards(src, sorted(first))

    def _weights(self, node: int, ports: np.ndarray, dst: int, qp) -> np.ndarray:
        n = len(ports)
        if n == 1:
            return np.ones(1)
        if self.kind == "per_flow":
            return np.asarray(self.policy.weights(self._stub(node), list(ports), qp), dtype=np.float64)
        if self.kind == "uniform":
            return np.full(n, 1.0 / n)
        # balanced: in proportion to each port's capacity towards dst
        caps = np.array([min(self._rate[p], self._capacity_to(int(self.links.dst[p]), dst)) for p in ports])
        total = caps.sum()
        return caps / total if total > 0 else np.full(n, 1.0 / n)

    def _capacity_to(self, node: int, dst: int) -> float:
        """Line rate from switch ``node`` to the destination's attachment switches along equal-cost
        paths (a sum over its ports of min(port rate, what lies beyond)); infinite at an attachment
        switch (the last hop is counted separately)."""
        attach = self.paths.attachments(dst)
        if node in attach:
            return float("inf")
        key = (node, attach)
        v = self._cap_to.get(key)
        if v is None:
            ports = self.links.ports_towards(node, self.paths.next_hops(node, dst))
            v = float(sum(min(self._rate[p], self._capacity_to(int(self.links.dst[p]), dst)) for p in ports))
            self._cap_to[key] = v
        return v

    def _walk(self, starts: dict, dst: int, qp) -> tuple[dict, dict]:
        """Spread ``starts`` ({switch: weight}) towards ``dst``'s attachment switches: (link ->
        coefficient, attachment switch -> weight arriving there)."""
        attach = self.paths.attachments(dst)
        acc: dict = {}
        exits: dict = {}
        frontier = dict(starts)
        while frontier:
            nxt: dict = {}
            for node, w in frontier.items():
                if node in attach:
                    exits[node] = exits.get(node, 0.0) + w
                    continue
                ports = self.links.ports_towards(node, self.paths.next_hops(node, dst))
                if not len(ports):
                    raise ValueError(f"switch {node} has no route to host {dst}")
                for p, x in zip(ports.tolist(), self._weights(node, ports, dst, qp).tolist()):
                    if x:
                        acc[p] = acc.get(p, 0.0) + w * x
                        b = int(self.links.dst[p])
                        nxt[b] = nxt.get(b, 0.0) + w * x
            frontier = nxt
        return acc, exits

    def row(self, src: int, dst: int, uid: int, flow_hash: int) -> list[tuple[int, float]]:
        """The segments (with weights) of the queue pair ``uid`` from ``src`` to ``dst`` with
        5-tuple hash ``flow_hash``: first hop, switch-to-switch spread, last hop."""
        qp = SimpleNamespace(uid=uid, hash=flow_hash)
        eligible = self._first_ports(src, dst)
        chosen = np.asarray(self.split.ports(qp, list(eligible)), dtype=np.int64)
        if self.kind != "per_flow":
            # the whole row depends only on (src, the ports chosen, dst): shared by its queue pairs
            rkey = (src, dst, chosen.tobytes())
            out = self._rows.get(rkey)
            if out is None:
                out = self._rows[rkey] = self._row(src, dst, qp, chosen)
            return out
        return self._row(src, dst, qp, chosen)

    def _row(self, src: int, dst: int, qp, chosen: np.ndarray) -> list[tuple[int, float]]:
        key = (src, tuple(chosen.tolist()))
        up = self._up.get(key)
        if up is None:
            r = self._rate[chosen]
            w = r / r.sum()
            acc = {int(p): float(x) for p, x in zip(chosen, w)}
            starts: dict = {}
            for p, x in acc.items():
                b = int(self.links.dst[p])
                starts[b] = starts.get(b, 0.0) + x
            up = self._up[key] = (self._segment(acc), tuple(sorted(starts.items())))
        up_seg, starts = up
        attach = self.paths.attachments(dst)
        if self.kind == "per_flow":
            acc, exits = self._walk(dict(starts), dst, qp)
            mid = (acc, tuple(sorted(exits.items())))
        else:
            mkey = (starts, attach)
            mid = self._mid.get(mkey)
            if mid is None:
                acc, exits = self._walk(dict(starts), dst, qp)
                mid = self._mid[mkey] = (self._segment(acc) if acc else None, tuple(sorted(exits.items())))
        mid_seg, exits = mid
        # the last hop is shared by every queue pair into dst unless a per-flow policy has a choice there
        shared = self.kind != "per_flow" or all(len(self.links.ports_towards(x, [dst])) == 1 for x, _w in exits)
        dkey = (dst, exits) if shared else None
        down = self._down.get(dkey) if dkey is not None else None
        if down is None:
            acc = {}
            for x, w in exits:
                ports = self.links.ports_towards(x, [dst])
                for p, c in zip(ports.tolist(), self._weights(x, ports, dst, qp).tolist()):
                    if c:
                        acc[p] = acc.get(p, 0.0) + w * c
            if dkey is None:          # per-flow choice on the last hop: its links, in F
                down = acc
            else:
                down = self._down[dkey] = self._segment(acc)
        out = [(up_seg, 1.0)]
        if isinstance(mid_seg, dict):
            out.extend(sorted(mid_seg.items()))           # per-flow path: link segments
        elif mid_seg is not None:
            out.append((mid_seg, 1.0))
        if isinstance(down, dict):
            out.extend(sorted(down.items()))
        else:
            out.append((down, 1.0))
        return out

    def usage(self, row: list[tuple[int, float]]) -> dict:
        """The link coefficients of a queue pair (``row`` from :meth:`row`), summed over its
        segments: link id -> share of the queue pair's rate on it (for tests and reports)."""
        out: dict = {}
        for seg, w in row:
            for link, c in zip(self.seg_links[seg].tolist(), self.seg_coef[seg].tolist()):
                out[link] = out.get(link, 0.0) + w * c
        return out
