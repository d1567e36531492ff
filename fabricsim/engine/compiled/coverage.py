"""What the compiled core runs, checked on the built engine (docs/compiled-core.md 4.3).

:func:`uncovered` lists every feature of a built :class:`~fabricsim.engine.packet.PacketEngine`
that the compiled slices do not run yet, one short phrase each, with the slice that will. An
empty list: the run is compiled. Otherwise it runs on ``heap`` (the same model in Python) and
says why, so nothing is ever simplified silently.

Two receiver models are compiled, ``ddp`` and ``go_back_n`` (NAK on a gap, the sender's rewind
on NAK and on timeout), both with one ACK per unit; ``reorder_buffer`` runs on heap
(``receiver: reorder_buffer (slice 3)``), and so does any receiver with ACK coalescing
(``receiver.ack_every > 1 (slice 4)``). PFC (``switch.pfc.enabled``) is compiled, lossless
switches and paused NIC ports alike, unless a lossless queue's drain time could leave int64 (the
time limit x the fabric's total port rate over its slowest port's, of 2^61 ps or more). Both timer modes are
compiled (``receiver.rto_mode: fixed`` and ``adaptive``), with either compiled receiver. Of
adaptive timeouts, what stays outside is stated by the reasons it comes with: ACK coalescing (its
wait allowance and SACK-bitmap reach: ``ack_every > 1``), persistent connections (the estimator's
``heir`` chain), and an ``rto_max`` whose jittered product would leave int64
(docs/compiled-core.md 3.1). Hosts with several NIC ports (multi-plane NICs, ``nic.plane_split``
``per_packet`` or ``per_flow``) and NVLink domains with credit flow control (``nvlink.transport:
credit``) are compiled, and so is PXN (``nic.pxn``: a message's pieces relayed through a GPU of its
domain, each with a message row of its own).
"""
from __future__ import annotations

import math

import numpy as np

from ...net.port import PS_BITS

#: routing policies, receiver models and congestion-control algorithms compiled so far
ROUTING = ("ecmp", "spray", "adaptive")
RECEIVERS = ("ddp", "go_back_n")
CC = ("none",)


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
    elif sc.routing.name == "adaptive":
        rp = sc.routing.params
        if rp.exact:
            out.append("routing.exact: true (slice 7)")
        elif rp.metric != "queue":
            out.append(f"routing.metric: {rp.metric} (slice 2)")
    if sc.receiver.name not in RECEIVERS:
        out.append(f"receiver: {sc.receiver.name} (slice 3)")
    p = sc.receiver.params
    if p.ack_every != 1:
        out.append("receiver.ack_every > 1 (slice 4)")
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
    table = engine.replay.table
    units = -(-int(np.max(table.size_bytes, initial=0)) // sc.simulation.mtu) + 1
    if limit * units >= 1 << 62:
        # a message's reorder waits (each at most the time limit, one per unit) are summed in int64
        out.append("simulation.time_limit x the units of the largest message of 2^62 ps or more (slice 7)")
    if sc.congestion_control.name not in CC:
        out.append(f"congestion_control: {sc.congestion_control.name} (slice 5)")
    if engine.pfc is not None and engine.ports:
        # a lossless queue's drain time (its peak, busy_until) is formed in int64: the bytes a port
        # can hold are at most what reached its switch by the time limit, so the drain time is at
        # most limit x (the fabric's total port rate / the port's rate)
        rates = [q.rate for q in engine.ports]
        if limit * (sum(rates) // min(rates) + 1) >= 1 << 61:
            out.append("switch.pfc with simulation.time_limit x (total port rate / slowest port rate) of 2^61 ps "
                       "or more (slice 7)")
    if engine.cell != 1:
        out.append("simulation.cell_packets > 1 (slice 4)")
    sws = engine.switches.values()
    if any(getattr(sw, "shared", None) is not None for sw in sws):
        out.append("a shared switch buffer (slice 4)")
    if any(getattr(sw, "stamp", False) for sw in sws):
        out.append("in-band telemetry (slice 5)")
    if any(sw.strict[1] or sw.strict[2] for sw in sws if hasattr(sw, "strict")):
        out.append("switch.strict_priority with ACK/NAK in the strict class (slice 5)")
    sim = sc.simulation
    wire = max(sim.mtu + sim.header, getattr(sc.receiver.params, "ack_size", 0))   # the largest packet: data or ACK
    if wire * max((rate_fraction(q.rate)[1] for q in engine.ports), default=1) >= 1 << 63:
        # wire * rd (= wire * ps per byte when the rate divides PS_BITS) in int64: packets up to
        # 1,152,921 B at any rate
        out.append("a packet (simulation.mtu + header, or receiver.ack_size) whose size times a link's "
                   "PS_BITS / rate numerator reaches 2^63 (slice 7)")
    if any(not q.ps_per_byte and (_fraction_too_fine(q.rate) or q.rate > PS_BITS) for q in engine.ports):
        out.append("a link rate that does not divide 8e12 bit-ps per byte and whose reduced fraction needs "
                   "62 bits or more, or above 8 Tbit/s (slice 7)")
    if len(table) and bool(np.any(np.asarray(table.conn) >= 0)):
        out.append("persistent connections (slice 4: the NIC's send-completion hook)")
    return out


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
