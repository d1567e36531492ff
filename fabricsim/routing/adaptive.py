"""``adaptive``: per packet, the equal-cost egress port with the least queued bytes.

This is the Spectrum-X-style policy: the switch looks at its own egress queues when each
packet is forwarded. Ties (e.g. several idle ports) are broken uniformly at random.

``metric: queue_util`` adds a utilisation term: score = queued bytes +
``util_weight`` x (bytes the port could send in ``util_window`` x its recent utilisation),
where utilisation is measured over the last completed window of length ``util_window``.
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..config.types import PositiveTime
from .base import ROUTING, PolicyParams, RoutingPolicy

PS_BITS = 8 * 10**12


@ROUTING.register("adaptive")
class Adaptive(RoutingPolicy):
    class Params(PolicyParams):
        metric: Literal["queue", "queue_util"] = "queue"
        util_weight: float = Field(1.0, ge=0)
        util_window: PositiveTime = "10us"

    def __init__(self, params, streams):
        super().__init__(params, streams)
        self._random = streams.py("routing.adaptive").random
        self._util = params.metric == "queue_util"
        self._w = params.util_weight
        self._win = params.util_window

    def _score(self, p, now):
        bu = p.busy_until
        q = (bu - now) * p.rate if bu > now else 0          # queued bits x 1e12 (ps units)
        if self._util:
            if now - p.util_mark_t >= self._win:
                span = now - p.util_mark_t
                p.util_rate = (p.tx_bytes - p.util_mark_bytes) * PS_BITS / (span * p.rate)
                p.util_mark_t, p.util_mark_bytes = now, p.tx_bytes
            q += self._w * p.util_rate * self._win * p.rate
        return q

    def choose(self, switch, ports, pkt, now):
        best = None
        best_q = None
        ties = 0
        rnd = self._random
        if not self._util:
            for p in ports:
                bu = p.busy_until
                q = (bu - now) * p.rate if bu > now else 0
                if best is None or q < best_q:
                    best, best_q, ties = p, q, 1
                elif q == best_q:
                    ties += 1
                    if rnd() * ties < 1.0:
                        best = p
            return best
        for p in ports:
            q = self._score(p, now)
            if best is None or q < best_q:
                best, best_q, ties = p, q, 1
            elif q == best_q:
                ties += 1
                if rnd() * ties < 1.0:
                    best = p
        return best
