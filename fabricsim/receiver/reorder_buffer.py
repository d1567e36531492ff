"""``reorder_buffer``: in-order delivery through a finite reorder buffer per receiving NIC.

A unit that arrives beyond a gap waits in the buffer until the gap is filled; the buffer is shared
by every queue pair arriving at the host and holds ``buffer`` bytes (the size of a real NIC's
reorder resources is not published [EST]). A unit that does not fit is discarded (counted as
``reorder_overflow_bytes``) and recovered by selective retransmission, like a loss.
"""
from __future__ import annotations

from pydantic import Field

from ..config.types import PositiveSize
from ..net.packet import ACK
from .base import RECEIVERS, Receiver, TransportParams


@RECEIVERS.register("reorder_buffer")
class ReorderBuffer(Receiver):
    class Params(TransportParams):
        buffer: PositiveSize = Field("256KiB", description="reorder-buffer bytes per receiving host [EST]")

    def __init__(self, params, engine):
        super().__init__(params, engine)
        self.capacity = params.buffer

    def on_gap(self, t, qp, pkt):
        hr = self.hosts.get(qp.dst) or self.host(qp.dst)
        if hr.hold + pkt.payload > self.capacity:
            qp.msg.overflow_bytes += pkt.payload
            self.send(t, qp, ACK, qp.r_cum, None)    # duplicate ACK: shows the gap, acknowledges nothing new
            return False
        return True
