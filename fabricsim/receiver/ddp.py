"""``ddp``: direct data placement (SuperNIC out-of-order placement).

Every packet is written to its final place in memory on arrival, whatever its order (NVIDIA
ConnectX "Out-of-Order Data Placement"); a message is complete when all of its bytes have
arrived. Nothing is ever discarded for being out of order. Losses are recovered selectively:
ACKs carry the triggering PSN, the sender's RACK detection resends only what is missing.
"""
from __future__ import annotations

from .base import RECEIVERS, Receiver


@RECEIVERS.register("ddp")
class DirectDataPlacement(Receiver):
    def on_gap(self, t, qp, pkt):
        return True
