"""``spray``: every packet takes a uniformly random equal-cost port (random packet spraying).

The draw is the packet's counter-based one (:func:`fabricsim.flows.identity.packet_draw`: its
queue pair, PSN, send time and kind, the switch, and a salt seeded from the stream
``routing.spray.salt``), so a packet's port does not depend on how many packets were sprayed
before it, nor on the order of events.

:func:`spray_index` is the one definition of the choice: :meth:`Spray.choose` takes the port it
gives the packet's draw, and :meth:`Spray.weights` (the flow-level share, what the flow engine
uses) is the distribution of the same function over the draw's :data:`DRAW_BITS` equally likely
values (:func:`spray_shares`): uniform to within 2^-64.
"""
from __future__ import annotations

from ..flows.identity import packet_draw
from .base import ROUTING, RoutingPolicy

#: name of the random stream the per-run spray salt is drawn from
SALT_STREAM = "routing.spray.salt"
#: a packet's draw is uniform over 2**DRAW_BITS values (:func:`~fabricsim.flows.identity.packet_draw`)
DRAW_BITS = 64


def spray_index(draw: int, n_ports: int) -> int:
    """The equal-cost port (index ``0 <= i < n_ports``) a packet with counter-based draw ``draw``
    is sprayed to.

    >>> spray_index(10, 4), spray_index(2**64 - 1, 3)
    (2, 0)
    """
    return draw % n_ports


def spray_shares(n_ports: int, draw_bits: int = DRAW_BITS) -> list[float]:
    """The share of a flow's packets :func:`spray_index` gives each of ``n_ports`` ports: its
    distribution over the ``2**draw_bits`` equally likely draws. :func:`spray_index` depends on a
    draw only through its residue modulo ``n_ports``, so each residue ``r`` is asked once and
    counts for the ``floor(2**bits / n) (+1 if r < 2**bits mod n)`` draws that have it
    (tests/test_spray_shares.py checks it against every draw of small widths).

    >>> spray_shares(4)
    [0.25, 0.25, 0.25, 0.25]
    >>> spray_shares(3, draw_bits=2)      # draws 0..3: ports 0, 1, 2, 0
    [0.5, 0.25, 0.25]
    """
    total = 1 << draw_bits
    per, extra = divmod(total, n_ports)
    counts = [0] * n_ports
    for r in range(min(n_ports, total)):
        counts[spray_index(r, n_ports)] += per + (1 if r < extra else 0)
    return [c / total for c in counts]


@ROUTING.register("spray")
class Spray(RoutingPolicy):
    """Per-packet uniform spraying (see the module doc)."""

    fluid = "uniform"

    def __init__(self, params, streams):
        super().__init__(params, streams)
        self._salt = streams.u64(SALT_STREAM)
        self._shares: dict[int, list[float]] = {}

    def choose(self, switch, ports, pkt, now):
        return ports[spray_index(packet_draw(self._salt, pkt, switch.id), len(ports))]

    def weights(self, switch, ports, qp, control: bool = False, capacity_bps=None) -> list[float]:
        """:func:`spray_shares`: every packet an independent draw, whatever the ports' capacities."""
        n = len(ports)
        got = self._shares.get(n)
        if got is None:
            got = self._shares[n] = spray_shares(n)
        return list(got)
