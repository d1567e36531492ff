"""Congestion-control algorithms, chosen by name. Only ``none`` (line rate) exists so far; the
SuperNIC/CC issue adds DCQCN and telemetry pacing as algorithm objects with hooks."""
from ..registry import Registry

CC: Registry = Registry("congestion control algorithm")


@CC.register("none")
class NoCongestionControl:
    """Every queue pair sends at NIC line rate; nothing reacts to congestion."""

    Params = None
    paces = False

    def __init__(self, params=None, streams=None):
        self.params = params


__all__ = ["CC", "NoCongestionControl"]
