"""Receiver (destination NIC) models, chosen by name. One file per model."""
from .base import RECEIVERS, Receiver
from . import ddp  # noqa: F401  (registration)

__all__ = ["RECEIVERS", "Receiver"]
