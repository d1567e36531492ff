"""Contract of a receiver model: what the destination NIC does with each arriving packet.

``on_packet(t, pkt)`` is the arrival callback of every host-facing port. A receiver accounts
the packet's payload to its message (``pkt.qp.msg``) and calls ``engine.message_done(state, t)``
when the message is complete. Packet latency and goodput are recorded here, once per packet.
"""
from __future__ import annotations

from ..registry import Registry

RECEIVERS: Registry = Registry("receiver model")


class Receiver:
    Params = None
    #: True if the model accepts packets in any order
    accepts_out_of_order = True

    def __init__(self, params, engine):
        self.params = params
        self.engine = engine

    def on_packet(self, t: int, pkt) -> None:  # pragma: no cover - abstract
        raise NotImplementedError
