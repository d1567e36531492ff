"""Contract of a congestion-control algorithm: an object with hooks acting on per-flow state.

The engine builds one algorithm object per simulation, ``CLS(params, ctx)``, and gives every
queue pair a :class:`Flow`. The algorithm keeps its own per-flow variables in ``flow.state``
(whatever object it likes) and steers the sender through two fields the NIC reads before each
packet:

``flow.rate_bps``
    pacing rate: after a packet of ``w`` wire bytes the queue pair may send again
    ``w * 8e12 / rate_bps`` ps later (``>= line_bps`` means back-to-back at line rate);
``flow.window_bytes``
    limit on payload bytes sent and not yet acknowledged (``None`` = no limit; the NIC always
    lets one packet out when nothing is in flight).

Hooks (all times in ps; every hook is optional except :meth:`start`):

``start(flow, t)``        the queue pair is created (set the initial rate / window)
``on_send(flow, t, n)``   ``n`` payload bytes left the NIC for this flow (DCQCN's byte counter)
``on_ack(flow, t, ack)``  an ACK arrived: ``ack`` is an :class:`AckInfo`
``on_cnp(flow, t)``       a congestion notification packet arrived (DCQCN's reaction point)
``on_done(flow, t)``      the flow has nothing left to send and everything is acknowledged

Timers: ``ctx.schedule(t_ps, fn, arg)`` calls ``fn(t_ps, arg)`` at ``t_ps``; ``ctx.now`` is the
current time. There is no cancel: keep a generation counter in the flow state and ignore stale
timers (see :mod:`fabricsim.cc.dcqcn`).

Class attributes tell the engine what the algorithm needs from the network:

``uses_int``         switches stamp in-band telemetry into data packets, echoed in ACKs
``needs_fabric_base_rtt``  True (a class attribute or set in ``__init__``): before the first
                     ``start`` the engine calls ``set_fabric_base_rtt(rtt_ps)`` with the largest
                     base RTT over all ordered pairs of hosts (HPCC ns-3's GLOBAL_T)
``cnp_interval_ps``  None: no CNPs. Otherwise the receiver (notification point) sends a CNP for a
                     flow when an ECN-marked packet arrives and no CNP was sent for that flow in
                     the last ``cnp_interval_ps`` (a class attribute or set in ``__init__`` from params)
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from ..registry import Registry

CC: Registry = Registry("congestion control algorithm", group="fabricsim.cc")


class CCParams(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class Flow:
    """Per-queue-pair congestion state shared by the NIC and the algorithm.

    Attributes set by the engine: ``uid``, ``line_bps`` (the sending NIC port's rate),
    ``base_rtt_ps`` (the round trip of one MTU packet and its ACK on an idle path),
    ``mtu_bytes``, ``sent_bytes`` (highest payload byte offset sent so far, i.e. snd_nxt),
    ``acked_bytes`` (cumulative acknowledged offset, i.e. snd_una), ``active`` (False once done).

    ``base_rtt_ps`` may be given as a function of no arguments: it is then computed the first
    time it is read (a run whose algorithm and timers never read it, such as congestion control
    ``none`` with fixed timeouts, does not pay for the path walk of every pair of hosts).

    >>> f = Flow(1, 400 * 10**9, lambda: 6_000_000, 4096)
    >>> f.base_rtt_ps, f.base_rtt_ps
    (6000000, 6000000)
    """

    __slots__ = ("uid", "line_bps", "rate_bps", "window_bytes", "_rtt", "mtu_bytes", "sent_bytes",
                 "acked_bytes", "active", "state")

    def __init__(self, uid: int, line_bps: int, base_rtt_ps, mtu_bytes: int):
        self.uid = uid
        self.line_bps = line_bps
        self.rate_bps = line_bps
        self.window_bytes = None
        self._rtt = base_rtt_ps
        self.mtu_bytes = mtu_bytes
        self.sent_bytes = 0
        self.acked_bytes = 0
        self.active = True
        self.state = None

    @property
    def base_rtt_ps(self) -> int:
        v = self._rtt
        if not isinstance(v, int):
            v = self._rtt = v()
        return v

    @base_rtt_ps.setter
    def base_rtt_ps(self, v: int) -> None:
        self._rtt = v


class AckInfo:
    """What one ACK tells the sender.

    ``cum_bytes``   cumulative acknowledgement (payload bytes received in order)
    ``newly_acked_bytes``  payload bytes this ACK acknowledged for the first time (cumulative or selective)
    ``ecn_marked``  data packets with CE set since the previous ACK (ECN echo)
    ``int_hops``    in-band telemetry of the data packet that triggered the ACK: a tuple of
                    ``(ts_ps, tx_bytes, qlen_bytes, rate_bps, port_id)`` per switch egress hop, in path order
                    (``port_id`` identifies the egress port, as HPCC++'s port_ID: paths change per
                    packet under adaptive routing, and counters only compare within one port)
                    (``None`` unless the algorithm ``uses_int``)
    ``rtt_ps``      time from that data packet leaving the sender to this ACK arriving
    """

    __slots__ = ("cum_bytes", "newly_acked_bytes", "ecn_marked", "int_hops", "rtt_ps")

    def __init__(self, cum_bytes=0, newly_acked_bytes=0, ecn_marked=0, int_hops=None, rtt_ps=0):
        self.cum_bytes = cum_bytes
        self.newly_acked_bytes = newly_acked_bytes
        self.ecn_marked = ecn_marked
        self.int_hops = int_hops
        self.rtt_ps = rtt_ps


class CongestionControl:
    """Base class: bookkeeping only. Subclasses set ``Params`` and override the hooks they need."""

    Params: type[CCParams] | None = None
    uses_int = False
    needs_fabric_base_rtt = False
    cnp_interval_ps: int | None = None

    def __init__(self, params, ctx):
        self.params = params
        self.ctx = ctx

    def set_fabric_base_rtt(self, rtt_ps: int) -> None:
        """The largest base RTT over the fabric's host pairs (only if ``needs_fabric_base_rtt``)."""

    def start(self, flow: Flow, t: int) -> None:
        flow.rate_bps = flow.line_bps
        flow.window_bytes = None

    def on_send(self, flow: Flow, t: int, nbytes: int) -> None:
        pass

    def on_ack(self, flow: Flow, t: int, ack: AckInfo) -> None:
        pass

    def on_cnp(self, flow: Flow, t: int) -> None:
        pass

    def on_done(self, flow: Flow, t: int) -> None:
        pass


#: what a plug-in of this family must be (fabricsim/registry.py, Registry.discover)
CC.accepts(CongestionControl, "a CongestionControl subclass")
