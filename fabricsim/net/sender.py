"""Sender side of the transport: acknowledgements, loss detection, retransmission, CC hooks.

Every queue pair keeps the sender state of a RoCE requester (see :class:`~fabricsim.net.packet.QueuePair`).
What the sender does with each control packet from the receiver:

ACK, per-unit format (cumulative PSN ``seq``, the PSN ``sack`` of the unit that triggered it, or -1,
its send time, echoed ECN marks and telemetry)
    acknowledges everything below ``seq`` and, selectively, ``sack``; frees that many bytes of the
    window; then runs RACK-style loss detection (Cheng et al., RFC 8985, time-based): a unit still
    unacknowledged although a unit sent more than ``reorder_window`` after it has been
    acknowledged is presumed lost and queued for retransmission (cause ``sack``). The reorder
    window keeps spraying's reordering from being mistaken for loss; when an ACK shows that the
    original copy of a resent unit arrived after all, the queue pair doubles its window (up to 16x),
    as RACK does on a DSACK.
ACK, coalesced format (``receiver.ack_every > 1``: ``sacks`` is a bitmap of the units held beyond
``seq``, ``t_data`` the latest send time among the units covered)
    the same, with every unit of the bitmap acknowledged selectively; RACK presumes nothing lost
    beyond the bitmap's reach (``sack_bitmap`` units), where a unit may be held unreported.
D-SACK (``dsack`` >= 0: a duplicate of that PSN arrived; outside the legacy set-up)
    a resend was spurious: counted, and the reorder window widens once per episode; a D-SACK
    advances RACK only if the duplicate is a timeout probe (the tail-loss probe's evidence).
NAK (go-back-N receivers; ``seq`` = the expected PSN)
    acknowledges everything below ``seq`` and rewinds: the sender resends from ``seq`` (cause
    ``nak``). A NAK triggered by a unit sent before the last rewind is stale and ignored (the
    rewind already covers it).
CNP
    calls the congestion-control algorithm's ``on_cnp`` (DCQCN's reaction point).

A retransmission timer per queue pair fires when nothing was acknowledged for its timeout
(``receiver.rto_mode``, see :class:`~fabricsim.receiver.TransportParams`). ``fixed`` (IRN, Mittal
et al. SIGCOMM 2018: ``rto_low`` when at most ``rto_low_packets`` units are in flight, else
``rto_high``): every outstanding unit is presumed lost (selective receivers) or the sender rewinds
to the acknowledged prefix (go-back-N). ``adaptive`` (ConnectX-like): a randomised microsecond
timeout that doubles with each expiry without progress, after which a selective sender resends one
probe unit; cause ``timeout`` in both. After ``retry_limit`` consecutive timeouts without progress
the message fails with reason ``retry_exceeded`` (as a RoCE QP goes to the error state after
retry_cnt).

:meth:`Sender.counters` gives the run's transport counters, including the byte balance
``injected + retransmitted = delivered + duplicate + discarded + dropped + in_network``.
"""
from __future__ import annotations

from operator import attrgetter

from ..cc.base import AckInfo, CongestionControl
from .packet import ACK, CNP, DATA, NAK, mix64
from .port import PS_BITS


class Sender:
    def __init__(self, engine, params, cc, selective: bool):
        self.engine = engine
        self.kernel = engine.kernel
        self.mtu = engine.mtu
        self.cell = engine.cell
        self.seg = engine.mtu * engine.cell
        self.cc = cc
        self.selective = selective          # False: go-back-N
        self.reo = params.reorder_window
        self.rto_low = params.rto_low
        self.rto_high = params.rto_high
        self.rto_low_units = params.rto_low_packets
        self.retry_limit = params.retry_limit
        self._cc_ack = cc.on_ack if type(cc).on_ack is not CongestionControl.on_ack else None
        self._cc_done = cc.on_done if type(cc).on_done is not CongestionControl.on_done else None
        self.timeouts = 0
        self.naks_ignored = 0
        self.spurious = 0                   # retransmissions found spurious (window widened)
        self.reo_max = 16 * params.reorder_window
        self.adaptive = params.rto_mode == "adaptive"
        self.dsack = params.reports_duplicates
        self.rto_min = params.rto_min
        self.rto_max = params.rto_max
        self.rto_jit = round(params.rto_jitter * 65536)   # jitter fraction in 1/65536
        k = params.rto_rttvar_mult
        self.rto_k = k if k is not None else (0 if selective else 4)
        self.salt = engine.sim.streams.u64("transport.rto")
        # with ACK coalescing an ACK is due only after ack_every units (or the receiver's delayed-ACK
        # timer): an adaptive timeout shorter than that would probe before the ACK could be back
        coalesced = params.ack_every > 1
        self.ack_wait_bytes = params.ack_every * (engine.mtu + engine.header) if coalesced else 0
        self.ack_wait_ps = params.ack_delay if coalesced else 0
        self.sack_reach = params.sack_bitmap * engine.cell if coalesced else 0
        self.probes = 0                     # adaptive timeouts: probe units resent
        self.spurious_probes = 0            # ... of which D-SACKed: the original had arrived
        self.dsacks = 0                     # ACKs naming a duplicate

    # ----------------------------------------------------------------- helpers
    def payload(self, qp, psn: int) -> int:
        p = qp.size - psn * self.mtu
        return p if p < self.seg else self.seg

    def rto(self, qp) -> int:
        """The retransmission timeout of ``qp`` now (see :class:`~fabricsim.receiver.TransportParams`)."""
        if not self.adaptive:
            return self.rto_low if len(qp.outstanding) <= self.rto_low_units else self.rto_high
        est = qp if qp.heir is None else self._estimator(qp)
        srtt = est.srtt
        # (once the last unit is out no ACK waits for more: the last unit requests one)
        wait = (ack_wait_ps(self.ack_wait_ps, self.ack_wait_bytes, qp.flow.line_bps)
                if self.ack_wait_bytes and qp.high < qp.npsn else 0)
        # the idle round trip is read only before the first RTT sample (it is worked out when first read)
        return adaptive_rto_ps(self.rto_min, 0 if srtt else qp.flow.base_rtt_ps, srtt, est.rttvar, self.rto_k,
                               wait, qp.timeouts, self.rto_jit, qp.rto_u, self.rto_max)

    def _draw(self, qp):
        """A new jitter draw for ``qp`` (at its first send and after each expiry): a counter-based
        hash of (seed, queue pair, draw number), so it does not depend on event order."""
        qp.rto_draws += 1
        qp.rto_u = rto_draw(self.salt, qp.uid, qp.rto_draws)

    @staticmethod
    def _estimator(qp):
        """The queue pair holding ``qp``'s RTT estimator: on a persistent connection its latest
        message's (``heir`` chain, compressed as it is walked)."""
        last = qp
        while last.heir is not None:
            last = last.heir
        while qp.heir is not None and qp.heir is not last:
            qp.heir, qp = last, qp.heir
        return last

    def _rtt_sample(self, qp, r: int):
        """RFC 6298 smoothed RTT and variation (integer ps, gains 1/8 and 1/4). On a persistent
        connection the estimator is the queue pair's latest message's (``qp.heir``)."""
        if qp.heir is not None:
            qp = self._estimator(qp)
        qp.srtt, qp.rttvar = rtt_estimate(qp.srtt, qp.rttvar, r)

    def arm(self, qp, t):
        """Start the retransmission timer of ``qp`` (called when it sends with no timer running)."""
        qp.rto_armed = True
        if self.adaptive and not qp.rto_draws:
            self._draw(qp)
        qp.rto_at = t + self.rto(qp)
        self.kernel.schedule(qp.rto_at, self._on_rto, qp)

    def kick(self, t, qp):
        for nic in qp.nics:
            nic.add(t, qp)

    # ----------------------------------------------------------------- control packets
    def on_ctrl(self, t, pkt):
        kind = pkt.kind
        qp = pkt.qp
        if qp.sent_done:
            return
        if kind == ACK:
            self._on_ack(t, qp, pkt)
        elif kind == NAK:
            self._on_nak(t, qp, pkt)
        elif kind == CNP:
            qp.msg.cnps += 1
            self.cc.on_cnp(qp.flow, t)

    def _advance(self, t, qp, cum: int) -> int:
        """Cumulative acknowledgement up to ``cum``: bytes newly acknowledged."""
        newly = 0
        if cum > qp.una:
            psn = qp.una
            sacked = qp.sacked
            lost = qp.lost
            cell = self.cell
            while psn < cum:
                if psn in sacked:
                    sacked.discard(psn)
                elif psn in lost:
                    lost.discard(psn)         # presumed lost, arrived after all: nothing to free
                else:
                    newly += self.payload(qp, psn)
                psn += cell
            qp.una = cum
            qp.timeouts = 0
            qp.rto_at = t + self.rto(qp)
            flow = qp.flow
            end = cum * self.mtu
            flow.acked_bytes = end if end < qp.size else qp.size
        return newly

    def _on_ack(self, t, qp, pkt):
        newly = self._advance(t, qp, pkt.seq)
        s = pkt.sack
        lost = qp.lost
        if s >= 0:
            if s >= qp.una and s not in qp.sacked:
                qp.sacked.add(s)
                if s in lost:
                    lost.discard(s)
                else:
                    newly += self.payload(qp, s)
            if pkt.t_data > qp.rack_t:
                qp.rack_t = pkt.t_data
            r = qp.resent.get(s)
            if r is not None and pkt.t_data < r:
                # the original copy of a unit we resent has arrived: the retransmission was
                # spurious, reordering exceeded the window. Widen it (RACK's DSACK adaptation).
                self.spurious += 1
                if not self.dsack:
                    qp.reo = min(2 * (qp.reo or self.reo), self.reo_max)
                else:
                    qp.resent[s] = -1         # counted now: the resend's D-SACK will not count again
                    if r > qp.reo_t:
                        qp.reo = min(2 * (qp.reo or self.reo), self.reo_max)
                        qp.reo_t = t
        elif self.dsack:
            bm = pkt.sacks
            if bm:                            # coalesced ACK: bitmap of held units beyond seq
                base = pkt.seq
                una = qp.una
                sacked = qp.sacked
                cell = self.cell
                while bm:
                    low = bm & -bm
                    psn = base + (low.bit_length() - 1) * cell
                    bm ^= low
                    if psn >= una and psn not in sacked:
                        sacked.add(psn)
                        if psn in lost:
                            lost.discard(psn)
                        else:
                            newly += self.payload(qp, psn)
            d = pkt.dsack
            if d < 0:
                if pkt.t_data > qp.rack_t:
                    qp.rack_t = pkt.t_data
            else:                             # a duplicate arrived: some resend of it was not needed
                self.dsacks += 1
                probed = qp.probed
                if probed and d in probed:
                    self.spurious_probes += 1
                    probed.discard(d)
                    if pkt.t_data == qp.resent.get(d) and pkt.t_data > qp.rack_t:
                        # the probe itself arrived (its original had too): what was sent well before
                        # it and is still unacknowledged is lost (tail-loss probe)
                        qp.rack_t = pkt.t_data
                else:
                    r = qp.resent.get(d)
                    if r is not None and r >= 0:
                        # RACK's D-SACK adaptation, once per episode: the window widens for a
                        # resend made after the last widening, not for each unit of one burst
                        # (RFC 8985 widens once per round trip). A D-SACKed unit does not advance RACK.
                        self.spurious += 1
                        if r > qp.reo_t:
                            qp.reo = min(2 * (qp.reo or self.reo), self.reo_max)
                            qp.reo_t = t
        if self.adaptive and pkt.t_data > 0:
            self._rtt_sample(qp, t - pkt.t_data)
        qp.out_bytes -= newly
        if newly:
            qp.timeouts = 0                   # progress (cumulative or selective) restarts the timer
            qp.rto_at = t + self.rto(qp)
        found = False
        if self.selective:
            limit = qp.rack_t - (qp.reo or self.reo)
            out = qp.outstanding
            una = qp.una
            sacked = qp.sacked
            resent = qp.resent
            while out:
                psn, ts = out[0]
                if psn < una or psn in sacked or (psn in resent and resent[psn] != ts) or psn in lost:
                    out.popleft()             # acknowledged, or a stale copy of a resent unit
                    continue
                if ts >= limit:
                    break
                if self.sack_reach:
                    found = self._rack_scan(qp, limit)
                    break
                out.popleft()
                lost.add(psn)
                qp.out_bytes -= self.payload(qp, psn)
                qp.rtx.append((psn, "sack"))
                found = True
        else:
            out = qp.outstanding
            while out and out[0][0] < qp.una:
                out.popleft()
        if qp.una >= qp.npsn:
            self._finish(t, qp)
            return
        if self._cc_ack is not None:
            end = pkt.seq * self.mtu
            self._cc_ack(qp.flow, t, AckInfo(end if end < qp.size else qp.size, newly, pkt.ce, pkt.tel,
                                             t - pkt.t_data))
        if found or newly:
            self.kick(t, qp)

    def _rack_scan(self, qp, limit) -> bool:
        """RACK with coalesced ACKs: presume lost the units sent before ``limit`` that are within
        reach of the SACK bitmap; a unit beyond it may be held at the receiver unreported, so it is
        skipped (left in place), not presumed lost. Units marked lost stay in ``outstanding`` until
        they reach its front."""
        una = qp.una
        reach = una + self.sack_reach
        sacked = qp.sacked
        resent = qp.resent
        lost = qp.lost
        rtx = qp.rtx
        found = False
        for psn, ts in qp.outstanding:
            if ts >= limit:
                break
            if psn >= reach or psn < una or psn in sacked or psn in lost or (psn in resent and resent[psn] != ts):
                continue
            lost.add(psn)
            qp.out_bytes -= self.payload(qp, psn)
            rtx.append((psn, "sack"))
            found = True
        return found

    def _on_nak(self, t, qp, pkt):
        e = pkt.seq
        newly = self._advance(t, qp, e)
        qp.msg.naks += 1
        if pkt.t_data < qp.goback_t:
            self.naks_ignored += 1           # triggered by a unit sent before the last rewind
            return
        if e < qp.seq:
            self._rewind(t, qp, e, "nak")
        else:
            qp.out_bytes -= newly
        if self._cc_ack is not None:
            end = e * self.mtu
            self._cc_ack(qp.flow, t, AckInfo(end if end < qp.size else qp.size, newly, pkt.ce, pkt.tel,
                                             t - pkt.t_data))
        self.kick(t, qp)

    def _rewind(self, t, qp, psn, cause):
        qp.seq = psn
        qp.gb_cause = cause
        qp.goback_t = t
        qp.outstanding.clear()
        qp.rtx.clear()
        qp.lost.clear()
        qp.out_bytes = 0

    def counters(self, balance: dict) -> dict:
        """Run counters of the transport (merged into the summary's ``run`` section).

        Byte totals are over the whole run, including what happens after a message completed
        (its last ACK still on the way back: the sender may still resend), so that for the data
        payload ``injected + retransmitted = delivered + duplicate + discarded + dropped +
        in_network`` holds at the end of the run (``discarded``: go-back-N and reorder-buffer
        discards; ``in_network``: payload of data units still on a link or in a queue). The totals
        are the engine's balance, ``balance``: ``PacketEngine.conservation()["data"]``, summed over
        the same flows (every message and PXN piece with queue pairs) and the same packets in
        the network (``PacketEngine.in_flight``): one count of each, not two.
        """
        eng = self.engine
        states = [st for st in eng.states.values() if st.qps] + [p for p in eng.pieces if p.qps]
        # (summed over the flows by map: a 1,024-GPU all-to-all has a million of them)
        rtx = sum(sum(rb.values()) for rb in map(attrgetter("rtx_bytes"), states) if rb)
        return {
            "retransmission_timeouts": self.timeouts,
            "stale_naks_ignored": self.naks_ignored,
            "spurious_retransmissions_detected": self.spurious,
            "timeout_probes": self.probes,
            "spurious_timeout_probes": self.spurious_probes,
            "dsacks_received": self.dsacks,
            "sent_payload_bytes": balance["sent_payload_bytes"],
            "retransmitted_payload_bytes": rtx,
            "duplicate_payload_bytes": balance["duplicate_payload_bytes"],
            "discarded_payload_bytes": balance["discarded_payload_bytes"],
            "in_network_payload_bytes": balance["in_flight_payload_bytes"],
        }

    def _finish(self, t, qp):
        qp.sent_done = True
        qp.out_bytes = 0
        flow = qp.flow
        flow.active = False
        if self._cc_done is not None:
            self._cc_done(flow, t)

    # ----------------------------------------------------------------- timer
    def _probe(self, qp):
        """Adaptive timeout, selective sender: resend one unit, the lowest unacknowledged PSN (or the
        earliest sent unacknowledged unit if that one is already queued for resending). If it was
        lost, it fills the hole; if it was only delayed, its duplicate is D-SACKed. Either way its
        ACK carries its send time, and RACK presumes lost what was sent ``reorder_window`` before it."""
        out = qp.outstanding
        una = qp.una
        sacked = qp.sacked
        lost = qp.lost
        resent = qp.resent
        while out:
            psn, ts = out[0]
            if psn < una or psn in sacked or psn in lost or (psn in resent and resent[psn] != ts):
                out.popleft()
                continue
            break
        if una not in lost and una < qp.high:
            # the lowest unacknowledged PSN (RoCE resends from there): the hole that holds the
            # cumulative ACK back, and that a reorder buffer needs filled before anything else fits
            self._probe_unit(qp, una)
            return
        # else the earliest sent unit still unacknowledged, within reach of the SACK bitmap
        # (beyond it, units may be held at the receiver unreported)
        reach = una + self.sack_reach if self.sack_reach else qp.npsn
        for psn, ts in out:
            if psn >= reach or psn in sacked or psn in lost or (psn in resent and resent[psn] != ts):
                continue
            self._probe_unit(qp, psn)
            return

    def _probe_unit(self, qp, psn):
        qp.lost.add(psn)
        qp.out_bytes -= self.payload(qp, psn)
        qp.rtx.appendleft((psn, "timeout"))
        if qp.probed is None:
            qp.probed = set()
        qp.probed.add(psn)
        self.probes += 1

    def _on_rto(self, t, qp):
        if qp.sent_done or qp.una >= qp.high and not qp.rtx and qp.seq >= qp.npsn:
            qp.rto_armed = False
            return
        if qp.una >= qp.high:                  # nothing in flight (waiting for the window or pacing)
            qp.rto_armed = False
            return
        if t < qp.rto_at:
            self.kernel.schedule(qp.rto_at, self._on_rto, qp)
            return
        qp.timeouts += 1
        self.timeouts += 1
        if self.adaptive:
            self._draw(qp)
        if qp.timeouts > self.retry_limit:
            qp.rto_armed = False
            self.engine.fail_qp(qp, t, "retry_exceeded")
            return
        if self.adaptive and self.selective:
            self._probe(qp)
        elif self.selective:
            lost = qp.lost
            una = qp.una
            sacked = qp.sacked
            resent = qp.resent
            for psn, ts in qp.outstanding:
                if psn < una or psn in sacked or psn in lost or (psn in resent and resent[psn] != ts):
                    continue
                lost.add(psn)
                qp.out_bytes -= self.payload(qp, psn)
                qp.rtx.append((psn, "timeout"))
            qp.outstanding.clear()
        else:
            self._rewind(t, qp, qp.una, "timeout")
        qp.rto_at = t + self.rto(qp)
        self.kernel.schedule(qp.rto_at, self._on_rto, qp)
        self.kick(t, qp)


# ---------------------------------------------------------------------- shared arithmetic
# Plain functions over ints: the Python sender calls them, and the compiled core
# (fabricsim/engine/compiled/core.py) compiles them from this source, so both kernels time out alike.


def mul_shr(a: int, u: int, s: int) -> int:
    """``(a * u) >> s`` for ``0 <= a < 2**63``, ``0 <= u < 2**31`` and ``s >= 32``, without a
    product above 2**63: ``a = a_hi * 2**32 + a_lo`` gives
    ``(a * u) >> s == (a_hi * u + ((a_lo * u) >> 32)) >> (s - 32)`` exactly (the low 32 bits of
    ``a_hi * u * 2**32`` are zero). In Python's integers it is exact for any ``a, u >= 0``.

    >>> mul_shr(2**62 + 12345, 2**24 - 1, 40) == ((2**62 + 12345) * (2**24 - 1)) >> 40
    True
    """
    return ((a >> 32) * u + (((a & 0xFFFFFFFF) * u) >> 32)) >> (s - 32)


def adaptive_rto_ps(rto_min_ps: int, idle_rtt_ps: int, srtt_ps: int, rttvar_ps: int, rttvar_mult: int,
                    wait_ps: int, timeouts: int, jitter_q16: int, u: int, rto_max_ps: int) -> int:
    """The adaptive retransmission timeout (ps; ``receiver.rto_mode: adaptive``, see
    :class:`~fabricsim.receiver.TransportParams`): ``min(rto_max, B * 2**k * (1 + jitter * u / 2**24))``
    with the product rounded down, ``k = min(timeouts, 30)`` and
    ``B = max(rto_min, srtt + rttvar_mult * rttvar)`` (before the first RTT sample, ``srtt_ps == 0``:
    ``max(rto_min, 2 * idle_rtt)``), plus ``wait_ps`` (the ACK-coalescing allowance).

    ``jitter_q16`` is ``rto_jitter`` in 1/65536 and ``u`` the queue pair's draw in ``[0, 2**24)``
    (:func:`rto_draw`). A back-off that reaches ``rto_max`` returns it before any product is
    formed (the jitter only adds), so with ``rto_max * jitter_q16 < 2**63`` every intermediate
    fits in int64 (docs/compiled-core.md 3.1; the compiled core's coverage checks the bound).

    >>> adaptive_rto_ps(4_000_000, 6_000_000, 0, 0, 0, 0, 0, 32768, 0, 10**9)   # 2 x the idle RTT
    12000000
    >>> adaptive_rto_ps(4_000_000, 0, 5_000_000, 1_000_000, 4, 0, 3, 32768, 1 << 23, 10**9)
    90000000
    >>> adaptive_rto_ps(4_000_000, 0, 5_000_000, 1_000_000, 4, 0, 30, 32768, 1 << 23, 10**9)
    1000000000
    """
    base = rto_min_ps
    if not srtt_ps:
        # no RTT sample yet: twice the idle round trip (TLP's 2 x srtt, with the idle RTT as
        # the guess), so the first ACK is not probed for before it can be back
        f = 2 * idle_rtt_ps
        if f > base:
            base = f
    elif rttvar_mult:
        f = srtt_ps + rttvar_mult * rttvar_ps
        if f > base:
            base = f
    base += wait_ps
    k = timeouts if timeouts < 30 else 30
    if base > (rto_max_ps - 1) >> k:
        return rto_max_ps                  # base << k >= rto_max already
    r = base << k
    if jitter_q16:
        r += mul_shr(r * jitter_q16, u, 40)
    return r if r < rto_max_ps else rto_max_ps


def ack_wait_ps(delay_ps: int, wait_bytes: int, line_bps: int) -> int:
    """ACK coalescing's allowance in the adaptive timeout (ps): the receiver's delayed-ACK timer
    ``delay_ps`` plus the time ``wait_bytes`` (``ack_every`` units with their headers) take at
    the queue pair's line rate, which an ACK may wait for before it is due. ``wait_bytes *
    PS_BITS`` can exceed 2**63 (``ack_every`` 1024, 9 KB units): the compiled core takes this
    per queue pair from Python (docs/compiled-core.md 3.1).

    >>> ack_wait_ps(2_000_000, 64 * 4160, 400_000_000_000)
    7324800
    """
    return delay_ps + wait_bytes * PS_BITS // line_bps


def rto_draw(salt: int, uid: int, n: int) -> int:
    """The ``n``-th jitter draw of queue pair ``uid``, uniform in ``[0, 2**24)``: a counter-based
    hash of (seed, queue pair, draw number), so it does not depend on event order."""
    return mix64(mix64(salt ^ uid) ^ n) & 0xFFFFFF


def rtt_estimate(srtt_ps: int, rttvar_ps: int, r_ps: int) -> tuple[int, int]:
    """RFC 6298 smoothed RTT and variation after the sample ``r_ps`` (integer ps, gains 1/8 and
    1/4, both from the previous estimates; ``srtt_ps == 0``: no sample yet, the first one sets
    ``srtt = r``, ``rttvar = r / 2``). Returns ``(srtt, rttvar)``.

    >>> rtt_estimate(0, 0, 8000)
    (8000, 4000)
    >>> rtt_estimate(8000, 4000, 16000)
    (9000, 5000)
    """
    if not srtt_ps:
        return r_ps, r_ps >> 1
    d = srtt_ps - r_ps
    if d < 0:
        d = -d
    return srtt_ps + ((r_ps - srtt_ps) >> 3), rttvar_ps + ((d - rttvar_ps) >> 2)
