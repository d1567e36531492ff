"""``telemetry``: an in-band-telemetry window/rate controller in the style of HPCC, as a model of
Spectrum-X congestion control.

NVIDIA does not publish the Spectrum-X control law; this is HPCC (Li et al., SIGCOMM 2019,
Algorithm 1; HPCC++ draft-miao-tsv-hpcc) with every constant a parameter, so it stands for "a
sender that reacts once per ACK to per-hop utilisation measured by the switches".

Per ACK, with ``ack.int_hops`` = ``(ts_ps, tx_bytes, qlen_bytes, rate_bps)`` per hop and L the
previous ACK's hops::

    txRate_i = (tx_i - L.tx_i) / (ts_i - L.ts_i)
    u_i      = min(qlen_i, L.qlen_i) / (B_i T) + txRate_i / B_i
    j = argmax u_i,  tau = min(ts_j - L.ts_j, T)
    U <- (1 - tau/T) U + (tau/T) u_j
    W  = Wc / (U/eta) + W_AI   if U >= eta or incStage >= maxStage   (multiplicative, to the target)
    W  = Wc + W_AI             otherwise                              (additive)

Wc (and incStage: reset by the multiplicative branch, +1 by the additive one) take the new W only
when ``ack.cum_bytes > lastUpdateSeq``, after which lastUpdateSeq <- ``flow.sent_bytes``: Wc moves
at most once per round trip, other ACKs recompute W from the same Wc. W is clamped to
[max(MTU, min_rate T), W_init] with W_init = line rate x T; the pacing rate is W/T.

Units: ts in ps, tx/qlen in bytes, rate in bit/s, so B_i in bytes/ps is ``rate_bps / 8e12``.
The first ACK (no L yet) and an ACK whose hop count differs from L (the path changed under
adaptive routing) only store their hops; hops with a non-positive ts delta are skipped, a negative
tx delta (a different port with the same hop count) counts as 0.
"""
from __future__ import annotations

from collections import deque
from typing import Literal

from pydantic import Field

from ..config.types import PositiveSize, PositiveTime, Rate, Time
from .base import CC, AckInfo, CCParams, CongestionControl, Flow


class TelemetryParams(CCParams):
    eta: float = Field(0.95, gt=0, le=1, description=(
        "Target utilisation. HPCC paper / HPCC++ draft, HPCC ns-3 U_TARGET, htsim: 0.95."))
    max_stage: int = Field(5, ge=0, description=(
        "Additive-increase stages before a multiplicative step up. HPCC paper ('conservatively "
        "large') and htsim: 5 (HPCC ns-3 run.py --mi 0)."))
    base_rtt: PositiveTime | None = Field(None, description=(
        "T: the control interval (base RTT). None: the flow's base RTT from the engine "
        "(flow.base_rtt_ps). HPCC++ draft default 5 us; HPCC ns-3 uses the maximum base RTT."))
    w_ai: PositiveSize | None = Field(None, description=(
        "W_AI, additive-increase step in bytes. None: W_init (1 - eta) / expected_flows, the HPCC "
        "paper's rule of thumb (htsim: 1 MSS; HPCC ns-3 rate form 10*bw/25 Mb/s)."))
    expected_flows: int = Field(16, ge=1, description=(
        "N in the default W_AI: the expected number of concurrent flows per link (HPCC paper). "
        "16: an assumption (a 16-way incast / collective fan-in), not a published value."))
    min_rate: Rate = Field("100Mbps", description=(
        "Floor of the pacing rate; the window floor is max(MTU, min_rate T). HPCC ns-3 MIN_RATE "
        "(100 Mb/s in mix/config.txt, 1000 Mb/s in run.py)."))
    initial_u: float | None = Field(None, ge=0, description=(
        "U before the first measurement. None: eta (htsim), a neutral start; HPCC ns-3 uses 1."))
    rate_interval: Time | None = Field(None, ge=0, description=(
        "Shortest span of a per-port txRate measurement: the reference sample is the newest one "
        "of the same port at least this much older. None: rate_interval_rtts x T. 0: the previous "
        "sample of the port, i.e. HPCC's per-ACK deltas (paper, ns-3, htsim). fabricsim deviation, "
        "see docs/fidelity_parts/telemetry.md."))
    rate_interval_rtts: float = Field(1.0, ge=0, description=(
        "rate_interval in units of T when rate_interval is None. 1: one base RTT, the span of "
        "HPCC's EWMA (tau/T), so on a fixed path the estimate averages over the same interval."))
    estimator: Literal["hpcc", "per_hop"] = Field("per_hop", description=(
        "How per-hop samples make U. 'hpcc': U <- EWMA over T of max_i u_i (paper Algorithm 1). "
        "'per_hop': an EWMA over T per position i of the INT stack, U = max_i of those, so the "
        "parallel ports a flow sprays over at one stage are averaged before the max (fabricsim "
        "deviation for multipath; the same as 'hpcc' when one hop is always the largest)."))
    window_rtt_max: float = Field(1.0, ge=1.0, description=(
        "The NIC's window is W x min(srtt/T, window_rtt_max), at least W: inflight for the paced "
        "rate W/T over the measured round trip, so delay INT cannot see (ACKs queued on the "
        "reverse path) does not bind the flow. 1: HPCC's window W."))
    rtt_gain: float = Field(0.125, gt=0, le=1, description=(
        "EWMA gain of srtt per ACK: RFC 6298 alpha = 1/8."))
    qlen_filter: Literal["pair", "window"] = Field("pair", description=(
        "Queue term of u_i: 'pair' = min(qLen, L.qLen) with L the port's previous sample (HPCC "
        "paper / ns-3); 'window' = the minimum over the port's samples in the rate interval."))


class TelemetryState:
    """Per-flow controller variables (``flow.state``)."""

    __slots__ = ("T", "w", "wc", "w_init", "w_min", "w_ai", "u", "inc_stage", "last_update_seq", "last_hops",
                 "ports", "span", "hop_u", "hop_ts", "srtt",
                 "rtt_scale")

    def __init__(self, T, w_init, w_min, w_ai, u, span):
        self.T = T
        self.span = span
        self.hop_u = []         # per_hop estimator: EWMA of u per position in the INT stack
        self.hop_ts = []        # ... and the newest ts seen at that position
        self.srtt = None        # smoothed measured RTT (ps)
        self.rtt_scale = 1.0    # NIC window / W
        self.w = w_init
        self.wc = w_init
        self.w_init = w_init
        self.w_min = w_min
        self.w_ai = w_ai
        self.u = u
        self.inc_stage = 0
        self.last_update_seq = 0
        self.last_hops = None
        self.ports = {}         # port id -> deque of this flow's (ts, tx, qlen) samples of it, oldest first


@CC.register("telemetry")
class Telemetry(CongestionControl):
    """HPCC-like INT controller (Spectrum-X-like model): window W and pacing rate W/T per flow."""

    Params = TelemetryParams
    uses_int = True

    def __init__(self, params: TelemetryParams | None, ctx):
        params = params if params is not None else TelemetryParams()
        super().__init__(params, ctx)
        self._eta = params.eta
        self._max_stage = params.max_stage
        self._q_window = params.qlen_filter == "window"
        self._per_hop = params.estimator == "per_hop"
        self._rtt_max = params.window_rtt_max
        self._rtt_gain = params.rtt_gain

    def start(self, flow: Flow, t: int) -> None:
        p = self.params
        T = float(p.base_rtt if p.base_rtt is not None else flow.base_rtt_ps)
        if T <= 0:
            raise ValueError(f"telemetry CC needs a positive base RTT (flow {flow.uid} has {T} ps)")
        w_init = flow.line_bps * T / 8e12
        w_min = min(max(float(flow.mtu_bytes), p.min_rate * T / 8e12), w_init)
        w_ai = float(p.w_ai) if p.w_ai is not None else w_init * (1.0 - p.eta) / p.expected_flows
        u = p.initial_u if p.initial_u is not None else p.eta
        span = T * p.rate_interval_rtts if p.rate_interval is None else float(p.rate_interval)
        flow.state = TelemetryState(T, w_init, w_min, w_ai, u, span)
        flow.window_bytes = w_init
        flow.rate_bps = flow.line_bps

    def on_ack(self, flow: Flow, t: int, ack: AckInfo) -> None:
        s: TelemetryState = flow.state
        hops = ack.int_hops
        if s is None or not hops:
            return
        if self._rtt_max > 1.0 and ack.rtt_ps > 0:
            # delay this ACK's round trip spent outside the forward queues INT reports
            fwd = 0.0
            for h in hops:
                if h[3] > 0:
                    fwd += h[2] * 8e12 / h[3]
            d = ack.rtt_ps - flow.base_rtt_ps - fwd
            g = self._rtt_gain
            s.srtt = d if s.srtt is None else (1.0 - g) * s.srtt + g * d
            r = 1.0 + s.srtt / s.T
            s.rtt_scale = 1.0 if r < 1.0 else (r if r < self._rtt_max else self._rtt_max)
        T = s.T
        u_max = -1.0
        tau = 0
        if len(hops[0]) > 4:
            # hops name their egress port: each is measured against this flow's own history of
            # samples of that port (per-packet path changes under adaptive routing or spraying
            # must not mix counters), over a span of at least rate_interval (see _port_sample)
            per_hop = self._per_hop
            if per_hop:
                hu, hts = s.hop_u, s.hop_ts
                if len(hu) != len(hops):            # first ACK, or the path length changed
                    hu[:] = [s.u] * len(hops)
                    hts[:] = [None] * len(hops)
            for i, (ts, tx, q, bps, pid) in enumerate(hops):
                if bps <= 0:
                    continue
                m = self._port_sample(s, pid, ts, tx, q)
                if m is None:
                    continue
                dt, dtx, qmin = m
                u = (qmin * 8e12) / (bps * T) + (dtx * 8e12) / (bps * dt)
                if per_hop:
                    # EWMA per hop position over T, weighted by the time since the previous
                    # sample at this position (whatever port it came from): parallel ports of one
                    # stage are averaged as the flow uses them, before the max over stages
                    last_ts = hts[i]
                    if last_ts is None:
                        w = dt
                        hts[i] = ts
                    else:
                        w = ts - last_ts
                        if w <= 0:
                            w = 0
                        else:
                            hts[i] = ts
                    f = (w if w < T else T) / T
                    u = (1.0 - f) * hu[i] + f * u
                    hu[i] = u
                if u > u_max:
                    u_max = u
                    tau = dt
            if per_hop:
                if u_max < 0:
                    return
                s.u = max(hu)
                self._compute_window(flow, s, ack.cum_bytes > s.last_update_seq)
                return
        else:
            last = s.last_hops
            s.last_hops = hops
            if last is None or len(last) != len(hops):
                return                  # first ACK or a new path: only remember the hops
            for (ts, tx, q, bps), lh in zip(hops, last):
                dt = ts - lh[0]
                if dt <= 0 or bps <= 0:
                    continue
                dtx = tx - lh[1]
                if dtx < 0:
                    dtx = 0
                # bytes / (bytes per ps x ps): B_i in bytes/ps = bps / 8e12
                u = (min(q, lh[2]) * 8e12) / (bps * T) + (dtx * 8e12) / (bps * dt)
                if u > u_max:
                    u_max = u
                    tau = dt
        if u_max < 0:
            return                      # no hop advanced in time: nothing measured
        frac = min(tau, T) / T
        s.u = (1.0 - frac) * s.u + frac * u_max
        self._compute_window(flow, s, ack.cum_bytes > s.last_update_seq)

    def _port_sample(self, s: TelemetryState, pid, ts: int, tx: int, q: int):
        """Record the sample ``(ts, tx, q)`` of egress port ``pid`` and measure against the history.

        Returns ``(dt_ps, dtx_bytes, qlen_bytes)`` for the utilisation formula, or ``None`` when
        there is nothing to compare with (first sample of the port, or ``ts`` not newer than the
        port's last sample: ACKs over different return paths can arrive out of order).

        The reference is the newest sample at least ``s.span`` ps older than ``ts`` (the oldest
        one kept if none is that old yet, whose shorter span the EWMA weights by tau/T), so a
        txRate averages the port's counter over at least one span rather than over the few
        packets between this flow's visits of the port. ``qlen_bytes`` is HPCC's
        ``min(qLen, L.qLen)`` with L the previous sample of the port (``qlen_filter: pair``), or
        the minimum over every sample since the reference (``window``). ``s.span == 0`` keeps
        only the previous sample: exactly HPCC's per-ACK deltas (per port).
        """
        hist = s.ports.get(pid)
        if hist is None:
            s.ports[pid] = deque(((ts, tx, q),))
            return None
        last = hist[-1]
        if ts <= last[0]:
            return None
        edge = ts - s.span
        while len(hist) > 1 and hist[1][0] <= edge:
            hist.popleft()
        ref = hist[0]
        if self._q_window:
            qmin = q
            for h in hist:
                if h[2] < qmin:
                    qmin = h[2]
        else:
            qmin = q if q < last[2] else last[2]
        hist.append((ts, tx, q))
        dtx = tx - ref[1]
        return ts - ref[0], (dtx if dtx > 0 else 0), qmin

    def _compute_window(self, flow: Flow, s: TelemetryState, update_wc: bool) -> None:
        eta = self._eta
        if s.u >= eta or s.inc_stage >= self._max_stage:
            w = s.wc / (max(s.u, 1e-9) / eta) + s.w_ai
            stage = 0
        else:
            w = s.wc + s.w_ai
            stage = s.inc_stage + 1
        if w > s.w_init:
            w = s.w_init
        elif w < s.w_min:
            w = s.w_min
        if update_wc:
            s.wc = w
            s.inc_stage = stage
            s.last_update_seq = flow.sent_bytes
        s.w = w
        flow.window_bytes = w * s.rtt_scale
        rate = w * 8e12 / s.T
        flow.rate_bps = rate if rate < flow.line_bps else flow.line_bps
