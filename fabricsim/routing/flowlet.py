"""``flowlet``: a flow keeps its egress port until it pauses for longer than ``gap``; the next
packet after such a gap (a new flowlet) takes the least-loaded port (as ``adaptive``).

If ``gap`` exceeds the largest path-delay difference, re-pathing cannot reorder packets
(Kandula et al., CCR 2007). Default ``gap`` 10us as htsim's ``-ar_sticky_delta``.
"""
from __future__ import annotations

from ..config.types import PositiveTime
from .adaptive import Adaptive
from .base import ROUTING, PolicyParams, RoutingPolicy


@ROUTING.register("flowlet")
class Flowlet(RoutingPolicy):
    class Params(PolicyParams):
        gap: PositiveTime = "10us"

    def __init__(self, params, streams):
        super().__init__(params, streams)
        self._gap = params.gap
        self._table: dict[int, list] = {}
        self._pick = Adaptive(Adaptive.Params(), streams).choose
        self.new_flowlets = 0

    def choose(self, switch, ports, pkt, now):
        # one entry per queue pair, direction (data, or its ACKs on the way back) and switch
        key = (pkt.qp.uid << 25) | ((1 if pkt.kind else 0) << 24) | switch.id
        entry = self._table.get(key)
        if entry is not None and now - entry[1] <= self._gap:
            entry[1] = now
            return entry[0]
        port = self._pick(switch, ports, pkt, now)
        self.new_flowlets += 1
        if entry is None:
            self._table[key] = [port, now]
        else:
            entry[0], entry[1] = port, now
        return port
