"""``spray``: every packet takes a uniformly random equal-cost port (random packet spraying).

The draw is the packet's counter-based one (:func:`fabricsim.flows.identity.packet_draw`: its
queue pair, PSN, send time and kind, the switch, and a salt seeded from the stream
``routing.spray.salt``), so a packet's port does not depend on how many packets were sprayed
before it, nor on the order of events.
"""
from __future__ import annotations

from ..flows.identity import packet_draw
from .base import ROUTING, RoutingPolicy

#: name of the random stream the per-run spray salt is drawn from
SALT_STREAM = "routing.spray.salt"


@ROUTING.register("spray")
class Spray(RoutingPolicy):
    fluid = "uniform"
    def __init__(self, params, streams):
        super().__init__(params, streams)
        self._salt = streams.u64(SALT_STREAM)

    def choose(self, switch, ports, pkt, now):
        return ports[packet_draw(self._salt, pkt, switch.id) % len(ports)]

    def weights(self, switch, ports, qp, control: bool = False) -> list[float]:
        """Uniform: every packet is an independent draw."""
        return [1.0 / len(ports)] * len(ports)
