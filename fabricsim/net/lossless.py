"""Lossless switching with PFC (IEEE 802.1Qbb): explicit egress queues that can be paused.

With ``switch.pfc.enabled`` a switch port can stop in the middle of its queue, so departures are
no longer known when a packet is enqueued (Lindley's recursion, used in lossy mode, does not
apply). Each switch egress port here is a :class:`LosslessPort` with two FIFOs: the strict-priority
class (``switch.strict_priority``: CNPs by default; never paused) and the lossless class (data, and
ACK/NAK unless they are strict). The port sends one packet at a time; each departure is an event
(``_done``) that releases the packet's bytes and starts the next one. ECN (``sample: dequeue``)
and INT are decided when a packet starts to leave, from the bytes still queued behind it.

Accounting is per ingress link, as in a switch MMU: the lossless-class bytes a switch holds that
arrived over link ``L`` are ``L.ingress_bytes`` (on the upstream port object of ``L``). When they
exceed ``xoff`` the switch sends XOFF to the upstream transmitter, which stops sending lossless
traffic once its current packet is out, ``L.delay + response`` later (the pause frame's flight and
the peer's reaction time, ``switch.pfc.response``). When they fall to ``xon`` or below it sends
XON, which takes effect after the same delay. Nothing is dropped. Congestion spreading and
head-of-line blocking are not scripted: a paused port stops every flow queued behind it, its own
queue then grows and pauses the links feeding it, and so on towards the senders.

Headroom: each link records ``ingress_peak``, the most lossless bytes the downstream switch ever
held from it; :meth:`Pfc.headroom_bytes` is what the reference formula says the link needs above
``xoff`` (congestion-and-transport.md section 4): the packet that crosses xoff, the flight of the
pause frame and of the data already on the wire (2 x propagation), the switch's forwarding latency
(here ingress accounting happens after it, like a PHY/MAC pipeline delay), the peer's response
time, the frame the peer has started, and the pause frame itself (64 B + 20 B gap).

A NIC port is paused the same way: the NIC simply sends nothing new until XON (control packets
still go out). Adaptive routing sees a paused port as badly congested (its ``busy_until`` is
pushed a second into the future while paused).
"""
from __future__ import annotations

from collections import deque

from .port import PS_BITS, Port
from .switch import Switch

PAUSED_PENALTY_PS = 10**12   # added to a paused port's busy_until, so adaptive routing avoids it
PFC_FRAME_BYTES = 64 + 20    # a pause frame and its preamble + inter-frame gap


class LosslessPort(Port):
    __slots__ = ("q", "cq", "qbytes", "sending", "cur", "ingress_bytes", "ingress_peak", "xoff_sent", "pfc", "nic",
                 "_done_cb")

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.q = deque()          # lossless-class packets waiting (data; ACK/NAK unless strict)
        self.cq = deque()         # strict-priority packets waiting (never paused)
        self.qbytes = 0           # bytes queued, including the packet being sent
        self.sending = False
        self.cur = None
        self.ingress_bytes = 0    # bytes the peer switch holds that arrived over this link
        self.ingress_peak = 0     # most ingress_bytes ever (headroom use = ingress_peak - xoff)
        self.xoff_sent = False    # the peer has paused this port
        self.pfc = None
        self.nic = None
        self._done_cb = self._done

    def queued_bytes(self, t: int) -> int:
        return self.qbytes

    def enqueue(self, t, pkt, strict=None):
        """Queue ``pkt``: in the strict class if ``strict`` (default: control packets), else the lossless one."""
        wire = pkt.wire
        self.qbytes += wire
        self.busy_until = (self.busy_until if self.busy_until > t else t) + self.ser_ps(wire)
        if self.qbytes * PS_BITS // self.rate > self.peak_ps:
            self.peak_ps = self.qbytes * PS_BITS // self.rate
        if (pkt.kind != 0) if strict is None else strict:
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
            self.ctrl_packets += 1
        else:
            sw = self.sw
            q = self.qbytes - wire          # bytes queued behind it as it starts to leave
            if sw is not None and sw.at_dequeue and sw.kmin is not None and q > sw.kmin and sw.mark(q, pkt):
                pkt.ce = 1
                self.ecn_marks += 1
            if pfc.stamp:
                tel = pkt.tel
                if tel is None:
                    pkt.tel = tel = []
                tel.append((done, self.tx_bytes, q, self.rate, self.index))
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

    def __init__(self, cfg, kernel, stamp: bool, max_wire_bytes: int = 0):
        self.cfg = cfg
        self.xoff = cfg.xoff
        self.xon = cfg.xon
        self.max_wire = max_wire_bytes   # largest frame (the MTU terms of the headroom)
        self._response = {}              # rate_bps -> response time, ps
        self.kernel = kernel
        self.push = kernel.push
        self.seq = kernel.seq
        self.stamp = stamp
        self.pauses = 0

    def response_ps(self, port) -> int:
        """The reaction time of ``port``'s transmitter to a pause frame (``switch.pfc.response``)."""
        r = self._response.get(port.rate)
        if r is None:
            r = self._response[port.rate] = self.cfg.response_ps(port.rate)
        return r

    def headroom_bytes(self, port) -> int:
        """Bytes above ``xoff`` the link of upstream ``port`` needs so that the pause never overflows
        (module doc): 2 frames + pause frame + (2 x delay + forwarding latency + response) x rate."""
        flight_ps = 2 * port.delay + (port.offset - port.delay) + self.response_ps(port)
        return 2 * self.max_wire + PFC_FRAME_BYTES + -((-flight_ps * port.rate) // PS_BITS)

    def signal(self, t, port, pause: bool):
        """The peer of ``port`` sends XOFF (pause) or XON; it takes effect one link delay plus the
        transmitter's response time later."""
        self.kernel.schedule(t + port.delay + self.response_ps(port),
                             self._apply_pause if pause else self._apply_resume, port)

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
    lindley = False

    def setup(self, feats, node: dict, to_host) -> None:
        super().setup(feats, node, to_host)
        self.shared = None          # lossless: nothing is dropped, buffers are not enforced

    def arrive(self, t, pkt):
        ing = pkt.hop
        inflight = ing.inflight
        inflight.popleft()
        if inflight:
            self.push(inflight[0])
        route = self.route.get(pkt.dst) or self.lookup(pkt.dst)
        port = route[0] or self.choose(self, route[1], pkt, t)
        kind = pkt.kind
        strict = self.strict[kind]
        if not strict:
            if not kind:
                if self.stamp:
                    pkt.wire += self.int_first if pkt.tel is None else self.int_hop
                kmin = self.kmin
                if kmin is not None and not self.at_dequeue and port.qbytes > kmin and self.mark(port.qbytes, pkt):
                    pkt.ce = 1
                    port.ecn_marks += 1
            pkt.inport = ing
            b = ing.ingress_bytes = ing.ingress_bytes + pkt.wire
            if b > ing.ingress_peak:
                ing.ingress_peak = b
            if not ing.xoff_sent and b > self.pfc.xoff:
                ing.xoff_sent = True
                self.pfc.signal(t, ing, True)
        port.enqueue(t, pkt, strict)
