"""Lossless switching with PFC (IEEE 802.1Qbb): explicit egress queues that can be paused.

With ``switch.pfc.enabled`` a switch port can stop in the middle of its queue, so departures are
no longer known when a packet is enqueued (Lindley's recursion, used in lossy mode, does not
apply). Each switch egress port here is a :class:`LosslessPort` with two FIFOs: control packets
(ACK, NAK, CNP; strict priority, never paused) and data (the lossless class). The port sends one
packet at a time; each departure is an event (``_done``) that releases the packet's bytes and
starts the next one.

Accounting is per ingress link, as in a switch MMU: the bytes a switch holds that arrived over link
``L`` are ``L.ingress_bytes`` (on the upstream port object of ``L``). When they exceed ``xoff``
the switch sends XOFF to the upstream transmitter, which stops sending data once its current
packet is out, ``L.delay`` later (the pause frame's flight). When they fall to ``xon`` or below
it sends XON. Nothing is dropped. Congestion spreading and head-of-line blocking are not
scripted: a paused port stops every flow queued behind it, its own queue then grows and pauses
the links feeding it, and so on towards the senders.

A NIC port is paused the same way: the NIC simply sends nothing new until XON (control packets
still go out). Adaptive routing sees a paused port as badly congested (its ``busy_until`` is
pushed a second into the future while paused).
"""
from __future__ import annotations

from collections import deque

from .port import PS_BITS, Port
from .switch import Switch

PAUSED_PENALTY_PS = 10**12   # added to a paused port's busy_until, so adaptive routing avoids it


class LosslessPort(Port):
    __slots__ = ("q", "cq", "qbytes", "sending", "cur", "ingress_bytes", "xoff_sent", "pfc", "nic", "_done_cb")

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.q = deque()          # data packets waiting
        self.cq = deque()         # control packets waiting (strict priority, never paused)
        self.qbytes = 0           # bytes queued, including the packet being sent
        self.sending = False
        self.cur = None
        self.ingress_bytes = 0    # bytes the peer switch holds that arrived over this link
        self.xoff_sent = False    # the peer has paused this port
        self.pfc = None
        self.nic = None
        self._done_cb = self._done

    def queued_bytes(self, t: int) -> int:
        return self.qbytes

    def enqueue(self, t, pkt):
        wire = pkt.wire
        self.qbytes += wire
        self.busy_until = (self.busy_until if self.busy_until > t else t) + self.ser_ps(wire)
        if self.qbytes * PS_BITS // self.rate > self.peak_ps:
            self.peak_ps = self.qbytes * PS_BITS // self.rate
        if pkt.kind:
            self.cq.append(pkt)
        else:
            self.q.append(pkt)
        if not self.sending:
            self._start(t)

    def _start(self, t):
        if self.cq:
            pkt = self.cq.popleft()
        elif self.q and not self.paused:
            pkt = self.q.popleft()
        else:
            self.sending = False
            return
        self.sending = True
        self.cur = pkt
        wire = pkt.wire
        done = t + self.ser_ps(wire)
        self.tx_bytes += wire
        self.tx_packets += pkt.npk
        pfc = self.pfc
        if pkt.kind:
            self.ctrl_bytes += wire
        elif pfc.stamp:
            tel = pkt.tel
            if tel is None:
                pkt.tel = tel = []
            tel.append((done, self.tx_bytes, self.qbytes - wire, self.rate, self.index))
        pfc.push((done, next(pfc.seq), self._done_cb, self))

    def _done(self, t, _):
        pkt = self.cur
        self.cur = None
        self.qbytes -= pkt.wire
        ing = pkt.inport
        if ing is not None:
            pkt.inport = None
            ing.ingress_bytes -= pkt.wire
            if ing.xoff_sent and ing.ingress_bytes <= self.pfc.xon:
                ing.xoff_sent = False
                self.pfc.signal(t, ing, False)
        entry = (t + self.offset, next(self.pfc.seq), self.deliver, pkt)
        pkt.hop = self
        inflight = self.inflight
        inflight.append(entry)
        if len(inflight) == 1:
            self.pfc.push(entry)
        self._start(t)


class Pfc:
    """The PFC control plane of one simulation: thresholds, pause and resume of transmitters."""

    def __init__(self, cfg, kernel, stamp: bool):
        self.xoff = cfg.xoff
        self.xon = cfg.xon
        self.kernel = kernel
        self.push = kernel.push
        self.seq = kernel.seq
        self.stamp = stamp
        self.pauses = 0

    def signal(self, t, port, pause: bool):
        """The peer of ``port`` sends XOFF (pause) or XON; it takes effect one link delay later."""
        self.kernel.schedule(t + port.delay, self._apply_pause if pause else self._apply_resume, port)

    def _apply_pause(self, t, port):
        if port.paused:
            return
        port.paused = True
        port.pause_events += 1
        port.paused_since = t
        self.pauses += 1
        if port.nic is None:
            port.busy_until += PAUSED_PENALTY_PS

    def _apply_resume(self, t, port):
        if not port.paused:
            return
        port.paused = False
        port.paused_ps += t - port.paused_since
        if port.nic is not None:
            port.nic.kick(t)
        else:
            port.busy_until = t + port.ser_ps(port.qbytes)
            if not port.sending:
                port._start(t)


class LosslessSwitch(Switch):
    """A switch whose egress ports are :class:`LosslessPort` (see module doc)."""

    __slots__ = ("pfc",)

    def arrive(self, t, pkt):
        ing = pkt.hop
        inflight = ing.inflight
        inflight.popleft()
        if inflight:
            self.push(inflight[0])
        route = self.route.get(pkt.dst) or self.lookup(pkt.dst)
        port = route[0] or self.choose(self, route[1], pkt, t)
        if not pkt.kind:
            kmin = self.kmin
            if kmin is not None and port.qbytes > kmin and self.mark(port.qbytes):
                pkt.ce = 1
                port.ecn_marks += 1
            pkt.inport = ing
            ing.ingress_bytes += pkt.wire
            if not ing.xoff_sent and ing.ingress_bytes > self.pfc.xoff:
                ing.xoff_sent = True
                self.pfc.signal(t, ing, True)
        port.enqueue(t, pkt)
