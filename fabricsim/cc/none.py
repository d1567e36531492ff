"""``none``: every queue pair sends at its NIC's line rate; nothing reacts to congestion."""
from __future__ import annotations

from .base import CC, CongestionControl


@CC.register("none")
class NoCongestionControl(CongestionControl):
    """Line rate, no window: the base class's hooks do nothing."""
