"""``pinned``: each flow is pinned, at each switch, to the least-pinned equal-cost port when it
first shows up, and never moves.

At a switch with several equal-cost ports towards a packet's destination, the first packet of a
flow (a queue pair's data direction, or its control direction: two flows, as in ``ecmp``) is
pinned to the candidate port that has the fewest flows of that direction pinned to it so far at
this switch (over every destination the port serves); ties are broken by the same salted hash as
ECMP (:func:`fabricsim.routing.ecmp.ecmp_index` of the flow hash among the tied ports, with this
policy's own salt from the stream ``routing.pinned.salt``). Every later packet of the flow takes
the pinned port. Pins are never released: a queue pair is taken to live for the whole run, as the
persistent queue pairs of NCCL channels and EP kernels do (``conn >= 0``, docs/traces.md
"Connections"). With fresh queue pairs per message (``conn = -1``) the counts include flows that
have finished, so the rule balances the flows a port has ever been given, not the live ones.

What it stands for: path pinning / flow placement at connection setup, done by a controller or
by the switch from per-port flow counts, rather than by a hash (Meta, "RDMA over Ethernet for
Distributed AI Training at Meta Scale", SIGCOMM 2024, used path pinning before E-ECMP with QP
scaling; centralised flow placement works the same way). It is placement-aware (it sees how many
flows each port already carries) but load-blind (not how many bytes they send, nor the queues):
two heavy flows and two idle ones count alike. The order in which flows first reach a switch
decides their pins, so unlike ``ecmp`` the choice depends on event order (it is deterministic:
events at equal times run in scheduling order).

``weights()`` is one-hot at the pinned port; asked about a flow not yet pinned, it answers with the
port the rule would pin it to now, without pinning it (asking changes nothing).
"""
from __future__ import annotations

from ..net.packet import DATA
from .base import ROUTING, RoutingPolicy
from .ecmp import ecmp_index

#: name of the random stream the per-run tie-break salt is drawn from
SALT_STREAM = "routing.pinned.salt"


@ROUTING.register("pinned")
class Pinned(RoutingPolicy):
    """Least-pinned port per flow at first sight, then fixed (see the module doc)."""

    reorders = False

    def __init__(self, params, streams):
        super().__init__(params, streams)
        self._salt = streams.u64(SALT_STREAM)
        self._pins: dict[int, object] = {}       # (queue pair, direction, switch) -> port
        self._count: dict[tuple[bool, int], int] = {}   # (direction, port index) -> flows pinned

    def pin(self, switch, ports, qp, control: bool = False):
        """The port ``qp``'s flow (data, or control with ``control=True``) is pinned to at
        ``switch`` among ``ports``; pins it now if it is new."""
        key = (qp.uid << 25) | (control << 24) | switch.id
        port = self._pins.get(key)
        if port is not None:
            return port
        port = self._pins[key] = self._least_pinned(switch, ports, qp, control)
        self._count[(control, port.index)] = self._count.get((control, port.index), 0) + 1
        return port

    def _least_pinned(self, switch, ports, qp, control: bool):
        """The candidate with the fewest flows of the direction pinned so far (ties: salted hash)."""
        count = self._count
        loads = [count.get((control, p.index), 0) for p in ports]
        least = min(loads)
        tied = [p for p, n in zip(ports, loads) if n == least]
        return tied[0] if len(tied) == 1 else tied[ecmp_index(qp.hash, self._salt, switch.id, len(tied), control)]

    def pins_per_port(self, control: bool = False) -> dict[int, int]:
        """Port index -> flows of one direction (data, or control with ``control=True``) pinned to
        it so far."""
        return {i: n for (c, i), n in self._count.items() if c == control}

    def choose(self, switch, ports, pkt, now):
        return self.pin(switch, ports, pkt.qp, pkt.kind != DATA)

    def weights(self, switch, ports, qp, control: bool = False, capacity_bps=None) -> list[float]:
        """One-hot at the flow's pinned port (or where it would be pinned now; nothing is pinned)."""
        port = self._pins.get((qp.uid << 25) | (control << 24) | switch.id) or \
            self._least_pinned(switch, ports, qp, control)
        return [1.0 if p is port else 0.0 for p in ports]
