"""Contract of a routing policy.

A switch with several equal-cost egress ports for a packet calls
``policy.choose(switch, ports, pkt, now_ps) -> Port``. ``ports`` is a tuple of
:class:`~fabricsim.net.port.Port` sorted by neighbour id; the policy may read their state
(``queued_bytes(now)``, ``busy_until``, ``rate``, counters) and the packet's queue pair
(``pkt.qp.hash`` is the seeded 5-tuple hash). Policies are built once per simulation with
``(params, streams)`` and keep their own state; randomness comes from a named stream.

``weights(switch, ports, qp, control, capacity_bps) -> list[float] | None`` states what
``choose()`` means for a fluid model: the share of one flow (a queue pair's data, or with
``control=True`` its control packets) that goes to each of ``ports`` in the long run.
``capacity_bps`` (optional) is each port's capacity towards the flow's destination in bit/s (its
line rate, or less where the equal-cost links beyond it carry less; ``None``: all equal), which a
load-balancing policy's share depends on. Every built-in policy answers it, and from the same
private function as ``choose()`` ("one hash, two questions"), so the two cannot drift:

- ``ecmp``, ``pinned``: one-hot at the port the flow's hash (:func:`~fabricsim.routing.ecmp.ecmp_index`)
  or its pin picks;
- ``spray``: the distribution of :func:`~fabricsim.routing.spray.spray_index` over the packet's
  64-bit draw (uniform, to within 2^-64);
- ``adaptive``, ``flowlet``: the fluid limit of the port-quality pick
  (:meth:`~fabricsim.routing.quality.PortQuality.shares`): ports kept at equal grade carry bytes
  in proportion to their capacity towards the destination. ``flowlet`` reaches it over many
  flowlets; a single long flowlet stays on the port its first packet took.

The base class answers ``None``: no static share, and no flow-level meaning. The contract
(tests/test_pinned.py::test_packet_byte_shares_follow_weights, run for every registered policy):
the packet engine's per-link byte shares converge to ``weights()``.

``fluid`` names what the policy means to the flow-level engine (:mod:`fabricsim.engine.spread`):
``"per_flow"`` (each queue pair follows ``weights()`` at every switch, so ECMP's collisions are the
packet engine's own), ``"uniform"`` (the same share for every flow, whatever its hash),
``"balanced"`` (the same, depending on the ports' capacities towards the destination: the fluid
limit of per-packet load balancing; with ``simulation.flow.adaptive: waterfill``, the default, the
flow engine then moves the split with the load, each switch filling its least-loaded ports first:
:mod:`fabricsim.engine.balance`), or ``""`` (no flow-level meaning: the flow engine refuses the
policy). The flow engine asks ``weights()`` in every case: the policy owns its flow-level share.
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
    #: where the flow-level share (``weights()``) and a packet run part ways, in one line: a flow
    #: run with this policy warns with it ("" = nothing to say)
    fluid_caveat = ""

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

    def weights(self, switch, ports, qp, control: bool = False, capacity_bps=None) -> list[float] | None:
        """Long-run share of the flow (``qp``'s data, or its control packets) per port of ``ports``
        at ``switch`` (``capacity_bps``: each port's capacity towards the destination, or None),
        or ``None`` if the choice has no static share (see the module doc)."""
        return None


#: what a plug-in of this family must be (fabricsim/registry.py, Registry.discover)
ROUTING.accepts(RoutingPolicy, "a RoutingPolicy subclass")
