"""The point-to-point message (defined in the engine-neutral layer, :mod:`fabricsim.flows.message`)."""
from ..flows.message import Message

__all__ = ["Message"]
