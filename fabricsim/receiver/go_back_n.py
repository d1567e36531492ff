"""``go_back_n``: the classic RoCE responder (IBTA RC; Linux rxe ``check_psn``).

Only the expected PSN is accepted. A unit beyond it is discarded; the first such unit sends a NAK
"PSN sequence error" carrying the expected PSN and later ones are discarded silently until the
expected PSN arrives. The sender rewinds and resends everything from that PSN. Under per-packet
spraying every reordering costs a rewind: this is why spraying needs out-of-order placement.
"""
from __future__ import annotations

from ..net.packet import NAK
from .base import RECEIVERS, Receiver


@RECEIVERS.register("go_back_n")
class GoBackN(Receiver):
    accepts_out_of_order = False
    selective = False

    def on_gap(self, t, qp, pkt):
        qp.msg.discarded_bytes += pkt.payload
        if not qp.r_nak:
            qp.r_nak = True
            self.send(t, qp, NAK, qp.r_cum, pkt)
        return False
