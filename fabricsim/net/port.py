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

PS_BITS = 8 * 10**12  # bits-per-byte x ps-per-second


class Port:
    """One direction of a link, owned by the node that transmits on it."""

    __slots__ = ("index", "owner", "peer", "kind", "rate", "delay", "offset", "deliver", "busy_until",
                 "tx_bytes", "tx_packets", "peak_ps", "buffer", "shared", "drops", "dropped_bytes",
                 "util_mark_t", "util_mark_bytes", "util_rate", "inflight", "ps_per_byte", "ecn_marks",
                 "ctrl_drops", "ctrl_bytes", "paused", "pause_events", "paused_ps", "paused_since")

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
        self.ctrl_drops = 0                        # of ``drops``: control packets (ACK/NAK/CNP)
        self.paused = False                        # PFC: the peer has paused this port's data class
        self.pause_events = 0                      # PFC: pause frames received (XOFF)
        self.paused_ps = 0                         # PFC: total time paused
        self.paused_since = 0

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


class SharedBuffer:
    """One buffer pool for all egress ports of a switch: a packet is dropped if the switch's total
    queued bytes plus the packet would exceed ``size_bytes``."""

    __slots__ = ("size", "ports")

    def __init__(self, size_bytes: int):
        self.size = size_bytes
        self.ports: list[Port] = []

    def used(self, t: int) -> int:
        return sum(p.queued_bytes(t) for p in self.ports)
