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
6. acknowledge: an ACK carries the cumulative PSN, the PSN of the unit that triggered it (-1 if
   it was not accepted), that unit's send time, the ECN marks since the last ACK and the
   unit's telemetry. One ACK per ``ack_every`` accepted in-order units; out-of-order,
   duplicate and last units are acknowledged at once.

A message is complete when all of its bytes have been accepted.
"""
from __future__ import annotations

from math import log

from pydantic import Field

from ..config.types import PositiveSize, PositiveTime
from ..net.packet import ACK, CNP, NAK, Packet
from ..registry import Registry
from ..routing.base import PolicyParams

RECEIVERS: Registry = Registry("receiver model")


class TransportParams(PolicyParams):
    """Acknowledgement and loss-recovery parameters, shared by every receiver model."""

    ack_every: int = Field(1, ge=1, le=1024, description=(
        "one ACK per this many data units accepted in order (coalescing); 1 = every unit, as HPCC ns-3"))
    ack_size: PositiveSize = Field("86B", description=(
        "wire bytes of an ACK/NAK/CNP: Eth 14 + IPv4 20 + UDP 8 + BTH 12 + AETH 4 + ICRC 4 + FCS 4 + "
        "preamble/IFG 20"))
    rto_low: PositiveTime = Field("100us", description="retransmission timeout with few units in flight (IRN)")
    rto_high: PositiveTime = Field("320us", description="retransmission timeout otherwise (IRN)")
    rto_low_packets: int = Field(3, ge=0, description="'few units in flight' for rto_low (IRN: 3)")
    reorder_window: PositiveTime = Field("5us", description=(
        "RACK reorder window: a unit is presumed lost once a unit sent this much later is acknowledged "
        "[EST]; must exceed the fabric's path-delay spread or reordering causes spurious retransmissions"))
    retry_limit: int = Field(7, ge=0, le=1000, description=(
        "consecutive timeouts without progress before the message fails (RoCE retry_cnt <= 7)"))


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

    def host(self, h: int) -> HostRx:
        hr = self.hosts.get(h)
        if hr is None:
            hr = self.hosts[h] = HostRx()
        return hr

    # ----------------------------------------------------------------- control packets
    def send(self, t, qp, kind, seq, trigger):
        """Send a control packet for ``qp`` from its receiver back to its sender."""
        pkt = Packet(qp, qp.src, self.ack_size, 0, seq, t, 1, None, kind)
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
            st.ecn_marked += npk
            qp.r_ce += npk
            if self.cnp_interval is not None:
                last = qp.r_last_cnp
                if last is None or t - last >= self.cnp_interval:
                    qp.r_last_cnp = t
                    self.send(t, qp, CNP, 0, None)
        seq = pkt.seq
        cum = qp.r_cum
        rset = qp.r_set
        if seq < cum or (rset and seq in rset):
            st.dup_bytes += pkt.payload
            self.send(t, qp, ACK, cum, None)
            return
        st.rx_units += 1
        end = seq + npk
        if pkt.t_tx < qp.r_maxt:          # a unit sent after this one arrived first
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
        if seq == cum:
            self.accept(t, pkt, st)
            cum = end
            if rset:
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
                if cum > qp.npsn:
                    cum = qp.npsn
            qp.r_cum = cum
            qp.r_nak = False
            qp.r_unacked += 1
            if qp.r_unacked >= self.ack_every or cum >= qp.npsn or rset:
                self.send(t, qp, ACK, cum, pkt)
        elif self.on_gap(t, qp, pkt):
            if rset is None:
                qp.r_set = rset = set()
                qp.r_arr = {}
            rset.add(seq)
            qp.r_arr[seq] = t
            p = pkt.payload
            qp.r_hold += p
            if qp.r_hold > st.peak_hold:
                st.peak_hold = qp.r_hold
            hr = self.hosts.get(qp.dst) or self.host(qp.dst)
            hr.hold += p
            if hr.hold > hr.peak_hold:
                hr.peak_hold = hr.hold
            self.accept(t, pkt, st)
            self.send(t, qp, ACK, cum, pkt)
        if st.delivered >= st.size and not st.done:
            self._done(st, t)

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
