"""``spray``: every packet takes a uniformly random equal-cost port (random packet spraying)."""
from __future__ import annotations

from .base import ROUTING, RoutingPolicy


@ROUTING.register("spray")
class Spray(RoutingPolicy):
    fluid = "uniform"
    def __init__(self, params, streams):
        super().__init__(params, streams)
        self._random = streams.py("routing.spray").random

    def choose(self, switch, ports, pkt, now):
        return ports[int(self._random() * len(ports))]

    def weights(self, switch, ports, qp, control: bool = False) -> list[float]:
        """Uniform: every packet is an independent draw."""
        return [1.0 / len(ports)] * len(ports)
