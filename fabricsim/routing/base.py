"""Contract of a routing policy.

A switch with several equal-cost egress ports for a packet calls
``policy.choose(switch, ports, pkt, now_ps) -> Port``. ``ports`` is a tuple of
:class:`~fabricsim.net.port.Port` sorted by neighbour id; the policy may read their state
(``queued_bytes(now)``, ``busy_until``, ``rate``, counters) and the packet's queue pair
(``pkt.qp.hash`` is the seeded 5-tuple hash). Policies are built once per simulation with
``(params, streams)`` and keep their own state; randomness comes from a named stream.

``weights(switch, ports, qp, control) -> list[float] | None`` states what ``choose()`` means
for a fluid model: the share of one flow (a queue pair's data, or with ``control=True`` its
control packets) that goes to each of ``ports``. One-hot for per-flow policies (``ecmp``,
``pinned``), uniform for ``spray``; ``None`` (the default) for policies whose choice depends on
the queues at the moment a packet arrives (``adaptive``, ``flowlet``), which have no static
share. The contract (tests/test_pinned.py::test_packet_byte_shares_follow_weights, run for every
registered policy): the packet engine's per-link byte shares converge to ``weights()``.

``fluid`` names what the policy means to the flow-level engine (:mod:`fabricsim.engine.spread`):
``"per_flow"`` (each queue pair follows ``weights()`` at every switch, so ECMP's collisions are the
packet engine's own), ``"uniform"`` (an even split over the equal-cost ports, whoever the flow),
``"balanced"`` (split over the equal-cost ports in proportion to each one's capacity towards the
destination, the fluid limit of per-packet load balancing when every port carries the same other
traffic; with ``simulation.flow.adaptive: waterfill``, the default, the split follows the load, each
switch filling its least-loaded ports first: :mod:`fabricsim.engine.balance`), or ``""`` (no
flow-level meaning: the flow engine refuses the policy).
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ..registry import Registry

ROUTING: Registry = Registry("routing policy", group="fabricsim.routing")


class PolicyParams(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class RoutingPolicy:
    """Base class: subclasses set ``Params`` and implement :meth:`choose`."""

    Params: type[PolicyParams] | None = None
    #: True if the policy may send packets of one flow over different paths
    reorders = True
    #: flow-level meaning (module doc): "per_flow" | "uniform" | "balanced" | "" (none)
    fluid = ""

    def __init__(self, params, streams):
        self.params = params
        self.streams = streams

    def choose(self, switch, ports, pkt, now):  # pragma: no cover - abstract
        raise NotImplementedError

    def flow_index(self, switch_ids, n_ports, hashes):
        """For a ``per_flow`` policy whose choice depends only on the flow's hash and the switch:
        the index among ``n_ports`` candidates each flow takes at each switch (numpy arrays,
        broadcast), the vectorised form of ``weights()``'s one-hot answer; ``None`` if the policy
        has no such form (the flow engine then asks ``weights()`` per queue pair)."""
        return None

    def weights(self, switch, ports, qp, control: bool = False) -> list[float] | None:
        """Share of the flow (``qp``'s data, or its control packets) per port of ``ports`` at
        ``switch``, or ``None`` if the choice has no static share (see the module doc)."""
        return None


#: what a plug-in of this family must be (fabricsim/registry.py, Registry.discover)
ROUTING.accepts(RoutingPolicy, "a RoutingPolicy subclass")
