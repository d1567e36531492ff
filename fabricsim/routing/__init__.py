"""Routing policies, chosen by name: ``ROUTING.get("adaptive")``. One file per policy."""
from .base import ROUTING, PolicyParams, RoutingPolicy
from . import adaptive, ecmp, flowlet, pinned, spray  # noqa: F401  (registration)

__all__ = ["ROUTING", "RoutingPolicy", "PolicyParams"]
