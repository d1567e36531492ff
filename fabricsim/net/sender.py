"""Sender side of the transport: acknowledgements, loss detection, retransmission, CC hooks.

Every queue pair keeps the sender state of a RoCE requester (see :class:`~fabricsim.net.packet.QueuePair`).
What the sender does with each control packet from the receiver:

ACK (cumulative PSN ``seq``, the PSN ``sack`` of the unit that triggered it, or -1, its send time,
echoed ECN marks and telemetry)
    acknowledges everything below ``seq`` and, selectively, ``sack``; frees that many bytes of the
    window; then runs RACK-style loss detection (Cheng et al., RFC 8985, time-based): a unit still
    unacknowledged although a unit sent more than ``reorder_window`` after it has been
    acknowledged is presumed lost and queued for retransmission (cause ``sack``). The reorder
    window keeps spraying's reordering from being mistaken for loss; when an ACK shows that the
    original copy of a resent unit arrived after all, the queue pair doubles its window (up to 16x),
    as RACK does on a DSACK.
NAK (go-back-N receivers; ``seq`` = the expected PSN)
    acknowledges everything below ``seq`` and rewinds: the sender resends from ``seq`` (cause
    ``nak``). A NAK triggered by a unit sent before the last rewind is stale and ignored (the
    rewind already covers it).
CNP
    calls the congestion-control algorithm's ``on_cnp`` (DCQCN's reaction point).

A retransmission timer per queue pair (IRN, Mittal et al. SIGCOMM 2018: ``rto_low`` when at most
``rto_low_packets`` units are in flight, else ``rto_high``) fires when nothing was acknowledged
for that long: every outstanding unit is presumed lost (selective receivers) or the sender
rewinds to the acknowledged prefix (go-back-N); cause ``timeout``. After ``retry_limit``
consecutive timeouts without progress the message fails with reason ``retry_exceeded`` (as a RoCE
QP goes to the error state after retry_cnt).
"""
from __future__ import annotations

from ..cc.base import AckInfo, CongestionControl
from .packet import ACK, CNP, NAK


class Sender:
    def __init__(self, engine, params, cc, selective: bool):
        self.engine = engine
        self.kernel = engine.kernel
        self.mtu = engine.mtu
        self.cell = engine.cell
        self.seg = engine.mtu * engine.cell
        self.cc = cc
        self.selective = selective          # False: go-back-N
        self.reo = params.reorder_window
        self.rto_low = params.rto_low
        self.rto_high = params.rto_high
        self.rto_low_units = params.rto_low_packets
        self.retry_limit = params.retry_limit
        self._cc_ack = cc.on_ack if type(cc).on_ack is not CongestionControl.on_ack else None
        self._cc_done = cc.on_done if type(cc).on_done is not CongestionControl.on_done else None
        self.timeouts = 0
        self.naks_ignored = 0
        self.spurious = 0                   # retransmissions found spurious (window widened)
        self.reo_max = 16 * params.reorder_window

    # ----------------------------------------------------------------- helpers
    def payload(self, qp, psn: int) -> int:
        p = qp.size - psn * self.mtu
        return p if p < self.seg else self.seg

    def rto(self, qp) -> int:
        return self.rto_low if len(qp.outstanding) <= self.rto_low_units else self.rto_high

    def arm(self, qp, t):
        """Start the retransmission timer of ``qp`` (called when it sends with no timer running)."""
        qp.rto_armed = True
        qp.rto_at = t + self.rto(qp)
        self.kernel.schedule(qp.rto_at, self._on_rto, qp)

    def kick(self, t, qp):
        for nic in qp.nics:
            nic.add(t, qp)

    # ----------------------------------------------------------------- control packets
    def on_ctrl(self, t, pkt):
        kind = pkt.kind
        qp = pkt.qp
        if qp.sent_done:
            return
        if kind == ACK:
            self._on_ack(t, qp, pkt)
        elif kind == NAK:
            self._on_nak(t, qp, pkt)
        elif kind == CNP:
            qp.msg.cnps += 1
            self.cc.on_cnp(qp.flow, t)

    def _advance(self, t, qp, cum: int) -> int:
        """Cumulative acknowledgement up to ``cum``: bytes newly acknowledged."""
        newly = 0
        if cum > qp.una:
            psn = qp.una
            sacked = qp.sacked
            lost = qp.lost
            cell = self.cell
            while psn < cum:
                if psn in sacked:
                    sacked.discard(psn)
                elif psn in lost:
                    lost.discard(psn)         # presumed lost, arrived after all: nothing to free
                else:
                    newly += self.payload(qp, psn)
                psn += cell
            qp.una = cum
            qp.timeouts = 0
            qp.rto_at = t + self.rto(qp)
            flow = qp.flow
            end = cum * self.mtu
            flow.acked_bytes = end if end < qp.size else qp.size
        return newly

    def _on_ack(self, t, qp, pkt):
        newly = self._advance(t, qp, pkt.seq)
        s = pkt.sack
        lost = qp.lost
        if s >= 0:
            if s >= qp.una and s not in qp.sacked:
                qp.sacked.add(s)
                if s in lost:
                    lost.discard(s)
                else:
                    newly += self.payload(qp, s)
            if pkt.t_data > qp.rack_t:
                qp.rack_t = pkt.t_data
            r = qp.resent.get(s)
            if r is not None and pkt.t_data < r:
                # the original copy of a unit we resent has arrived: the retransmission was
                # spurious, reordering exceeded the window. Widen it (RACK's DSACK adaptation).
                qp.reo = min(2 * (qp.reo or self.reo), self.reo_max)
                self.spurious += 1
        qp.out_bytes -= newly
        if newly:
            qp.timeouts = 0                   # progress (cumulative or selective) restarts the timer
            qp.rto_at = t + self.rto(qp)
        found = False
        if self.selective:
            limit = qp.rack_t - (qp.reo or self.reo)
            out = qp.outstanding
            una = qp.una
            sacked = qp.sacked
            resent = qp.resent
            while out:
                psn, ts = out[0]
                if psn < una or psn in sacked or (psn in resent and resent[psn] != ts) or psn in lost:
                    out.popleft()             # acknowledged, or a stale copy of a resent unit
                    continue
                if ts >= limit:
                    break
                out.popleft()
                lost.add(psn)
                qp.out_bytes -= self.payload(qp, psn)
                qp.rtx.append((psn, "sack"))
                found = True
        else:
            out = qp.outstanding
            while out and out[0][0] < qp.una:
                out.popleft()
        if qp.una >= qp.npsn:
            self._finish(t, qp)
            return
        if self._cc_ack is not None:
            end = pkt.seq * self.mtu
            self._cc_ack(qp.flow, t, AckInfo(end if end < qp.size else qp.size, newly, pkt.ce, pkt.tel,
                                             t - pkt.t_data))
        if found or newly:
            self.kick(t, qp)

    def _on_nak(self, t, qp, pkt):
        e = pkt.seq
        newly = self._advance(t, qp, e)
        qp.msg.naks += 1
        if pkt.t_data < qp.goback_t:
            self.naks_ignored += 1           # triggered by a unit sent before the last rewind
            return
        if e < qp.seq:
            self._rewind(t, qp, e, "nak")
        else:
            qp.out_bytes -= newly
        if self._cc_ack is not None:
            end = e * self.mtu
            self._cc_ack(qp.flow, t, AckInfo(end if end < qp.size else qp.size, newly, pkt.ce, pkt.tel,
                                             t - pkt.t_data))
        self.kick(t, qp)

    def _rewind(self, t, qp, psn, cause):
        qp.seq = psn
        qp.gb_cause = cause
        qp.goback_t = t
        qp.outstanding.clear()
        qp.rtx.clear()
        qp.lost.clear()
        qp.out_bytes = 0

    def _finish(self, t, qp):
        qp.sent_done = True
        qp.out_bytes = 0
        flow = qp.flow
        flow.active = False
        if self._cc_done is not None:
            self._cc_done(flow, t)

    # ----------------------------------------------------------------- timer
    def _on_rto(self, t, qp):
        if qp.sent_done or qp.una >= qp.high and not qp.rtx and qp.seq >= qp.npsn:
            qp.rto_armed = False
            return
        if qp.una >= qp.high:                  # nothing in flight (waiting for the window or pacing)
            qp.rto_armed = False
            return
        if t < qp.rto_at:
            self.kernel.schedule(qp.rto_at, self._on_rto, qp)
            return
        qp.timeouts += 1
        self.timeouts += 1
        if qp.timeouts > self.retry_limit:
            qp.rto_armed = False
            self.engine.fail_qp(qp, t, "retry_exceeded")
            return
        if self.selective:
            lost = qp.lost
            una = qp.una
            sacked = qp.sacked
            resent = qp.resent
            for psn, ts in qp.outstanding:
                if psn < una or psn in sacked or psn in lost or (psn in resent and resent[psn] != ts):
                    continue
                lost.add(psn)
                qp.out_bytes -= self.payload(qp, psn)
                qp.rtx.append((psn, "timeout"))
            qp.outstanding.clear()
        else:
            self._rewind(t, qp, qp.una, "timeout")
        qp.rto_at = t + self.rto(qp)
        self.kernel.schedule(qp.rto_at, self._on_rto, qp)
        self.kick(t, qp)
