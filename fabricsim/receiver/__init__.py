"""Receiver (destination NIC) models, chosen by name (``receiver.model``). One file per model;
the shared bookkeeping and the contract are in :mod:`fabricsim.receiver.base`."""
from .base import RECEIVERS, Receiver, TransportParams
from . import ddp, go_back_n, reorder_buffer  # noqa: F401  (registration)

__all__ = ["RECEIVERS", "Receiver", "TransportParams"]
