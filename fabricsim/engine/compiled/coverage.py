"""What the compiled core runs, checked on the built engine (docs/compiled-core.md 4.3).

:func:`uncovered` lists every feature of a built :class:`~fabricsim.engine.packet.PacketEngine`
that the compiled slices do not run yet, one short phrase each, with the slice that will. An
empty list: the run is compiled. Otherwise it runs on ``heap`` (the same model in Python) and
says why, so nothing is ever simplified silently.

Every registered routing policy is compiled (:data:`ROUTING`): ``ecmp``, ``spray``, ``adaptive``
with any ``metric`` (``queue``, ``util``, ``queue_util``) and with ``exact: true``, ``flowlet`` (any
metric and gap) and ``pinned``, with no bound of their own (the utilisation's int division is
CPython's, written out for int64 operands: ``core.int_ratio``); a plug-in policy falls back
(``routing: <name> (slice 2)``).

Every receiver model is compiled: ``ddp``, ``go_back_n`` (NAK on a gap, the sender's rewind on NAK
and on timeout) and ``reorder_buffer`` (a unit beyond a gap held only if its host's buffer has room,
else discarded with a duplicate ACK; unless ``receiver.buffer`` is 2^62 bytes or more, compared in
int64), each with one ACK per unit or with ACK coalescing (``receiver.ack_every > 1``: AckReq units,
the delayed-ACK timer, SACK bitmaps, RACK and probes within the bitmap's reach), and with cells
(``simulation.cell_packets > 1``: units of several MTU packets; a cell's wire bytes times a link's
``PS_BITS / rate`` denominator must fit in int64, as a packet's do). PFC
(``switch.pfc.enabled``) is compiled, lossless switches and paused NIC ports alike, unless a
lossless queue's drain time could leave int64 (the time limit x the fabric's total port rate over
its slowest port's, of 2^61 ps or more). Both timer modes are compiled (``receiver.rto_mode:
fixed`` and ``adaptive``), with either compiled receiver, with or without coalescing. What stays
outside is stated by the reasons it comes with: an ``rto_max`` whose jittered product would leave
int64 (docs/compiled-core.md 3.1), and
with coalescing a delayed-ACK timer past int64 (the time limit plus ``ack_delay`` of 2^62 ps or
more) or, with adaptive timeouts, a wait allowance of 2^61 ps or more (``ack_delay`` plus
``ack_every`` units at a host's line rate, added to the timeout's base in int64). Congestion
control ``none`` and ``telemetry`` are compiled, the latter with INT stamped by lossy and lossless
switches (INT without a controller, ``switch.telemetry: on``, too), with or without ACK coalescing
(a coalesced ACK echoes the INT of the latest-sent unit it covers, a D-SACK its duplicate's), for
time limits below 2^53 ps (its int-float comparisons); and so are ``dcqcn`` and ``dcqcn_cx`` (the
receiver's CNPs, the reaction point, the alpha, rate-increase and rate-cut-check timers, the byte
counter), unless a timer could be set past int64 (the time limit plus the algorithm's longest period
of 2^62 ps or more) or the byte counter is 2^62 bytes or more. Every ``switch.strict_priority`` is
compiled: CNPs (and with ``control`` ACKs and NAKs) cross a lossy port's strict-priority lane
(``Switch.priority``) or a lossless port's strict FIFO. Hosts with several NIC ports (multi-plane
NICs, ``nic.plane_split`` ``per_packet`` or ``per_flow``) and NVLink domains with credit flow control
(``nvlink.transport: credit``) are compiled, and so is PXN (``nic.pxn``: a message's pieces relayed
through a GPU of its domain, each with a message row of its own), with every receiver, timer mode,
ACK coalescing and congestion control above (a CNP, like an ACK, leaves by ``reply_nic``'s port; the
rate a DCQCN controller sets paces its queue pair over all its ports; an NVLink queue pair has no ACK,
timer or controller, and its chips neither mark nor stamp, so it never sees a CNP). Persistent
connections (``conn >= 0``: the NIC's send-completion hook, the RTT estimator's ``heir`` chain, the
connection lifecycle in Python) are compiled with all of the above, and so are shared switch buffers
on lossy switches (a plain pool or ``switch.buffer.admission: dynamic``), unless the bytes that can
reach a switch by the time limit, times the least common multiple of its ports' ``rd``, reach 2^62,
or with the pool's size 2^52 (its exact running sums in int64, the dynamic threshold's float
comparison).
"""
from __future__ import annotations

import math

import numpy as np

from ...net.port import PS_BITS
from ...net.sender import ack_wait_ps

#: routing policies, receiver models and congestion-control algorithms compiled so far
ROUTING = ("ecmp", "spray", "adaptive", "flowlet", "pinned")
RECEIVERS = ("ddp", "go_back_n", "reorder_buffer")
CC = ("none", "telemetry", "dcqcn", "dcqcn_cx")


def uncovered(engine) -> list[str]:
    """The features of ``engine`` outside the compiled slice (empty: it can run compiled)."""
    sc = engine.sim.scenario
    out = []
    try:
        import numba
    except ImportError:
        out.append("numba is not installed")
    else:
        if getattr(numba.config, "USING_SVML", False):
            # Intel's short vector math library may round log() differently from libm (the
            # latency histogram's bucket): set NUMBA_DISABLE_INTEL_SVML=1
            out.append("numba with Intel SVML (set NUMBA_DISABLE_INTEL_SVML=1)")
    if sc.routing.name not in ROUTING:
        out.append(f"routing: {sc.routing.name} (slice 2)")
    if sc.receiver.name not in RECEIVERS:
        out.append(f"receiver: {sc.receiver.name} (slice 3)")
    p = sc.receiver.params
    if sc.receiver.name == "reorder_buffer" and p.buffer >= 1 << 62:
        # a host's held bytes plus a unit are compared with it in int64
        out.append("receiver.buffer of 2^62 bytes or more with receiver: reorder_buffer (slice 7)")
    if p.rto_mode == "adaptive" and (p.rto_max >= 1 << 62 or (p.rto_max - 1) * engine.sender.rto_jit >= 1 << 63):
        # the jittered timeout r * jitter * u is formed as mul_shr(r * jitter, u) with r < rto_max
        # (net/sender.py adaptive_rto_ps): r * jitter must fit in int64 (rto_max below 35 s at jitter 4)
        out.append("receiver.rto_max x rto_jitter x 65536 of 2^63 ps or more, or rto_max of 2^62 ps or more, "
                   "with rto_mode: adaptive (slice 7)")
    limit = int(sc.simulation.time_limit)
    longest = p.rto_max if p.rto_mode == "adaptive" else max(p.rto_low, p.rto_high)
    if limit + longest >= 1 << 62:
        # a timer is set at t + timeout with t up to the time limit: that sum must stay in int64
        out.append("simulation.time_limit plus the longest retransmission timeout of 2^62 ps (53 days) or more "
                   "(slice 7)")
    coalesced = p.ack_every > 1
    if coalesced and limit + p.ack_delay >= 1 << 62:
        # the delayed-ACK timer is set at t + ack_delay
        out.append("simulation.time_limit plus receiver.ack_delay of 2^62 ps or more with ack_every > 1 (slice 7)")
    snd = engine.sender
    if coalesced and p.rto_mode == "adaptive" and any(
            ack_wait_ps(snd.ack_wait_ps, snd.ack_wait_bytes, nic.port.rate) >= 1 << 61
            for nics in engine.nics.values() for nic in nics if not nic.nvlink):
        # the adaptive timeout's allowance for a coalesced ACK is added to its base in int64
        # (net/sender.py adaptive_rto_ps), at the line rate of each host's port
        out.append("receiver.ack_delay plus ack_every units at a host's line rate of 2^61 ps or more, with "
                   "rto_mode: adaptive (slice 7)")
    table = engine.replay.table
    units = -(-int(np.max(table.size_bytes, initial=0)) // sc.simulation.mtu) + 1
    if limit * units >= 1 << 62:
        # a message's reorder waits (each at most the time limit, one per unit) are summed in int64
        out.append("simulation.time_limit x the units of the largest message of 2^62 ps or more (slice 7)")
    if sc.congestion_control.name not in CC:
        out.append(f"congestion_control: {sc.congestion_control.name} (slice 5)")
    elif sc.congestion_control.name == "telemetry" and limit >= 1 << 53:
        # the controller compares and converts int times (INT timestamps, spans) with floats: exact
        # in both kernels only below 2^53 (CPython compares an int with a float exactly, numba
        # converts the int)
        out.append("congestion_control: telemetry with simulation.time_limit of 2^53 ps (2.5 hours) or more "
                   "(slice 7)")
    elif sc.congestion_control.name in ("dcqcn", "dcqcn_cx"):
        # its timers are set at t + a period (the cut check of dcqcn_cx at most one monitor period after t),
        # and its byte count stays below the byte counter plus one unit: both in int64
        cc = engine.cc
        periods = (cc._k, cc._ti) if sc.congestion_control.name == "dcqcn" else (cc._p, cc._d, cc._ti)
        if limit + max(periods) >= 1 << 62 or cc._b >= 1 << 62:
            out.append(f"congestion_control: {sc.congestion_control.name} with simulation.time_limit plus its "
                       f"longest timer period, or its byte counter, of 2^62 (ps, bytes) or more (slice 7)")
    if engine.pfc is not None and engine.ports:
        # a lossless queue's drain time (its peak, busy_until) is formed in int64: the bytes a port
        # can hold are at most what reached its switch by the time limit, so the drain time is at
        # most limit x (the fabric's total port rate / the port's rate)
        rates = [q.rate for q in engine.ports]
        if limit * (sum(rates) // min(rates) + 1) >= 1 << 61:
            out.append("switch.pfc with simulation.time_limit x (total port rate / slowest port rate) of 2^61 ps "
                       "or more (slice 7)")
    sws = engine.switches.values()
    if any(_pool_too_big(engine, sw, limit) for sw in sws if getattr(sw, "shared", None) is not None):
        out.append("a shared switch buffer whose bytes (at most what reaches the switch by simulation.time_limit) "
                   "times the common denominator of its ports' rates reach 2^62, or with its size 2^52 (slice 7)")
    sim = sc.simulation
    # the largest packet: data (a cell of cell_packets MTU packets with their headers; with INT, its stack:
    # at most one record per switch) or ACK (a coalesced ACK carries its SACK bitmap; INT echoed by an ACK
    # adds no bytes)
    stamps = [sw for sw in sws if getattr(sw, "stamp", False)]
    grown = max(sw.int_first for sw in stamps) + (len(sws) - 1) * max(sw.int_hop for sw in stamps) if stamps else 0
    wire = max(engine.cell * (sim.mtu + sim.header) + grown,
               p.ack_size + (-(-p.sack_bitmap // 8) if coalesced else 0))
    if wire * max((rate_fraction(q.rate)[1] for q in engine.ports), default=1) >= 1 << 63:
        # wire * rd (= wire * ps per byte when the rate divides PS_BITS) in int64: packets up to
        # 1,152,921 B at any rate
        out.append("a packet (cell_packets x (simulation.mtu + header) and its INT, or receiver.ack_size) whose size "
                   "times a link's PS_BITS / rate numerator reaches 2^63 (slice 7)")
    if any(not q.ps_per_byte and (_fraction_too_fine(q.rate) or q.rate > PS_BITS) for q in engine.ports):
        out.append("a link rate that does not divide 8e12 bit-ps per byte and whose reduced fraction needs "
                   "62 bits or more, or above 8 Tbit/s (slice 7)")
    return out


def _pool_too_big(engine, sw, limit: int) -> bool:
    """True if the compiled core's exact arithmetic of ``sw``'s shared buffer could leave int64
    (core.py ``_pool_used``): its running sum is ``L`` (the least common multiple of the pooled
    ports' ``rd``) times the bytes queued in the switch, which are at most the bytes that reach it
    by the time limit (its input links' rates); the dynamic threshold compares those bytes and the
    pool's size with a float, exactly below 2^53."""
    pool = sw.shared
    inrate = sum(p.rate for p in engine.ports if p.peer == sw.id)
    held = limit * inrate // PS_BITS + 1
    L = 1
    for p in pool.ports:
        rd = rate_fraction(p.rate)[1]
        L = L * rd // math.gcd(L, rd)
    return L * (held + 1) >= 1 << 62 or held + pool.size >= 1 << 52


def rate_fraction(rate_bps: int) -> tuple[int, int]:
    """``(rn, rd)``: ``PS_BITS / rate`` as the reduced fraction ``rd / rn`` (ps per byte), which
    the compiled core's serialisation and backlog arithmetic use when the rate does not divide
    ``PS_BITS`` (then ``rn > 1``; 400G: ``(1, 20)``, 300G: ``(3, 80)``).

    >>> rate_fraction(300_000_000_000)
    (3, 80)
    """
    g = math.gcd(rate_bps, PS_BITS)
    return rate_bps // g, PS_BITS // g


def _fraction_too_fine(rate_bps: int) -> bool:
    """True if ``rn * rd >= 2^62`` (:func:`rate_fraction`): the compiled core's exact backlog
    arithmetic (core.py ``_backlog_bytes``) then could overflow int64. Every rate in whole
    Mbit/s up to 4 Tbit/s passes."""
    rn, rd = rate_fraction(rate_bps)
    return rn * rd >= 1 << 62
