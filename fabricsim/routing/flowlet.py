"""``flowlet``: a flow keeps its egress port until it pauses for longer than ``gap``; the next
packet after such a gap (a new flowlet) takes a port of the best grade, by the same port-quality
measure as ``adaptive`` (:class:`fabricsim.routing.quality.PortQuality`; its keys, e.g.
``refresh`` or ``remote``, are accepted here too).

If ``gap`` exceeds the largest path-delay difference, re-pathing cannot reorder packets
(Kandula et al., CCR 2007). Default ``gap`` 10us as htsim's ``-ar_sticky_delta``. Unlike htsim,
a new flowlet always takes the draw among the best ports (htsim also flips a coin and moves only
to a strictly better port); CONGA and LetFlow re-place every new flowlet, as here.

**Long-run share** (``weights()``, the flow engine's meaning): each flowlet is placed by the
port-quality pick, so over many flowlets a flow's bytes split as ``adaptive``'s do, in proportion
to the ports' capacities towards the destination (:meth:`PortQuality.shares`). Measured with the
packet engine: a persistent connection per host sending 256 messages of 8 KiB, one every 20 us
(pauses longer than ``gap``), puts every link's bytes within 13 % of that share (16,352 flowlets;
tests/test_pinned.py). A flow that never pauses for ``gap`` is one flowlet: it stays on the port
its first packet took, chosen among ports that all look idle at the start, so elephant flows
collide as under ECMP: a 2 MiB cross-leaf permutation on 32 hosts (4 x 8, 8 spines, lossless, no
CC) completes at 0.350 of its ideal rate in the packet engine (ECMP 0.348) and 1.000 in the flow
engine (docs/fidelity/flow.md). A flow run with ``flowlet`` says so (:attr:`fluid_caveat`).
"""
from __future__ import annotations

from pydantic import Field

from ..config.types import PositiveTime
from .base import ROUTING, RoutingPolicy
from .quality import PortQuality, QualityParams


@ROUTING.register("flowlet")
class Flowlet(RoutingPolicy):
    fluid = "balanced"
    fluid_caveat = ("routing.policy flowlet runs at flow level as its long-run share over many flowlets (in "
                    "proportion to capacity, as adaptive); a flow that never pauses for routing.gap is one flowlet "
                    "on one path in a packet run, so elephant flows collide as under ECMP (2 MiB permutation: "
                    "completion ratio 0.350 packet, 1.000 flow; docs/fidelity/flow.md)")
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

    def weights(self, switch, ports, qp, control: bool = False, capacity_bps=None) -> list[float]:
        """The long-run share over many flowlets: each new flowlet is placed by the port-quality
        pick, so its fluid limit (:meth:`PortQuality.shares`, in proportion to capacity). A flow
        that never pauses for ``gap`` is one flowlet and stays on the port its first packet took
        (module doc); the share is then that of flowlets, not of one flow."""
        return self.quality.shares(ports, capacity_bps)
