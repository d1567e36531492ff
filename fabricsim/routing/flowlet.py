"""``flowlet``: a flow keeps its egress port until it pauses for longer than ``gap``; the next
packet after such a gap (a new flowlet) takes a port of the best grade, by the same port-quality
measure as ``adaptive`` (:class:`fabricsim.routing.quality.PortQuality`; its keys, e.g.
``refresh`` or ``remote``, are accepted here too).

If ``gap`` exceeds the largest path-delay difference, re-pathing cannot reorder packets
(Kandula et al., CCR 2007). Default ``gap`` 10us as htsim's ``-ar_sticky_delta``. Unlike htsim,
a new flowlet always takes the draw among the best ports (htsim also flips a coin and moves only
to a strictly better port); CONGA and LetFlow re-place every new flowlet, as here.
"""
from __future__ import annotations

from pydantic import Field

from ..config.types import PositiveTime
from .base import ROUTING, RoutingPolicy
from .quality import PortQuality, QualityParams


@ROUTING.register("flowlet")
class Flowlet(RoutingPolicy):
    fluid = "balanced"
    class Params(QualityParams):
        gap: PositiveTime = Field("10us", description="idle time after which a flow's next packet "
                                                      "starts a new flowlet (htsim -ar_sticky_delta)")

    def __init__(self, params, streams):
        super().__init__(params, streams)
        self._gap = params.gap
        self._table: dict[int, list] = {}
        self.quality = PortQuality(params, streams.u64("routing.flowlet.salt"))
        self._pick = self.quality.pick
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
