"""How a message is split over a host's NIC ports (planes), chosen by name like routing.

``per_packet`` (default): every queue pair may use every eligible port; each packet leaves by
whichever port is free first (hardware load balancing across planes). ``per_flow``: each queue
pair is pinned to one port by its 5-tuple hash. Eligible ports are the host's links towards the
destination (``EqualCostPaths.first_hops``): all NVLink links for a GPU in the same NVLink domain,
otherwise the NIC ports on planes that reach the destination.
"""
from .base import SPLITS, PlaneSplit
from . import per_flow, per_packet  # noqa: F401  (registration)

__all__ = ["SPLITS", "PlaneSplit"]
