"""Switch: forwards each arriving packet to an egress port chosen by the routing policy.

Per packet (``arrive``): settle the dequeue-time samples of the port it came by, look up the
equal-cost egress ports for the destination (cached), let the routing policy pick one, then either
send it in the strict-priority class (``priority``) or enqueue it in the data class by Lindley's
recursion (drop-tail if the port's or the shared buffer refuses it), mark ECN (RED: kmin / kmax /
pmax), stamp in-band telemetry, and hand the arrival at the next node to the port's ``inflight``
queue (see :mod:`fabricsim.net.port`).

Priority classes. ``switch.strict_priority`` names the packet kinds of the strict class (default:
CNPs, as NVIDIA's RoCE default TC6; ACK/NAK share the data class TC3). A Lindley port has no packet
list to reorder, so a strict-priority packet is modelled as serialised right after the data packet
now on the wire (found in ``inflight``: the first whose last bit has not left) or after the
previous strict-priority packet, whichever is later, on the port's :class:`PriorityLane`, and the
data class's ``busy_until`` is pushed back by its serialisation time. Data packets enqueued after
it therefore wait for it exactly; data packets *already* queued keep their departure times (their
arrival events are fixed), so each of them leaves up to one strict packet's serialisation early
(a 64 B CNP: 1.3 ns at 400G) and, while they drain, the link carries the CNP's bytes on top of
line rate. The link's bytes are conserved (``busy_until`` includes the CNP), the error per data
packet is bounded by (CNPs that overtook it) x (their serialisation), and CNPs are rare (one per
flow per CNP interval), so the approximation is conservative for everything measured at the
queue (its backlog and drops are never understated).

ECN and INT sampling. ``switch.ecn.sample: enqueue`` decides from the bytes queued ahead of the
packet when it arrives (``(busy_until - t) rate``). ``dequeue`` (default, both ns-3 reference
codes) decides from the bytes queued *behind* it when it starts to leave at ``start`` (its Lindley
start). Those are the data bytes enqueued at this port in ``(t, start]``: the port keeps a
cumulative count (``tx_bytes - prio_bytes``) and a FIFO ``pend`` of (start, end, count after it,
...) for packets that had to wait. An entry is settled (the difference of the count is its queue)
at the first event at or after its ``start`` that could change the answer: the next enqueue at the
port (before its bytes are counted), or the packet's arrival at the next node, whichever comes
first. Every enqueue before that moment happened before ``start``, so the result is exact. A packet
that starts at once (idle port) sees an empty queue and is settled immediately.
"""
from __future__ import annotations

from .packet import ACK, CNP, NAK, UNIT, packet_draw
from .port import PS_BITS, SharedBuffer

#: name of the random stream the per-run ECN marking salt is drawn from
ECN_SALT_STREAM = "switch.ecn.salt"

#: ``switch.strict_priority`` -> packet kinds (DATA, ACK, NAK, CNP) in the strict class
STRICT_KINDS = {"cnp": (CNP,), "control": (ACK, NAK, CNP), "none": ()}


def red_below(draw: int, q: int, kmin: int, kmax: int, pmax: float) -> bool:
    """RED between the thresholds (``kmin < q <= kmax``): True (mark) if the 64-bit ``draw``, as a
    uniform number in [0, 1), falls below ``pmax (q - kmin) / (kmax - kmin)``. The one definition
    of the comparison, in this evaluation order, for both packet kernels (the compiled core
    compiles this source).

    >>> red_below(0, 2, 1, 3, 0.5), red_below(2**63, 2, 1, 3, 0.5)
    (True, False)
    """
    return draw * UNIT < pmax * (q - kmin) / (kmax - kmin)


class Switch:
    #: ports run by Lindley's recursion (dequeue-time samples are settled lazily, see module doc)
    lindley = True
    __slots__ = ("id", "name", "engine", "table", "route", "paths", "port_to", "choose", "shared", "ports",
                 "kernel", "push", "seq", "kmin", "kmax", "pmax", "ecn_salt", "stamp", "strict", "at_dequeue",
                 "int_hop", "int_first")

    def __init__(self, node, name, engine):
        self.id = node
        self.name = name
        self.engine = engine
        self.table = {}         # dst host -> tuple of egress ports
        self.route = {}         # dst host -> (the port if there is only one, else None; the ports)
        self.port_to = {}       # neighbour id -> list of ports
        self.ports = []
        self.shared = None      # SharedBuffer (plain pool or dynamic threshold), or None
        self.kmin = None        # ECN: None = no marking; else thresholds in bytes
        self.kmax = 0
        self.pmax = 0.0
        self.ecn_salt = 0       # ECN: the salt of the marking draws (packet_draw)
        self.stamp = False      # in-band telemetry on data packets
        self.strict = (False, False, False, True)   # by packet kind: in the strict-priority class
        self.at_dequeue = True  # ECN / INT sampled at dequeue (else at enqueue)
        self.int_hop = 0        # INT bytes added per stamped hop
        self.int_first = 0      # ... plus the INT header, at the first stamped hop

    def setup(self, feats, node: dict, to_host) -> None:
        """Apply the ``switch:`` features once the ports exist (called by the engine).

        ``node`` is the topology node's attributes (``buffer_bytes``, ``buffer_mode``); ``to_host``
        the engine's host-arrival callback, wrapped on host-facing ports so that dequeue-time samples
        are settled before a receiver reads them.
        """
        kinds = STRICT_KINDS[feats.strict_priority]
        self.strict = tuple(k in kinds for k in range(4))
        self.at_dequeue = feats.ecn.sample == "dequeue"
        self.int_hop = feats.int_hop
        self.int_first = feats.int_hop + feats.int_header
        for p in self.ports:
            p.sw = self
        size, mode, buf = node.get("buffer_bytes"), node.get("buffer_mode"), feats.buffer
        pool = None
        if buf.admission == "dynamic" and self.ports:
            total = buf.size
            if total is None and size is not None:
                total = size * len(self.ports) if mode == "per_port" else size
            if total is not None:
                pool = SharedBuffer(total, buf.alpha, buf.reserve)
                for p in self.ports:
                    p.buffer = None          # the dynamic threshold replaces the static limit
        elif mode == "shared" and size is not None:
            pool = SharedBuffer(size)
        if pool is not None:
            for p in self.ports:
                pool.add(p)
        self.shared = pool
        if self.lindley and self.at_dequeue and (self.kmin is not None or self.stamp):
            for p in self.ports:
                if p.deliver == to_host:          # bound methods: equal, not identical
                    p.deliver = self._settling(to_host)

    @staticmethod
    def _settling(deliver):
        def to_host(t, pkt):
            hop = pkt.hop
            if hop.pend:
                hop.sw.settle(hop, t)
            deliver(t, pkt)
        return to_host

    def lookup(self, dst):
        ports = []
        for nbr in self.paths.next_hops(self.id, dst):
            ports.extend(self.port_to[nbr])
        if not ports:
            raise RuntimeError(f"switch {self.name} has no route to host {dst}")
        for p in ports:
            p.sw = self         # the switch that settles this port's dequeue samples (also without setup)
        t = self.table[dst] = tuple(ports)
        r = self.route[dst] = (t[0] if len(t) == 1 else None, t)
        return r

    def mark(self, q: int, pkt) -> bool:
        """RED decision for data packet ``pkt`` that sees ``q`` bytes queued (q > kmin): marked with
        probability ``pmax (q - kmin) / (kmax - kmin)`` (1 above ``kmax``), by the packet's
        counter-based draw at this switch (:func:`~fabricsim.flows.identity.packet_draw`)."""
        if q > self.kmax:
            return True
        return red_below(packet_draw(self.ecn_salt, pkt, self.id), q, self.kmin, self.kmax, self.pmax)

    def settle(self, port, t) -> None:
        """Decide ECN and INT for the packets of ``port`` that started to leave by ``t`` (module doc)."""
        pend = port.pend
        count = port.tx_bytes - port.prio_bytes
        kmin = self.kmin
        while pend and pend[0][0] <= t:
            _, end, tx, prio, pkt = pend.popleft()
            q = count - (tx - prio)
            if kmin is not None and q > kmin and self.mark(q, pkt):
                pkt.ce = 1
                port.ecn_marks += 1
            if self.stamp:
                tel = pkt.tel
                if tel is None:
                    pkt.tel = tel = []
                tel.append((end, tx, q, port.rate, port.index))

    def priority(self, t, port, pkt) -> None:
        """Send ``pkt`` in the strict-priority class of ``port`` (module doc: after the data packet on
        the wire, ahead of the data queue, which is pushed back by its serialisation)."""
        wire = pkt.wire
        ser = port.ser_ps(wire)
        start = t
        bu = port.busy_until
        if bu > t:
            off = port.offset
            for e in port.inflight:
                if e[0] - off > t:          # last bit not yet out: the data packet on the wire
                    start = e[0] - off
                    break
        lane = port.lane
        if lane.busy_until > start:
            start = lane.busy_until
        end = start + ser
        lane.busy_until = end
        newbu = bu + ser if bu > t else end
        shared = self.shared
        if shared is not None:
            shared.used(t)
            shared.set_busy_until(port, t, newbu)
        port.busy_until = newbu
        if newbu - t > port.peak_ps:
            port.peak_ps = newbu - t
        port.tx_bytes += wire
        port.tx_packets += pkt.npk
        port.ctrl_bytes += wire
        port.ctrl_packets += 1
        port.prio_bytes += wire
        entry = (end + port.offset, next(self.seq), port.deliver, pkt)
        pkt.hop = lane
        inflight = lane.inflight
        inflight.append(entry)
        if len(inflight) == 1:
            self.push(entry)

    def arrive(self, t, pkt):
        # Hot path (one call per packet per switch): attributes used twice are read once into
        # locals; see benchmarks/README.md for what each line costs.
        #
        # This packet's entry has left the agenda: the next arrival from the same port joins it
        # (only each port's first pending arrival is on the agenda, see fabricsim/net/port.py).
        hop = pkt.hop
        inflight = hop.inflight
        inflight.popleft()
        if inflight:
            self.push(inflight[0])
        pend = hop.pend
        if pend and pend[0][0] <= t:
            hop.sw.settle(hop, t)
        route = self.route.get(pkt.dst) or self.lookup(pkt.dst)
        port = route[0] or self.choose(self, route[1], pkt, t)
        kind = pkt.kind
        if kind and self.strict[kind]:
            self.priority(t, port, pkt)
            return
        pend = port.pend
        if pend and pend[0][0] <= t:
            self.settle(port, t)
        wire = pkt.wire
        stamp = self.stamp and not kind
        if stamp:
            wire += self.int_first if pkt.tel is None else self.int_hop
        bu = port.busy_until
        if bu < t:
            bu = t
            q = 0
        else:
            q = (bu - t) * port.rate // PS_BITS
            if port.buffer is not None and q + wire > port.buffer:
                self.engine.drop(port, pkt)
                return
        shared = self.shared
        if shared is not None and not shared.admits(q, wire, shared.used(t)):
            self.engine.drop(port, pkt)
            return
        pkt.wire = wire
        kmin = self.kmin
        at_dequeue = self.at_dequeue
        if kmin is not None and not at_dequeue and q > kmin and not kind and self.mark(q, pkt):
            pkt.ce = 1
            port.ecn_marks += 1
        start = bu
        k = port.ps_per_byte
        bu += wire * k if k else -((-wire * PS_BITS) // port.rate)     # = port.ser_ps(wire)
        if shared is not None:
            shared.set_busy_until(port, t, bu)
        port.busy_until = bu
        if bu - t > port.peak_ps:
            port.peak_ps = bu - t
        port.tx_bytes += wire
        port.tx_packets += pkt.npk
        if kind:
            port.ctrl_bytes += wire
            port.ctrl_packets += 1
        elif at_dequeue:
            if start > t:                   # it waits: settle its sample when it starts (module doc)
                if kmin is not None or stamp:
                    pend.append((start, bu, port.tx_bytes, port.prio_bytes, pkt))
            elif stamp:                     # leaves at once: nothing is queued behind it yet
                tel = pkt.tel
                if tel is None:
                    pkt.tel = tel = []
                tel.append((bu, port.tx_bytes, 0, port.rate, port.index))
        elif stamp:
            tel = pkt.tel
            if tel is None:
                pkt.tel = tel = []
            tel.append((bu, port.tx_bytes, q, port.rate, port.index))
        # = kernel.schedule(bu + port.offset, port.deliver, pkt), held in the port's inflight
        entry = (bu + port.offset, next(self.seq), port.deliver, pkt)
        pkt.hop = port
        inflight = port.inflight
        inflight.append(entry)
        if len(inflight) == 1:
            self.push(entry)
