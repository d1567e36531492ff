"""``ddp``: direct data placement (SuperNIC out-of-order placement).

Every packet is written to its final place on arrival, whatever its order; a message is complete
when all of its bytes have arrived. No reorder buffer, no retransmission request.
"""
from __future__ import annotations

from math import log

from .base import RECEIVERS, Receiver


@RECEIVERS.register("ddp")
class DirectDataPlacement(Receiver):
    def __init__(self, params, engine):
        super().__init__(params, engine)
        rec = engine.recorder
        self._hist = rec.latency.counts
        self._inv = rec.latency.inv_log_base
        self._series = rec.goodput
        self._bin = rec.goodput_bin_ps
        self._done = engine.message_done
        self._rec = rec

    def on_packet(self, t, pkt):
        lat = t - pkt.t_tx
        self._hist[int(log(lat) * self._inv)] += pkt.npk
        st = pkt.qp.msg
        if st.final:  # payload at its destination (not a PXN hop to a relay GPU)
            b = t // self._bin
            series = self._series
            if b >= len(series):
                series.extend([0] * (b + 1 - len(series)))
            series[b] += pkt.payload
            self._rec.delivered_total += pkt.payload
            if not st.delivered and st.parent is None:
                self._rec.on_first_arrival(st, t)
        st.delivered += pkt.payload
        if st.delivered + st.dropped == st.size:
            self._done(st, t)
