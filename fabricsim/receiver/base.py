"""Contract of a receiver model: what the destination NIC does with each arriving data packet.

The base class does what every RoCE responder does; a model only decides what happens to a
packet that arrives ahead of a gap (``on_gap``). Per data unit, in :meth:`Receiver.on_packet`:

1. record its one-way latency (first bit sent to last bit received) in the latency histogram;
2. ECN: count a CE mark, and if the congestion-control algorithm uses CNPs
   (``cnp_interval_ps``), send one unless one went out for this queue pair within that interval
   (DCQCN's notification point);
3. a unit below the in-order prefix, or already held, is a duplicate: counted, re-acknowledged;
4. reorder statistics: a unit arrived out of order if a unit of its queue pair sent after it
   arrived first; its *reorder distance* is the highest PSN received so far minus its own last PSN
   (for first transmissions: how many PSNs sent after it overtook it);
5. the unit that fills the head of the prefix is accepted and the prefix advances over every held
   unit it joins (each released unit's wait is its *reorder delay*); a unit beyond a gap goes to
   the model's ``on_gap``, which holds it (direct placement, reorder buffer) or discards it
   (go-back-N, full reorder buffer);
6. acknowledge. With ``ack_every: 1`` every unit is acknowledged at once: the ACK carries the
   cumulative PSN, the PSN of the unit that triggered it (-1 if it was not accepted), that
   unit's send time, the ECN marks since the last ACK and the unit's telemetry; a duplicate is
   re-acknowledged (with its PSN and send time, a D-SACK, outside the legacy set-up). With
   ``ack_every > 1`` (:meth:`Receiver.on_packet_coalesced`) ACKs are coalesced: sent on AckReq
   units, at completion, on duplicates, for overtaken units and by a delayed-ACK timer, each
   carrying a SACK bitmap of the held units (see :class:`TransportParams`).

A message is complete when all of its bytes have been accepted.
"""
from __future__ import annotations

from math import log
from typing import Literal, Optional

from pydantic import Field, model_validator

from ..config.types import PositiveSize, PositiveTime
from ..net.packet import ACK, CNP, NAK, Packet
from ..registry import Registry
from ..routing.base import PolicyParams

RECEIVERS: Registry = Registry("receiver model", group="fabricsim.receivers")


class TransportParams(PolicyParams):
    """Acknowledgement and loss-recovery parameters, shared by every receiver model.

    Two retransmission-timer modes (``rto_mode``):

    ``fixed`` (default; IRN, Mittal et al. SIGCOMM 2018)
        ``rto_low`` with at most ``rto_low_packets`` units in flight, else ``rto_high``; on expiry
        every outstanding unit is presumed lost (selective) or the sender rewinds (go-back-N).
    ``adaptive`` (ConnectX-like adaptive retransmission; RFC 8985 tail-loss probe)
        the k-th consecutive timeout without progress waits ``R_k = min(rto_max, B * 2**k)``
        stretched by a counter-based random factor in ``[1, 1 + rto_jitter)`` (drawn at the first
        send and after each expiry), where
        ``B = max(rto_min, srtt + rto_rttvar_mult * rttvar)`` (RFC 6298 estimators from the ACKs'
        echoed send times; by default no floor for selective receivers, 4 for go-back-N; before
        the first RTT sample ``B = max(rto_min, 2 x the idle round trip)``). On
        expiry a selective sender resends one unit, the lowest unacknowledged PSN (a probe): its
        ACK (or D-SACK, if the original was only delayed) carries its send time, which lets RACK
        declare every unit sent ``reorder_window`` before it lost. A go-back-N sender rewinds to
        the acknowledged prefix. NVIDIA publishes no figures for its firmware's adaptive
        retransmission: ``rto_min``, ``rto_jitter`` and ``rto_max`` are [EST].

    ACK coalescing (``ack_every > 1``): the sender requests an ACK (BTH AckReq) on the unit that
    carries every ``ack_every``-th PSN and on the last unit of the queue pair; the receiver
    acknowledges on an AckReq, at the end of the queue pair, on a duplicate (D-SACK) and once no
    unit of the queue pair has arrived for ``ack_delay`` (an idle delayed-ACK timer, so a window
    smaller than ``ack_every`` units cannot stall; a stream that keeps arriving is acknowledged by
    its AckReq units). A coalesced ACK carries a bitmap of the
    ``sack_bitmap`` units beyond the cumulative PSN (set: held), and the latest send time among the
    units it covers, which feeds RACK; the sender presumes nothing lost beyond the bitmap's reach.
    """

    ack_every: int = Field(1, ge=1, le=1024, description=(
        "ACK coalescing: the sender requests an ACK every this many PSNs and on the last unit; 1 = every "
        "unit is acknowledged at once, as HPCC ns-3"))
    ack_delay: PositiveTime = Field("2us", description=(
        "delayed-ACK timer with ack_every > 1: an ACK once no unit of the queue pair has arrived for this "
        "long (idle timer) [EST]"))
    sack_bitmap: int = Field(256, ge=8, le=4096, description=(
        "units beyond the cumulative PSN a coalesced ACK reports in its SACK bitmap (IRN sizes its bitmap "
        "to the BDP) [EST]; the ACK grows by ceil(sack_bitmap / 8) bytes"))
    ack_size: PositiveSize = Field("86B", description=(
        "wire bytes of an ACK/NAK/CNP: Eth 14 + IPv4 20 + UDP 8 + BTH 12 + AETH 4 + ICRC 4 + FCS 4 + "
        "preamble/IFG 20"))
    rto_mode: Literal["fixed", "adaptive"] = Field("fixed", description=(
        "retransmission timer: 'fixed' = IRN's rto_low / rto_high; 'adaptive' = ConnectX-like randomised "
        "microsecond timeout with exponential back-off and an RTT floor, resending one probe unit"))
    rto_low: PositiveTime = Field("100us", description="fixed mode: timeout with few units in flight (IRN)")
    rto_high: PositiveTime = Field("320us", description="fixed mode: timeout otherwise (IRN)")
    rto_low_packets: int = Field(3, ge=0, description="fixed mode: 'few units in flight' for rto_low (IRN: 3)")
    rto_min: PositiveTime = Field("4us", description=(
        "adaptive mode: first timeout before back-off [EST] (IBTA's smallest Local ACK Timeout is 8.192 us)"))
    rto_max: PositiveTime = Field("1ms", description="adaptive mode: cap of the backed-off timeout [EST]")
    rto_jitter: float = Field(0.5, ge=0, le=4, description=(
        "adaptive mode: each timeout is stretched by a uniform random factor in [1, 1 + rto_jitter) [EST]"))
    rto_rttvar_mult: Optional[int] = Field(None, ge=0, le=64, description=(
        "adaptive mode: RTT floor of the timeout, srtt + this x rttvar (RFC 6298: 4); 0 = no floor; "
        "default: 4 for go-back-N (a timeout resends the whole window), 0 for selective receivers (a timeout "
        "resends one probe unit, and the back-off bounds the probes spent on a long queue)"))
    reorder_window: PositiveTime = Field("5us", description=(
        "RACK reorder window: a unit is presumed lost once a unit sent this much later is acknowledged "
        "[EST]; must exceed the fabric's path-delay spread or reordering causes spurious retransmissions"))
    retry_limit: int = Field(7, ge=0, le=1000, description=(
        "consecutive timeouts without progress before the message fails (RoCE retry_cnt <= 7)"))

    @model_validator(mode="after")
    def _timeouts(self):
        if self.rto_min > self.rto_max:
            raise ValueError(f"rto_min: {self.rto_min / 1e6:g} us exceeds rto_max ({self.rto_max / 1e6:g} us) "
                             f"(allowed: rto_min <= rto_max)")
        return self

    @property
    def reports_duplicates(self) -> bool:
        """True if duplicates are acknowledged with their PSN and send time (D-SACK). Off only in the
        legacy set-up (one ACK per unit, fixed timeouts), whose results stay as they were."""
        return self.ack_every > 1 or self.rto_mode != "fixed"



def record_reorder(qp, st, pkt, end: int) -> None:
    """Reorder statistics of a first-time unit ending at PSN ``end`` (module doc, step 4): out of
    order if a unit of its queue pair sent after it arrived first; its reorder distance is the
    highest PSN received so far minus its own last PSN. The one definition for every receive path
    (RoCE receivers and the NVLink destination)."""
    if pkt.t_tx < qp.r_maxt:
        st.ooo_units += 1
        d = qp.r_max - end
        if d < 0:
            d = 0
        h = st.reorder_hist
        h[d] = h.get(d, 0) + 1
    else:
        qp.r_maxt = pkt.t_tx
    if end > qp.r_max:
        qp.r_max = end


def ack_requested(seq: int, end: int, cum: int, npsn: int, ack_every: int) -> bool:
    """ACK coalescing: True if the unit of PSNs ``[seq, end)``, accepted or held with the in-order
    prefix now at ``cum``, is acknowledged at once: it carries a PSN ``p`` with
    ``(p + 1) % ack_every == 0`` or the queue pair's last PSN (the sender's AckReq), or the prefix
    has reached the end of the queue pair's ``npsn`` PSNs. Otherwise the delayed-ACK timer covers
    it. The one definition for both kernels (the compiled core compiles it from this source).

    >>> [ack_requested(p, p + 1, p + 1, 200, 64) for p in (0, 62, 63, 127, 199)]
    [False, False, True, True, True]
    """
    return end // ack_every > seq // ack_every or end >= npsn or cum >= npsn


class HostRx:
    """Live per-host receive state that spans queue pairs: reorder-buffer occupancy."""

    __slots__ = ("hold", "peak_hold")

    def __init__(self):
        self.hold = 0
        self.peak_hold = 0


class Receiver:
    Params = TransportParams
    #: True if the model accepts packets in any order
    accepts_out_of_order = True
    #: True if the sender recovers losses selectively (SACK + RACK); False: go-back-N
    selective = True

    def __init__(self, params, engine):
        self.params = params
        self.engine = engine
        rec = engine.recorder
        self._hist = rec.latency.counts
        self._inv = rec.latency.inv_log_base
        self._series = rec.goodput
        self._bin = rec.goodput_bin_ps
        self._done = engine.message_done
        self._rec = rec
        self.mtu = engine.mtu
        self.cell = engine.cell
        self.seg = engine.mtu * engine.cell
        self.ack_every = params.ack_every
        self.ack_size = params.ack_size
        self.cnp_interval = engine.cc.cnp_interval_ps
        self.hosts: dict[int, HostRx] = {}
        #: ACK coalescing: AckReq every ``ack_every`` PSNs, SACK ranges, delayed-ACK timer
        self.coalesce = params.ack_every > 1
        #: duplicates are reported with their PSN and send time (D-SACK); off only in the legacy set-up
        #: (one ACK per unit and fixed timeouts), whose results stay as before
        self.dsack = params.reports_duplicates
        self.ack_delay = params.ack_delay
        self.sack_units = params.sack_bitmap
        self.sack_bytes = -(-params.sack_bitmap // 8)
        self.reo = params.reorder_window
        self.kernel = engine.kernel
        if self.coalesce:
            self.on_packet = self.on_packet_coalesced
        else:
            self.send = self.send_now         # (skips a call per ACK on the hot path)

    def host(self, h: int) -> HostRx:
        hr = self.hosts.get(h)
        if hr is None:
            hr = self.hosts[h] = HostRx()
        return hr

    # ----------------------------------------------------------------- control packets
    def send(self, t, qp, kind, seq, trigger):
        """Send a control packet for ``qp`` from its receiver back to its sender (with ACK
        coalescing an ACK is built by :meth:`ack`, which acknowledges ``qp.r_cum``)."""
        if kind == ACK and self.coalesce:
            self.ack(t, qp, None)
            return
        self.send_now(t, qp, kind, seq, trigger)

    def send_now(self, t, qp, kind, seq, trigger):
        """A control packet in the per-unit format: an ACK names its ``trigger`` unit (``sack``)."""
        pkt = Packet(qp, qp.src, self.ack_size, 0, seq, t, 1, None, kind)
        pkt.sacks = None
        pkt.dsack = -1
        if trigger is not None:
            pkt.sack = trigger.seq if kind == ACK else -1
            pkt.t_data = trigger.t_tx
            pkt.tel = trigger.tel
        else:
            pkt.sack = -1
        if kind == ACK:
            pkt.ce = qp.r_ce
            qp.r_ce = 0
            qp.r_unacked = 0
            qp.r_acks += 1
        port = qp.r_port or self.engine.reply_nic(qp)
        port.send_ctrl(t, pkt)
        st = qp.msg
        if kind == ACK:
            st.acks += 1
        elif kind == NAK:
            st.naks_sent += 1
        else:
            st.cnps_sent += 1

    # ----------------------------------------------------------------- data
    def on_packet(self, t, pkt):
        npk = pkt.npk
        self._hist[int(log(t - pkt.t_tx) * self._inv)] += npk
        qp = pkt.qp
        st = qp.msg
        if pkt.ce:
            self._marked(t, qp, st, npk)
        seq = pkt.seq
        cum = qp.r_cum
        rset = qp.r_set
        if seq < cum or (rset and seq in rset):
            st.dup_bytes += pkt.payload
            if self.dsack:
                self.send_dsack(t, qp, pkt)
            else:
                self.send(t, qp, ACK, cum, None)
            return
        st.rx_units += 1
        end = seq + npk
        record_reorder(qp, st, pkt, end)
        if seq == cum:
            self.accept(t, pkt, st)
            cum = end
            if rset:
                cum = self._join_held(t, qp, st, rset, cum)
            qp.r_cum = cum
            qp.r_nak = False
            qp.r_unacked += 1
            if qp.r_unacked >= self.ack_every or cum >= qp.npsn or rset:
                self.send(t, qp, ACK, cum, pkt)
        elif self.on_gap(t, qp, pkt):
            self._hold(t, qp, st, pkt)
            self.send(t, qp, ACK, cum, pkt)
        if st.delivered >= st.size and not st.done:
            self._done(st, t)

    def send_dsack(self, t, qp, dup):
        """Acknowledge a duplicate at once, naming it (D-SACK, RFC 2883) with its send time: the
        sender learns that a resend was spurious, and a timeout probe's duplicate lets RACK see that
        everything sent well before the probe is lost."""
        pkt = Packet(qp, qp.src, self.ack_size, 0, qp.r_cum, t, 1, None, ACK)
        pkt.sacks = None
        pkt.sack = -1
        pkt.dsack = dup.seq
        pkt.t_data = dup.t_tx
        pkt.tel = dup.tel
        pkt.ce = qp.r_ce
        qp.r_ce = 0
        qp.r_unacked = 0
        qp.r_acks += 1
        port = qp.r_port or self.engine.reply_nic(qp)
        port.send_ctrl(t, pkt)
        qp.msg.acks += 1

    def ack(self, t, qp, dup):
        """Coalesced ACK of ``qp``: the cumulative PSN; a bitmap of the units held beyond it (bit
        ``i``: the unit at PSN ``cum + i * cell``, for ``i < sack_bitmap``); the latest send time
        among the units received since the last ACK; the ECN marks since the last ACK and the
        latest unit's telemetry. ``dup``, if given, is a duplicate that forced the ACK: it is named
        (D-SACK) in an ACK of its own, with its send time.

        The bitmap describes everything held, not just what arrived since the previous ACK, so an
        ACK overtaken by a later one (ACKs are sprayed too) or lost costs nothing."""
        if dup is not None and qp.r_unacked:
            self.ack(t, qp, None)             # the units since the last ACK first, then the D-SACK alone
        bm = 0
        rset = qp.r_set
        if rset:
            cum = qp.r_cum
            cell = self.cell
            lim = cum + self.sack_units * cell
            if cell == 1:
                for p in rset:
                    if p < lim:
                        bm |= 1 << (p - cum)
            else:
                for p in rset:
                    if p < lim:
                        bm |= 1 << ((p - cum) // cell)
        pkt = Packet(qp, qp.src, self.ack_size + self.sack_bytes, 0, qp.r_cum, t, 1, None, ACK)
        pkt.sack = -1
        pkt.sacks = bm
        if dup is not None:
            pkt.dsack = dup.seq
            pkt.t_data = dup.t_tx
            pkt.tel = dup.tel
        else:
            pkt.dsack = -1
            pkt.t_data = qp.r_tack
            pkt.tel = qp.r_tel
            if qp.r_tack > qp.r_tsent:
                qp.r_tsent = qp.r_tack
        pkt.ce = qp.r_ce
        qp.r_ce = 0
        port = qp.r_port or self.engine.reply_nic(qp)
        port.send_ctrl(t, pkt)
        qp.r_unacked = 0
        qp.r_tack = -1
        qp.r_tel = None
        qp.r_acks += 1
        qp.msg.acks += 1

    def _on_ack_timer(self, t, arg):
        """Delayed-ACK timer: acknowledge once no unit of the queue pair has arrived for ``ack_delay``."""
        qp, token = arg
        if qp.r_acks != token or not qp.r_unacked:
            return                            # an ACK went out since: it covered these units
        due = qp.r_last_rx + self.ack_delay
        if t < due:
            self.kernel.schedule(due, self._on_ack_timer, arg)
            return
        self.ack(t, qp, None)

    def on_packet_coalesced(self, t, pkt):
        """:meth:`on_packet` with ACK coalescing (``ack_every > 1``): the same accounting, but the
        unit is acknowledged at once only if it requests an ACK (it carries a PSN ``p`` with
        ``(p + 1) % ack_every == 0``, or the queue pair's last PSN), completes the queue pair, is a duplicate (D-SACK) or
        was sent more than ``reorder_window`` before a unit an earlier ACK reported (the sender's
        RACK presumes it lost: it is acknowledged by name); otherwise the delayed-ACK timer covers it."""
        npk = pkt.npk
        self._hist[int(log(t - pkt.t_tx) * self._inv)] += npk
        qp = pkt.qp
        st = qp.msg
        if pkt.ce:
            self._marked(t, qp, st, npk)
        seq = pkt.seq
        cum = qp.r_cum
        rset = qp.r_set
        if seq < cum or (rset and seq in rset):
            st.dup_bytes += pkt.payload
            self.ack(t, qp, pkt)
            return
        st.rx_units += 1
        end = seq + npk
        record_reorder(qp, st, pkt, end)
        if seq == cum:
            self.accept(t, pkt, st)
            cum = end
            if rset:
                cum = self._join_held(t, qp, st, rset, cum)
            qp.r_cum = cum
            qp.r_nak = False
        elif self.on_gap(t, qp, pkt):
            self._hold(t, qp, st, pkt)
        else:
            if st.delivered >= st.size and not st.done:
                self._done(st, t)
            return
        if pkt.t_tx < qp.r_tsent - self.reo:
            # an ACK already told the sender of a unit sent reorder_window after this one: its RACK
            # has presumed this one lost. Acknowledge it at once, by name, so a resend not yet made
            # is cancelled and a spurious one is seen at once (the reorder window widens).
            if qp.r_unacked:
                self.ack(t, qp, None)
            self.send_now(t, qp, ACK, qp.r_cum, pkt)
            if st.delivered >= st.size and not st.done:
                self._done(st, t)
            return
        if pkt.t_tx > qp.r_tack:
            qp.r_tack = pkt.t_tx
            qp.r_tel = pkt.tel
        qp.r_last_rx = t
        qp.r_unacked += 1
        if ack_requested(seq, end, cum, qp.npsn, self.ack_every):
            self.ack(t, qp, None)
        elif qp.r_unacked == 1:
            self.kernel.schedule(t + self.ack_delay, self._on_ack_timer, (qp, qp.r_acks))
        if st.delivered >= st.size and not st.done:
            self._done(st, t)

    def _marked(self, t, qp, st, npk: int) -> None:
        """A CE-marked unit arrived (module doc, step 2): count it, and send a CNP unless one went
        out for this queue pair within ``cnp_interval`` (DCQCN's notification point)."""
        st.ecn_marked += npk
        qp.r_ce += npk
        if self.cnp_interval is not None:
            last = qp.r_last_cnp
            if last is None or t - last >= self.cnp_interval:
                qp.r_last_cnp = t
                self.send(t, qp, CNP, 0, None)

    def _hold(self, t, qp, st, pkt) -> None:
        """Keep a unit that arrived beyond a gap (placed or buffered: it counts as delivered) until
        the prefix reaches it; track the queue pair's and the host's held bytes and their peaks."""
        rset = qp.r_set
        if rset is None:
            qp.r_set = rset = set()
            qp.r_arr = {}
        rset.add(pkt.seq)
        qp.r_arr[pkt.seq] = t
        p = pkt.payload
        qp.r_hold += p
        if qp.r_hold > st.peak_hold:
            st.peak_hold = qp.r_hold
        hr = self.hosts.get(qp.dst) or self.host(qp.dst)
        hr.hold += p
        if hr.hold > hr.peak_hold:
            hr.peak_hold = hr.hold
        self.accept(t, pkt, st)

    def _join_held(self, t, qp, st, rset, cum: int) -> int:
        """Advance the in-order prefix from ``cum`` over the held units it now reaches (each
        released unit's wait is its reorder delay); returns the new prefix."""
        cell = self.cell
        arr = qp.r_arr
        hr = self.hosts[qp.dst]
        while cum in rset:
            rset.discard(cum)
            p = qp.size - cum * self.mtu
            if p > self.seg:
                p = self.seg
            qp.r_hold -= p
            hr.hold -= p
            w = t - arr.pop(cum)
            st.reorder_wait_ps += w
            if w > st.reorder_wait_max_ps:
                st.reorder_wait_max_ps = w
            cum += cell
        return cum if cum <= qp.npsn else qp.npsn

    def accept(self, t, pkt, st):
        """The unit's payload is in (placed, buffered or delivered): goodput."""
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

    def on_gap(self, t, qp, pkt) -> bool:  # pragma: no cover - abstract
        """A unit arrived beyond a gap in the prefix: True to hold it, False to discard it."""
        raise NotImplementedError


#: what a plug-in of this family must be (fabricsim/registry.py, Registry.discover)
RECEIVERS.accepts(Receiver, "a Receiver subclass")
