"""Engines and their kernel. ``ENGINES.get("packet")`` is the packet-level engine."""
from .interface import ENGINES, Engine, RunOutcome, SimulationInput
from . import packet  # noqa: F401  (registration)

__all__ = ["ENGINES", "Engine", "RunOutcome", "SimulationInput"]
