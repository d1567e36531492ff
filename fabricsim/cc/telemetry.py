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

from pydantic import Field

from ..config.types import PositiveSize, PositiveTime, Rate
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


class TelemetryState:
    """Per-flow controller variables (``flow.state``)."""

    __slots__ = ("T", "w", "wc", "w_init", "w_min", "w_ai", "u", "inc_stage", "last_update_seq", "last_hops",
                 "ports")

    def __init__(self, T, w_init, w_min, w_ai, u):
        self.T = T
        self.w = w_init
        self.wc = w_init
        self.w_init = w_init
        self.w_min = w_min
        self.w_ai = w_ai
        self.u = u
        self.inc_stage = 0
        self.last_update_seq = 0
        self.last_hops = None
        self.ports = {}         # port id -> its last (ts, tx, qlen) sample seen by this flow


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

    def start(self, flow: Flow, t: int) -> None:
        p = self.params
        T = float(p.base_rtt if p.base_rtt is not None else flow.base_rtt_ps)
        if T <= 0:
            raise ValueError(f"telemetry CC needs a positive base RTT (flow {flow.uid} has {T} ps)")
        w_init = flow.line_bps * T / 8e12
        w_min = min(max(float(flow.mtu_bytes), p.min_rate * T / 8e12), w_init)
        w_ai = float(p.w_ai) if p.w_ai is not None else w_init * (1.0 - p.eta) / p.expected_flows
        u = p.initial_u if p.initial_u is not None else p.eta
        flow.state = TelemetryState(T, w_init, w_min, w_ai, u)
        flow.window_bytes = w_init
        flow.rate_bps = flow.line_bps

    def on_ack(self, flow: Flow, t: int, ack: AckInfo) -> None:
        s: TelemetryState = flow.state
        hops = ack.int_hops
        if s is None or not hops:
            return
        T = s.T
        u_max = -1.0
        tau = 0
        if len(hops[0]) > 4:
            # hops name their egress port: compare each with this flow's last sample of the same
            # port, so per-packet path changes (adaptive routing, spraying) do not mix counters
            ports = s.ports
            pairs = []
            for ts, tx, q, bps, pid in hops:
                prev = ports.get(pid)
                ports[pid] = (ts, tx, q)
                if prev is not None:
                    pairs.append(((ts, tx, q, bps), prev))
        else:
            last = s.last_hops
            s.last_hops = hops
            if last is None or len(last) != len(hops):
                return                  # first ACK or a new path: only remember the hops
            pairs = [(h, (lh[0], lh[1], lh[2])) for h, lh in zip(hops, last)]
        for (ts, tx, q, bps), (lts, ltx, lq) in pairs:
            dt = ts - lts
            if dt <= 0 or bps <= 0:
                continue
            dtx = tx - ltx
            if dtx < 0:
                dtx = 0
            # bytes / (bytes per ps x ps): B_i in bytes/ps = bps / 8e12
            u = (min(q, lq) * 8e12) / (bps * T) + (dtx * 8e12) / (bps * dt)
            if u > u_max:
                u_max = u
                tau = dt
        if u_max < 0:
            return                      # no hop advanced in time: nothing measured
        frac = min(tau, T) / T
        s.u = (1.0 - frac) * s.u + frac * u_max
        self._compute_window(flow, s, ack.cum_bytes > s.last_update_seq)

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
        flow.window_bytes = w
        rate = w * 8e12 / s.T
        flow.rate_bps = rate if rate < flow.line_bps else flow.line_bps
