"""Egress port: a FIFO queue with a buffer, serialisation at the link rate and a propagation delay.

The port keeps no packet list. For a FIFO served at a constant rate, Lindley's recursion gives
each packet's departure when it is enqueued::

    start = max(arrival, busy_until);  busy_until = start + size / rate

and the bytes queued at any instant ``t`` (including the rest of the packet on the wire) are
``(busy_until - t) * rate``. So a hop costs one event: the arrival at the next node, at
``busy_until + propagation delay (+ that node's forwarding latency)``.

Those arrivals leave a port in time order (``busy_until`` only grows), so the port holds their
agenda entries in ``inflight`` and only the first is on the kernel's agenda: the engine pushes the
next one when the first runs. The agenda then holds about one entry per busy port instead of one
per packet in flight, which keeps ``heappop`` fast when queues are long (a 128-host ECMP run has
~35k packets in flight; see benchmarks/README.md). Entries keep the ``seq`` they were built
with, so events run in exactly the order they would if each had been scheduled at once.
"""
from __future__ import annotations

from collections import deque
from heapq import heappop, heappush

PS_BITS = 8 * 10**12  # bits-per-byte x ps-per-second


class Port:
    """One direction of a link, owned by the node that transmits on it."""

    __slots__ = ("index", "owner", "peer", "kind", "rate", "delay", "offset", "deliver", "busy_until",
                 "tx_bytes", "tx_packets", "peak_ps", "buffer", "shared", "drops", "dropped_bytes",
                 "util_mark_t", "util_mark_bytes", "util_rate", "inflight", "ps_per_byte", "ecn_marks",
                 "ctrl_drops", "ctrl_bytes", "ctrl_packets", "paused", "pause_events", "paused_ps", "paused_since",
                 "pend", "lane", "prio_bytes", "sw", "in_pool", "pool_idx")

    def __init__(self, index: int, owner: int, peer: int, kind: str, rate_bps: int, delay_ps: int,
                 peer_latency_ps: int, buffer_bytes: int | None):
        self.index = index
        self.owner = owner
        self.peer = peer
        self.kind = kind
        self.rate = rate_bps
        # whole ps per byte when the rate divides 8e12 (400G: 20): then serialisation is one small
        # multiplication, exactly equal to ser_ps(); 0 = use ser_ps()
        self.ps_per_byte = PS_BITS // rate_bps if PS_BITS % rate_bps == 0 else 0
        self.delay = delay_ps
        self.offset = delay_ps + peer_latency_ps   # from last bit out to the event at the peer
        self.deliver = None                        # peer's arrival callback fn(t, pkt)
        self.busy_until = 0
        self.tx_bytes = 0
        self.tx_packets = 0
        self.peak_ps = 0                           # max backlog seen, in ps of serialisation
        self.buffer = buffer_bytes                 # None = unbounded (per-port limit)
        self.shared = None                         # SharedBuffer of the switch, if any
        self.drops = 0                             # drops with reason "buffer_full"
        self.dropped_bytes = 0
        self.util_mark_t = 0
        self.util_mark_bytes = 0
        self.util_rate = 0.0
        self.inflight = deque()                    # agenda entries of arrivals not yet run (see above)
        self.ecn_marks = 0                         # data packets marked CE on this egress queue
        self.ctrl_bytes = 0                        # of ``tx_bytes``: control packets (ACK/NAK/CNP)
        self.ctrl_packets = 0                      # of ``tx_packets``: control packets
        self.ctrl_drops = 0                        # of ``drops``: control packets (ACK/NAK/CNP)
        self.paused = False                        # PFC: the peer has paused this port's data class
        self.pause_events = 0                      # PFC: pause frames received (XOFF)
        self.paused_ps = 0                         # PFC: total time paused
        self.paused_since = 0
        self.pend = deque()                        # dequeue-time ECN/INT: (start, end, tx, prio, pkt) to settle
        self.lane = PriorityLane()                 # the strict-priority class's departures (CNPs)
        self.prio_bytes = 0                        # of ``tx_bytes``: bytes sent in the strict-priority class
        self.sw = None                             # owning switch (settles ``pend``); None for NIC ports
        self.in_pool = False                       # counted in the switch's SharedBuffer running sums
        self.pool_idx = 0

    def ser_ps(self, nbytes: int) -> int:
        """Serialisation time of ``nbytes`` on this port (ceil to whole ps)."""
        return -((-nbytes * PS_BITS) // self.rate)

    def queued_bytes(self, t: int) -> int:
        """Bytes waiting or being serialised at time ``t``."""
        bu = self.busy_until
        return (bu - t) * self.rate // PS_BITS if bu > t else 0

    @property
    def peak_queue_bytes(self) -> int:
        return self.peak_ps * self.rate // PS_BITS


class PriorityLane:
    """Departures of one port's strict-priority class (see :mod:`fabricsim.net.switch`).

    A packet crossing the lane has ``pkt.hop`` = the lane, whose ``inflight`` holds the pending
    arrivals in time order exactly as a port's (the next node pops it the same way)."""

    __slots__ = ("inflight", "busy_until", "pend")

    def __init__(self):
        self.inflight = deque()
        self.busy_until = 0
        self.pend = ()             # nothing to settle: strict-priority packets are never marked


class SharedBuffer:
    """One buffer pool for the egress ports of a switch, with running sums instead of a scan.

    ``used(t)`` is the switch's total queued bytes, ``sum_i (busy_until_i - t) rate_i`` over the
    busy ports, kept as two running sums (``sum busy_until_i rate_i`` and ``sum rate_i``) and a heap
    with one entry per busy port, keyed by a (possibly stale) ``busy_until``: a query pops the
    ports whose entry has expired, drops those that are idle from the sums and re-files the others.
    So a query costs O(log P) per port that went idle, not O(P). It equals the sum of
    ``Port.queued_bytes`` up to rounding (floor of the sum instead of the sum of floors: less than
    one byte per busy port).

    Admission (``admits``): the pool must hold the packet (``used + w <= size``) and, with the
    dynamic threshold (Choudhury & Hahne, IEEE/ACM ToN 6(2), 1998), the port's queue must stay under
    ``alpha`` times the free pool: ``q + w <= alpha (size - used)``; ``q + w <= reserve`` is always
    admitted. ``alpha = None`` is a plain shared pool (no per-port threshold).

    >>> from fabricsim.net.port import Port, SharedBuffer
    >>> pool = SharedBuffer(10_000, alpha=1.0)
    >>> a, b = (Port(i, 0, 1, "x", 400 * 10**9, 0, 0, None) for i in range(2))
    >>> pool.add(a); pool.add(b)
    >>> pool.set_busy_until(a, 0, a.ser_ps(4000)); a.busy_until = a.ser_ps(4000)  # 4000 B queued on a
    >>> used = pool.used(0); used                   # free pool 6000 B: each port may hold up to 6000 B
    4000
    >>> pool.admits(4000, 2000, used), pool.admits(4000, 2001, used), pool.admits(0, 6000, used)
    (True, False, True)
    >>> pool.used(a.ser_ps(4000))                   # a has drained: the pool is empty again
    0
    """

    __slots__ = ("size", "alpha", "reserve", "ports", "s", "r", "heap")

    def __init__(self, size_bytes: int, alpha: float | None = None, reserve_bytes: int = 0):
        self.size = size_bytes
        self.alpha = alpha
        self.reserve = reserve_bytes
        self.ports: list[Port] = []
        self.s = 0          # sum over pooled (busy) ports of busy_until x rate
        self.r = 0          # sum of their rates
        self.heap: list = []

    def add(self, port: Port) -> None:
        port.pool_idx = len(self.ports)
        self.ports.append(port)

    def used(self, t: int) -> int:
        """Bytes queued in the pool at ``t`` (see class doc)."""
        heap = self.heap
        while heap and heap[0][0] <= t:
            _, i = heappop(heap)
            p = self.ports[i]
            if p.busy_until <= t:
                p.in_pool = False
                self.s -= p.busy_until * p.rate
                self.r -= p.rate
            else:
                heappush(heap, (p.busy_until, i))
        return (self.s - t * self.r) // PS_BITS if self.r else 0

    def set_busy_until(self, port: Port, t: int, bu: int) -> None:
        """``port.busy_until`` is about to become ``bu`` (> t); call after ``used(t)``."""
        if port.in_pool:
            self.s += (bu - port.busy_until) * port.rate
        else:
            port.in_pool = True
            self.s += bu * port.rate
            self.r += port.rate
            heappush(self.heap, (bu, port.pool_idx))

    def admits(self, q: int, wire: int, used: int) -> bool:
        """May a packet of ``wire`` bytes join a port queue of ``q`` bytes, with ``used`` in the pool?"""
        alpha = self.alpha
        return pool_admits(q, wire, used, self.size, alpha is not None, alpha or 0.0, self.reserve)


def pool_admits(q: int, wire: int, used: int, size: int, dynamic: bool, alpha: float, reserve: int) -> bool:
    """:meth:`SharedBuffer.admits` as a plain function (the compiled core runs it from this source):
    the pool of ``size`` bytes must hold the packet (``used + wire <= size``) and, with the dynamic
    threshold (``dynamic``), the port's queue must stay under ``alpha`` times the free pool unless it
    stays within ``reserve``. ``alpha * (size - used)`` is a float; ``q + wire`` is compared with it
    exactly (both kernels, below 2^53: coverage).

    >>> pool_admits(4000, 2000, 4000, 10_000, True, 1.0, 0), pool_admits(4000, 2001, 4000, 10_000, True, 1.0, 0)
    (True, False)
    """
    if used + wire > size:
        return False
    if not dynamic or q + wire <= reserve:
        return True
    return q + wire <= alpha * (size - used)
