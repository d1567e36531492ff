"""NVLink inside a scale-up domain: lossless links with credit flow control, no end-to-end ACK.

With ``nvlink.transport: credit`` (the default) a message between two GPUs of one NVLink domain
is not a RoCE queue pair. NVLink is a lossless, link-level credit-flow-controlled fabric: a
transmitter sends only when the receiver behind the link has buffer room for the packet, so
nothing is ever dropped, there is no end-to-end acknowledgement, no retransmission timer and no
congestion-control window; a message completes when its last byte is delivered. Traffic that
leaves the domain keeps its RoCE transport (:mod:`fabricsim.net.nic`, :mod:`fabricsim.net.sender`).

Framing
    NVLink moves data in packets of up to ``packet_payload`` bytes (256 B [EST]), each with
    ``packet_header`` bytes of overhead (16 B [EST]: header, CRC, flit padding). To keep the
    event count reasonable the simulator moves ``unit`` payload bytes per event (4 KiB by
    default): a unit of ``p`` bytes is ``ceil(p / packet_payload)`` NVLink packets and occupies
    :func:`nvlink_wire_bytes` on the wire; its ``npk`` (packets it stands for) is that packet
    count, so the links table counts NVLink packets.

Credits (one pool per link and direction, :class:`NvlinkPort`)
    ``buffer_bytes`` (the link's ``credit_bytes`` in the topology) is the receive buffer behind
    the link; ``credit_bytes`` is what the transmitter may still send. The transmitter spends the unit's
    wire bytes when it starts sending and may start only if that many are available. The buffer
    is freed when the unit has left the receiving node, and the credit is back at the transmitter
    one link delay later:

    - GPU -> chip: the chip holds the unit in the link's input buffer from its arrival until its
      last bit has left the chip's egress port; the credit returns one link delay after that.
    - chip -> GPU: the GPU consumes at line rate, so its buffer frees as each unit arrives; the
      credit returns one link delay after the arrival.

    Both return times are known when the unit is enqueued (the chip's egress is a FIFO at
    constant rate, Lindley's recursion as in :mod:`fabricsim.net.port`, here with the start time
    also waiting for credit), so credits need no events: a GPU port holds the pending returns in a
    heap (``cr_heap``) and takes back those that are due when it next transmits; a chip egress
    port (whose returns come in FIFO order) holds them in a deque (``cr_q``). A GPU port out of
    credit sleeps until its earliest known return (with striping, which knows its next unit in
    advance, until the return that makes room for it), and the chip wakes it (only it) if a unit
    it just enqueued frees credit earlier (``cr_wait``).

    Consequences: a chip holds at most ``buffer_bytes`` per input link (checked by
    ``buffer_peak_bytes``); a congested egress fills the input buffers of the links feeding it
    and those GPU ports stop, which also blocks their traffic to other destinations through
    that chip (head-of-line blocking, as with any input-buffered credit scheme without virtual
    channels). A link runs at full rate only if ``buffer_bytes`` exceeds its rate times the credit
    loop (unit serialisation + link delay + chip latency + egress serialisation + link delay:
    about 0.67 us, 34 KB, at 400 Gbps with the default delays); below that it runs at
    ``buffer_bytes / loop``.

Choice of chip
    A GPU reaches every other GPU of its domain through any of its links (one per chip); the
    chip has one port to the destination. So the only path choice is the GPU's. With
    ``nic.plane_split: per_packet`` a queue pair uses all the links, each running its own round
    robin over its queue pairs, and ``nvlink.spread`` says which units go where: ``stripe``
    (default [EST]: address interleaving) sends unit ``i`` by link ``(i + uid) mod n``, so every
    (chip, destination) pair carries the same share of every message; ``adaptive`` lets a unit
    leave by whichever link is free and has credit first (per packet, congestion-aware through
    the credits). With ``per_flow`` a queue pair stays on one chip. The ``routing`` policy
    applies to Ethernet switches; NVLink chips have nothing to choose.

Assumption: an NVLink switch connects only to GPUs (single switch hop, as NVL72/NVL36/HGX); the
engine refuses anything else with ``transport: credit``.
"""
from __future__ import annotations

from collections import deque
from heapq import heappop, heappush
from math import log

from .nic import Nic
from .packet import Packet
from .port import PS_BITS, Port
from .switch import Switch
from ..receiver.base import record_reorder


def nvlink_wire_bytes(payload_bytes: int, packet_payload_bytes: int, packet_header_bytes: int) -> int:
    """Wire bytes of ``payload_bytes`` sent as NVLink packets of at most ``packet_payload_bytes``,
    each with ``packet_header_bytes`` of overhead.

    >>> nvlink_wire_bytes(4096, 256, 16)     # 16 packets
    4352
    >>> nvlink_wire_bytes(1000, 256, 16)     # 4 packets, the last one short
    1064
    """
    return payload_bytes + -(-payload_bytes // packet_payload_bytes) * packet_header_bytes


def nvlink_stripe_psn(pos: int, uid: int, links: int, sent: int) -> int:
    """Striping (``nvlink.spread: stripe``): the unit a link sends next of a queue pair spread over
    ``links`` links, being at place ``pos`` in the queue pair's links and having sent ``sent`` of
    its units. Unit ``i`` goes by link ``(i + uid) mod links``, so link ``pos`` sends units
    ``(pos - uid) mod links``, then every ``links``-th after it.

    >>> [nvlink_stripe_psn(pos, 5, 3, 0) for pos in range(3)]     # uid 5: unit 0 by link 2
    [1, 2, 0]
    >>> nvlink_stripe_psn(2, 5, 3, 4)
    12
    """
    return (pos - uid) % links + sent * links


class NvlinkPort(Port):
    """One direction of an NVLink link, with its credit pool (see module doc)."""

    __slots__ = ("credit_bytes", "buffer_bytes", "cr_heap", "cr_q", "cr_wait", "held_bytes", "nic", "buffer_peak_bytes",
                 "credit_stalls", "sched", "sched_bytes")

    def __init__(self, *args, buffer_bytes: int, **kw):
        super().__init__(*args, **kw)
        self.credit_bytes = buffer_bytes    # bytes the transmitter may still send
        self.buffer_bytes = buffer_bytes    # the receive buffer behind the link (what the credits stand for)
        self.cr_heap = []                   # GPU port: (return time, bytes) of credits not yet taken back
        self.cr_q = deque()                 # chip port: the same, in FIFO order
        self.cr_wait = False                # GPU port: its NIC is waiting for credit
        self.held_bytes = 0                 # bytes in cr_heap
        self.nic = None                     # GPU port: its NvlinkNic
        self.buffer_peak_bytes = 0          # peak bytes held in the buffer behind this link (GPU -> chip)
        self.credit_stalls = 0              # times the link had to wait for credit
        # chip port: (last bit out, wire bytes) of the units it holds, and their sum. Its busy_until
        # includes time spent waiting for credit, so the backlog is counted in units, not derived
        # from busy_until as for a FIFO at constant rate
        self.sched = deque()
        self.sched_bytes = 0

    def held(self, t: int) -> int:
        """Chip port: wire bytes of the units it holds at ``t`` (queued or being sent; a unit
        counts until its last bit is out)."""
        sched = self.sched
        b = self.sched_bytes
        while sched and sched[0][0] <= t:
            b -= sched.popleft()[1]
        self.sched_bytes = b
        return b

    def queued_bytes(self, t: int) -> int:
        return self.held(t) if self.nic is None else Port.queued_bytes(self, t)


class NvlinkNic(Nic):
    """A GPU's NVLink link to one chip: round robin over its queue pairs, sending a unit whenever
    the wire is free and the link has credit for it. No window, pacing, ACK or timer.

    Which units of a queue pair a link sends (``nvlink.spread``): with ``stripe`` (``stripe`` is a
    dict queue pair -> units this link has sent of it) unit ``i`` of a queue pair spread over
    ``n`` links goes by link ``(i + uid) mod n`` of them, as address interleaving does; with
    ``adaptive`` (``stripe`` is None) a link takes the queue pair's next unit whenever it can
    send, so faster links take more."""

    __slots__ = ("unit", "pkt_payload", "pkt_header", "stripe", "pos", "unit_wire")
    nvlink = True

    def __init__(self, host, port, engine, kernel, bit, unit_bytes, packet_payload_bytes, packet_header_bytes):
        super().__init__(host, port, engine, kernel, unit_bytes, 0, 1, bit)
        self.unit = unit_bytes
        self.pkt_payload = packet_payload_bytes
        self.pkt_header = packet_header_bytes
        self.stripe = None
        self.pos = 0
        self.unit_wire = nvlink_wire_bytes(unit_bytes, packet_payload_bytes, packet_header_bytes)

    def send_ctrl(self, t, pkt):
        """Serialise at once: this ``tx`` does not send held control packets (a credit domain
        has none; a packet sent here would otherwise wait in ``ctrlq`` for ever)."""
        self._ctrl_out(t, pkt)

    def tx(self, t, token):
        self.tx_calls += 1
        if token != self.token:
            return                      # superseded by an earlier kick
        port = self.port
        bu = port.busy_until
        if bu > t:
            self.pending_at = bu
            self.push((bu, next(self.seq), self._tx, token))
            return
        heap = port.cr_heap
        credit = port.credit_bytes
        if heap and heap[0][0] <= t:
            held = port.held_bytes
            while heap and heap[0][0] <= t:
                w = heappop(heap)[1]
                credit += w
                held -= w
            port.held_bytes = held
        active = self.active
        bit = self.bit
        unit = self.unit
        stripe = self.stripe
        while active:
            qp = active[0]
            if stripe is None:
                psn = qp.seq
            else:
                n = len(qp.nics)
                pos = self.pos if self.pos < n and qp.nics[self.pos] is self else qp.nics.index(self)
                psn = (pos - qp.uid) % n + stripe.get(qp, 0) * n    # = nvlink_stripe_psn(pos, qp.uid, n, sent)
            if psn >= qp.npsn:
                active.popleft()
                qp.nicmask &= ~bit
                if stripe is not None:
                    stripe.pop(qp, None)
                continue
            payload = qp.size - psn * unit
            if payload > unit:
                payload = unit
            npk = -(-payload // self.pkt_payload)
            wire = payload + npk * self.pkt_header          # = nvlink_wire_bytes(payload, ...)
            if credit < wire:
                port.credit_bytes = credit
                port.credit_stalls += 1
                port.cr_wait = True     # the chip kicks this port when it frees credit earlier
                if heap:
                    wake = heap[0][0]
                    self.pending_at = wake
                    self.push((wake, next(self.seq), self._tx, token))
                else:
                    self.busy = False
                return
            active.rotate(-1)
            port.credit_bytes = credit - wire
            port.cr_wait = False
            if stripe is None:
                qp.seq = psn + 1
                last = psn + 1 >= qp.npsn
            else:
                stripe[qp] = stripe.get(qp, 0) + 1
                last = psn + len(qp.nics) >= qp.npsn
            qp.msg.injected += payload
            pkt = Packet(qp, qp.dst, wire, payload, psn, t, npk, port)
            k = port.ps_per_byte
            done = t + (wire * k if k else -((-wire * PS_BITS) // port.rate))
            port.busy_until = done
            st = qp.msg
            if st.on_sent and st.injected == st.size:
                st.on_sent(st, done)    # its last unit: the connection's next message may start
            port.tx_bytes += wire
            port.tx_packets += npk
            if done - t > port.peak_ps:
                port.peak_ps = done - t
            self.tx_sent += 1
            seq = self.seq
            entry = (done + port.offset, next(seq), port.deliver, pkt)
            inflight = port.inflight
            inflight.append(entry)
            if len(inflight) == 1:
                self.push(entry)
            if last and len(active) == 1:
                active.pop()            # its last unit: nothing left here, no attempt at ``done``
                qp.nicmask &= ~bit
                if stripe is not None:
                    stripe.pop(qp, None)
                self.busy = False
                return
            if stripe is not None and credit - wire < self.unit_wire:
                # too little credit left for a full unit: the next attempt is when enough is back
                nxt = self._credit_time(done)
                if nxt is None:         # not yet known: the chip kicks this link when it is
                    port.cr_wait = True
                    port.credit_stalls += 1
                    self.busy = False
                    return
                if nxt > done:
                    port.cr_wait = True
                    port.credit_stalls += 1
                    done = nxt
            self.pending_at = done
            self.push((done, next(seq), self._tx, token))
            return
        port.credit_bytes = credit      # (credit taken back above, with nothing left to send here)
        self.busy = False

    def _credit_time(self, t):
        """Striping: when this link will have credit for its next unit (the one the attempt at
        ``t`` would send: the next queue pair's next stripe unit), ``t`` if already, None if the
        returns known so far are not enough. Only striping knows that unit in advance: no other
        link takes it."""
        qp = self.active[0]
        n = len(qp.nics)
        pos = self.pos if self.pos < n and qp.nics[self.pos] is self else qp.nics.index(self)
        psn = nvlink_stripe_psn(pos, qp.uid, n, self.stripe.get(qp, 0))
        if psn >= qp.npsn:
            return t
        unit = self.unit
        payload = qp.size - psn * unit
        if payload > unit:
            payload = unit
        need = nvlink_wire_bytes(payload, self.pkt_payload, self.pkt_header) - self.port.credit_bytes
        if need <= 0:
            return t
        for r, w in sorted(self.port.cr_heap):
            need -= w
            if need <= 0:
                return r if r > t else t
        return None


class NvlinkSwitch(Switch):
    """An NVLink switch chip: forwards each unit to its port towards the destination GPU, starting
    it when the egress is free and the GPU's buffer has credit, and schedules the return of the
    input link's credit (see module doc). Never drops, marks or stamps."""

    __slots__ = ()

    def arrive(self, t, pkt):
        ing = pkt.hop
        inflight = ing.inflight
        inflight.popleft()
        if inflight:
            self.push(inflight[0])
        route = self.route.get(pkt.dst) or self.lookup(pkt.dst)
        port = route[0] or self.choose(self, route[1], pkt, t)
        wire = pkt.wire
        s = port.busy_until
        if s < t:
            s = t
        credit = port.credit_bytes
        dq = port.cr_q
        while dq and dq[0][0] <= s:
            credit += dq.popleft()[1]
        while credit < wire:            # wait for the GPU's buffer (credits return in FIFO order)
            r, w = dq.popleft()
            credit += w
            if r > s:
                s = r
        port.credit_bytes = credit - wire
        k = port.ps_per_byte
        end = s + (wire * k if k else -((-wire * PS_BITS) // port.rate))
        port.busy_until = end
        port.sched.append((end, wire))
        q = port.held(t) + wire
        port.sched_bytes = q
        q = q * PS_BITS // port.rate        # peak_ps holds the backlog in ps of serialisation
        if q > port.peak_ps:
            port.peak_ps = q
        port.tx_bytes += wire
        port.tx_packets += pkt.npk
        dly = port.delay
        dq.append((end + dly + dly, wire))     # the GPU frees it on arrival; credit back one delay later
        # the input buffer holds the unit until its last bit has left; credit back one delay later
        back = end + ing.delay
        heap = ing.cr_heap
        heappush(heap, (back, wire))
        held = ing.held_bytes = ing.held_bytes + wire
        if held > ing.buffer_peak_bytes:
            # exact occupancy now: units of this link that have arrived and not yet left the chip
            # (the entry of a unit that has left but whose credit is still on its way back is
            # older than ``t + delay``); only computed when it may set a new peak
            lim = t + ing.delay
            occ = 0
            for r, w in heap:
                if r > lim:
                    occ += w
            if occ > ing.buffer_peak_bytes:
                ing.buffer_peak_bytes = occ
        if ing.cr_wait:
            ing.nic.kick(back)
        entry = (end + port.offset, next(self.seq), port.deliver, pkt)
        pkt.hop = port
        inflight = port.inflight
        inflight.append(entry)
        if len(inflight) == 1:
            self.push(entry)


class NvlinkRx:
    """Arrival of a unit at its destination GPU: latency, goodput, reorder statistics and the
    message's completion when its last byte is in. Sends nothing back."""

    def __init__(self, engine):
        rec = engine.recorder
        self._hist = rec.latency.counts
        self._inv = rec.latency.inv_log_base
        self._accept = engine.receiver.accept
        self._done = engine.message_done
        self._push = engine.kernel.push

    def arrive(self, t, pkt):
        inflight = pkt.hop.inflight
        inflight.popleft()
        if inflight:
            self._push(inflight[0])
        self._hist[int(log(t - pkt.t_tx) * self._inv)] += pkt.npk
        qp = pkt.qp
        st = qp.msg
        st.rx_units += 1
        end = pkt.seq + 1
        record_reorder(qp, st, pkt, end)
        self._accept(t, pkt, st)
        if st.delivered >= st.size and not st.done:
            self._done(st, t)
