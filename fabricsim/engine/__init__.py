"""Engines and their kernel. ``ENGINES.get("packet")`` is the packet-level engine, ``ENGINES.get("flow")`` the fluid one."""
from .interface import ENGINES, Engine, RunOutcome, SimulationInput
from . import flow, packet  # noqa: F401  (registration)

__all__ = ["ENGINES", "Engine", "RunOutcome", "SimulationInput"]
