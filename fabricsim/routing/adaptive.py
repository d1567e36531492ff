"""``adaptive``: per-packet switch adaptive routing, as switch ASICs do it (Spectrum-X style).

For every packet with several equal-cost egress ports the switch takes a port uniformly at random
among those of the best *grade*: a coarse, periodically refreshed measure of the port's backlog
(and/or utilisation), combined with the grade the next switch advertises for its port towards the
packet's destination, which arrives with a delay. The measure is
:class:`fabricsim.routing.quality.PortQuality` (shared with ``flowlet``); its parameters are the
keys under ``routing:``::

    routing:
      policy: adaptive
      metric: queue              # queue | util | queue_util
      queue_thresholds: [0.05, 0.10, 0.20]   # of queue_ref: grades 0..3 (htsim)
      queue_ref: 2MiB
      refresh: 100ns             # a port's grade is re-evaluated at most this often (htsim)
      remote: true               # use the next switch's advertised grade
      remote_period: 1us         # [EST]
      remote_delay: 1us          # [EST]

``exact: true`` restores the earlier policy for comparison: the exact, instantaneous least
backlog (``metric: queue_util`` adds ``util_weight`` x the bytes the port sent over its last
``util_window``), ties broken by the packet's counter-based draw
(:func:`fabricsim.flows.identity.packet_draw`, salt from the stream ``routing.adaptive.exact.salt``); the grade,
refresh and remote keys are then ignored. With every candidate busy it deterministically takes the
earliest-free port, which makes flows phase-lock onto one uplink and collide on spine downlinks the
leaf cannot see (docs/fidelity/routing.md); it is kept only to show that effect.
"""
from __future__ import annotations

from bisect import bisect_right
from operator import attrgetter

from pydantic import Field, model_validator

from ..flows.identity import packet_draw
from .base import ROUTING, RoutingPolicy
from .quality import PortQuality, QualityParams

PS_BITS = 8 * 10**12
_BUSY_UNTIL = attrgetter("busy_until")


@ROUTING.register("adaptive")
class Adaptive(RoutingPolicy):
    fluid = "balanced"
    class Params(QualityParams):
        exact: bool = Field(False, description="true = the earlier exact least-backlog policy "
                                               "(for comparison; grade keys ignored)")
        util_weight: float = Field(1.0, ge=0, description="exact mode, metric queue_util: weight of "
                                                          "the utilisation term")

        @model_validator(mode="after")
        def _exact_mode(self):
            if self.exact:
                if self.metric == "util":
                    raise ValueError("metric: 'util' has no exact form (allowed with exact: true: queue, "
                                     "queue_util)")
                if "util_window" not in self.model_fields_set:
                    self.util_window = 10 * 10**6    # the earlier policy's default (10 us)
            return self

    def __init__(self, params, streams):
        super().__init__(params, streams)
        self.quality = PortQuality(params, streams.u64("routing.adaptive.salt"))
        if params.exact:
            self._salt = streams.u64("routing.adaptive.exact.salt")
            self._util = params.metric != "queue"
            self._w = params.util_weight
            self._win = params.util_window
            self._uniform: dict[int, bool] = {}      # id(ports) -> all ports have one rate
            self._seen: list[tuple] = []
            self.choose = self._choose_exact
        else:
            self.choose = self.quality.pick

    def choose(self, switch, ports, pkt, now):  # replaced per instance in __init__
        raise NotImplementedError

    def weights(self, switch, ports, qp, control: bool = False, capacity_bps=None) -> list[float]:
        """The fluid limit of the quality pick (:meth:`PortQuality.shares`): shares in proportion
        to each port's capacity towards the destination (uniform if ``capacity_bps`` is None); the
        ``exact`` least-backlog policy equalises the backlogs too, with the same limit."""
        return self.quality.shares(ports, capacity_bps)

    # ------------------------------------------------------------------ exact (earlier) policy
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

    def _choose_exact(self, switch, ports, pkt, now):
        if not self._util:
            uniform = self._uniform.get(id(ports))
            if uniform is None:
                uniform = self._uniform[id(ports)] = len({p.rate for p in ports}) == 1
                self._seen.append(ports)    # keeps the tuple, so its id is never reused
            if uniform:
                # Every port of a leaf-spine group has one rate: the least queued bytes is the
                # earliest busy_until, and all idle ports (busy_until <= now) tie at zero.
                order = sorted(ports, key=_BUSY_UNTIL)
                first = order[0].busy_until
                n = bisect_right(order, first if first > now else now, key=_BUSY_UNTIL)
                return order[0] if n == 1 else order[packet_draw(self._salt, pkt, switch.id) % n]
            scores = [((p.busy_until - now) * p.rate if p.busy_until > now else 0) for p in ports]
        else:
            scores = [self._score(p, now) for p in ports]
        best = min(scores)
        tied = [p for p, q in zip(ports, scores) if q == best]
        return tied[0] if len(tied) == 1 else tied[packet_draw(self._salt, pkt, switch.id) % len(tied)]
