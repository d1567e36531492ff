"""``telemetry``: an in-band-telemetry window/rate controller in the style of HPCC, as a model of
Spectrum-X congestion control.

NVIDIA does not publish the Spectrum-X control law; this is HPCC (Li et al., SIGCOMM 2019,
Algorithm 1; HPCC++ draft-miao-tsv-hpcc) with every constant a parameter, so it stands for "a
sender that reacts once per ACK to per-hop utilisation measured by the switches".

HPCC, per ACK, with ``ack.int_hops`` = ``(ts_ps, tx_bytes, qlen_bytes, rate_bps[, port_id])`` per
hop and L the previous sample::

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

Multipath (hops carrying ``port_id``, as the engine stamps them): with adaptive routing or packet
spraying consecutive packets of a flow cross different ports, each seen only every few packets, so
HPCC's per-ACK deltas become short, random intervals and the max over hops of those noisy u_i
reads high (about 0.09 on the shipped quickstart under spraying). The defaults therefore deviate
from HPCC in four documented ways (each one switchable back, see docs/fidelity/telemetry.md):

* L is this flow's own history of the *same port* (``port_id``), never another port's counters;
* txRate_i spans at least ``rate_interval_rtts`` x T of that port's counter (reference = the newest
  sample of the port that old), and the queue term is the minimum over the port's samples of the
  last ``qlen_window_rtts`` x T (a queue that stood that long), not of two samples;
* ``estimator: per_hop``: an EWMA over T per position i in the INT stack (weighted by the time
  since the previous sample at that position, whatever port it came from), and U = max_i of
  those: the parallel ports a flow uses at one stage are averaged before the max over stages.
  On a fixed path, where one hop stays the largest, this is HPCC's U;
* the NIC window is W x (1 + s/T), at most ``window_rtt_max`` x W, with s the smoothed part of the
  measured RTT beyond the base RTT and the forward queueing delay the INT reports (ACKs queued
  behind data on the reverse path, which INT cannot see; HPCC ns-3 runs HPCC with ACK_HIGH_PRIO 0
  too, but its ECMP evaluations see small reverse queues). The
  pacing rate stays W/T.

``global_base_rtt`` gives HPCC ns-3's single T (GLOBAL_T: the largest base RTT over host pairs,
W_init = line rate x that T) instead of each flow's own base RTT.

Units: ts in ps, tx/qlen in bytes, rate in bit/s, so B_i in bytes/ps is ``rate_bps / 8e12``.
Hops without a port id use HPCC's rule exactly: the first ACK and an ACK whose hop count differs
from L only store their hops; hops with a non-positive ts delta are skipped, a negative tx delta
counts as 0.
"""
from __future__ import annotations

from collections import deque
from typing import Literal

from pydantic import Field, model_validator

from ..config.types import PositiveSize, PositiveTime, Rate
from .base import CC, AckInfo, CCParams, CongestionControl, Flow


class TelemetryParams(CCParams):
    eta: float = Field(0.95, gt=0, le=1, description=(
        "Target utilisation. HPCC paper / HPCC++ draft, HPCC ns-3 U_TARGET, htsim: 0.95."))
    max_stage: int = Field(0, ge=0, description=(
        "Additive-increase stages before a multiplicative step up. 0: HPCC ns-3 run.py (--mi 0, "
        "MI_THRESH), the authors' evaluation setting: every reference-window update is the "
        "multiplicative step to the target plus W_AI. HPCC paper ('conservatively large'), htsim "
        "and the ns-3 attribute default: 5. With the multipath estimator, 5 leaves 4 staggered "
        "flows on one 40G link unfair (Jain 0.83 after 25 ms) and recovers slowly after an "
        "overshoot under adaptive routing; see docs/fidelity/telemetry.md."))
    base_rtt: PositiveTime | None = Field(None, description=(
        "T: the control interval (base RTT). None: the flow's base RTT from the engine "
        "(flow.base_rtt_ps). HPCC++ draft default 5 us; HPCC ns-3 uses the maximum base RTT."))
    global_base_rtt: bool = Field(False, description=(
        "True: T = the largest base RTT over the fabric's host pairs for every flow, and W_init = "
        "line rate x that T (HPCC ns-3 GLOBAL_T 1: m_baseRtt = maxRtt, window = maxBdp; with equal "
        "NIC rates line x max T is the max BDP). False: each flow's own base RTT. Excludes base_rtt."))
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
    # --- multipath deviations from HPCC (docs/fidelity/telemetry.md); the values in
    # brackets restore HPCC's rule. Defaults chosen by benchmarks/bench_telemetry.py.
    rate_interval_rtts: float = Field(2.0, ge=0, description=(
        "Shortest span of a per-port txRate, in units of T: the reference is the newest sample of "
        "the same port at least this much older [0: the port's previous sample, HPCC's per-ACK "
        "delta]. 2: chosen on the quickstart / 128-host permutations and the fixed-path tests "
        "(1 to 3 measure alike under spraying; 2 is closest to eta on a fixed path)."))
    qlen_window_rtts: float = Field(2.0, ge=0, description=(
        "Queue term of u_i: the minimum qLen over this flow's samples of the port in the last "
        "qlen_window_rtts x T (always including the previous one), so only a queue that stood "
        "that long counts [0: min(qLen, L.qLen), HPCC's two-sample filter]. Under spraying a "
        "port's queue is random at high load; HPCC's two-sample minimum counts it as excess "
        "(about -0.03 to -0.06 completion ratio). 2: as rate_interval_rtts."))
    estimator: Literal["hpcc", "per_hop"] = Field("per_hop", description=(
        "How per-hop samples make U ['hpcc': U <- EWMA over T of max_i u_i, paper Algorithm 1]. "
        "'per_hop': an EWMA over T per position i of the INT stack, U = max_i of those: the "
        "parallel ports a flow uses at one stage are averaged before the max over stages (the "
        "same U as 'hpcc' whenever one hop stays the largest)."))
    window_rtt_max: float = Field(1.25, ge=1.0, description=(
        "The NIC's window is W (1 + s/T), clamped to [W, window_rtt_max W], s = smoothed RTT "
        "excess that INT does not report (measured RTT - base RTT - forward queueing in the INT), "
        "chiefly ACKs queued behind data on the reverse path (HPCC ns-3 run.py: ACK_HIGH_PRIO 0 "
        "for HPCC, the same FIFO) "
        "[1: HPCC's window W]. 1.25: above the largest excess measured (about 0.15 T under "
        "spraying), a bound on an unmodelled delay, not a tuned value."))
    rtt_gain: float = Field(0.125, gt=0, le=1, description=(
        "EWMA gain per ACK of the RTT excess s: RFC 6298's alpha = 1/8 (TCP's SRTT)."))

    @model_validator(mode="after")
    def _one_t(self):
        if self.global_base_rtt and self.base_rtt is not None:
            raise ValueError("set base_rtt or global_base_rtt, not both")
        return self


class _PortHistory:
    """This flow's samples of one egress port: ``rate`` = (ts, tx) oldest first, trimmed to the
    rate span; ``qmin`` = a monotonic deque of (ts, qlen) for the windowed queue minimum."""

    __slots__ = ("rate", "qmin", "last_ts", "last_q")

    def __init__(self, ts, tx, q):
        self.rate = deque(((ts, tx),))
        self.qmin = deque(((ts, q),))
        self.last_ts = ts
        self.last_q = q


class TelemetryState:
    """Per-flow controller variables (``flow.state``)."""

    __slots__ = ("T", "w", "wc", "w_init", "w_min", "w_ai", "u", "inc_stage", "last_update_seq", "last_hops",
                 "ports", "rate_span", "q_span", "hop_u", "hop_ts", "srtt",
                 "rtt_scale")

    def __init__(self, T, w_init, w_min, w_ai, u, rate_span, q_span):
        self.T = T
        self.rate_span = rate_span  # ps: shortest span of a per-port txRate
        self.q_span = q_span        # ps: window of the per-port queue minimum
        self.hop_u = []         # per_hop estimator: EWMA of u per position in the INT stack
        self.hop_ts = []        # ... and the newest ts seen at that position
        self.srtt = None        # ps: smoothed RTT excess not seen by INT (see _unseen_delay)
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
        self.ports = {}         # port id -> _PortHistory of this flow's samples of it


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
        self.needs_fabric_base_rtt = params.global_base_rtt
        self._fabric_rtt_ps = None
        self._per_hop = params.estimator == "per_hop"
        self._rtt_max = params.window_rtt_max
        self._rtt_gain = params.rtt_gain

    def set_fabric_base_rtt(self, rtt_ps: int) -> None:
        self._fabric_rtt_ps = rtt_ps

    def start(self, flow: Flow, t: int) -> None:
        p = self.params
        if p.global_base_rtt:
            if self._fabric_rtt_ps is None:
                raise ValueError("telemetry global_base_rtt: the engine gave no fabric base RTT")
            T = float(self._fabric_rtt_ps)
        else:
            T = float(p.base_rtt if p.base_rtt is not None else flow.base_rtt_ps)
        if T <= 0:
            raise ValueError(f"telemetry CC needs a positive base RTT (flow {flow.uid} has {T} ps)")
        w_init = flow.line_bps * T / 8e12
        w_min = min(max(float(flow.mtu_bytes), p.min_rate * T / 8e12), w_init)
        w_ai = float(p.w_ai) if p.w_ai is not None else w_init * (1.0 - p.eta) / p.expected_flows
        u = p.initial_u if p.initial_u is not None else p.eta
        flow.state = TelemetryState(T, w_init, w_min, w_ai, u, T * p.rate_interval_rtts, T * p.qlen_window_rtts)
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
            # hops name their egress port: each is measured against this flow's own history of
            # samples of that port (per-packet path changes under adaptive routing or spraying
            # must not mix counters), see _port_sample
            per_hop = self._per_hop
            fwd_ps = 0.0
            if per_hop:
                hu, hts = s.hop_u, s.hop_ts
                if len(hu) != len(hops):            # first ACK, or the path length changed
                    hu[:] = [s.u] * len(hops)
                    hts[:] = [None] * len(hops)
            for i, (ts, tx, q, bps, pid) in enumerate(hops):
                if bps <= 0:
                    continue
                fwd_ps += queue_delay_ps(q, bps)
                m = self._port_sample(s, pid, ts, tx, q)
                if m is None:
                    continue
                dt, dtx, qmin = m
                u = hop_utilisation(qmin, dtx, dt, bps, T)
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
                    u = hu[i] = ewma_over_T(hu[i], u, w, T)
                if u > u_max:
                    u_max = u
                    tau = dt
            if self._rtt_max > 1.0 and ack.rtt_ps > 0:
                self._unseen_delay(flow, s, ack.rtt_ps, fwd_ps)
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
                u = hop_utilisation(q if q < lh[2] else lh[2], dtx, dt, bps, T)
                if u > u_max:
                    u_max = u
                    tau = dt
        if u_max < 0:
            return                      # no hop advanced in time: nothing measured
        s.u = ewma_over_T(s.u, u_max, tau, T)
        self._compute_window(flow, s, ack.cum_bytes > s.last_update_seq)

    def _unseen_delay(self, flow: Flow, s: TelemetryState, rtt_ps: int, fwd_ps: float) -> None:
        """Smooth the part of the round trip the utilisation does not count and scale the window.

        ``d`` = measured RTT (``rtt_ps``) - the flow's base RTT - the forward queueing delay this ACK's INT
        reports (sum of qlen_i / B_i): time the round trip spent where INT cannot see, chiefly the
        ACK queued behind data on the reverse path. Its EWMA ``s.srtt`` (gain ``rtt_gain``) sets
        the NIC window to W (1 + srtt/T), clamped to [W, window_rtt_max W]: the inflight that the
        paced rate W/T needs over that longer loop. Forward queues stay HPCC's business (they are
        in U), so a standing queue does not widen the window.
        """
        s.srtt, s.rtt_scale = unseen_delay(0.0 if s.srtt is None else s.srtt, s.srtt is not None, rtt_ps,
                                           flow.base_rtt_ps, fwd_ps, self._rtt_gain, s.T, self._rtt_max)

    def _port_sample(self, s: TelemetryState, pid, ts: int, tx: int, q: int):
        """Record the sample ``(ts, tx, q)`` of egress port ``pid`` and measure against its history.

        Returns ``(dt_ps, dtx_bytes, qlen_bytes)`` for the utilisation formula, or ``None`` when
        there is nothing to compare with (first sample of the port, or ``ts`` not newer than the
        port's last sample: ACKs over different return paths can arrive out of order).

        ``dt``/``dtx``: against the newest sample at least ``s.rate_span`` ps older than ``ts``
        (the oldest one kept if none is that old yet; the EWMA weights a shorter span by tau/T), so
        a txRate averages the port's counter over at least that span rather than over the few
        packets between this flow's visits of the port. ``qlen``: the minimum over the samples of
        the last ``s.q_span`` ps, the previous sample and this one (a sliding-window minimum,
        O(1) amortised). Both spans 0: HPCC's ``L`` = the port's previous sample.
        """
        h = s.ports.get(pid)
        if h is None:
            s.ports[pid] = _PortHistory(ts, tx, q)
            return None
        if ts <= h.last_ts:
            return None
        rate = h.rate
        edge = ts - s.rate_span
        while len(rate) > 1 and rate[1][0] <= edge:
            rate.popleft()
        ref_ts, ref_tx = rate[0]
        rate.append((ts, tx))
        mono = h.qmin
        edge = ts - s.q_span
        while mono and mono[0][0] < edge:
            mono.popleft()
        qmin = q if q < h.last_q else h.last_q
        if mono and mono[0][1] < qmin:
            qmin = mono[0][1]
        while mono and mono[-1][1] >= q:
            mono.pop()
        mono.append((ts, q))
        h.last_ts = ts
        h.last_q = q
        dtx = tx - ref_tx
        return ts - ref_ts, (dtx if dtx > 0 else 0), qmin

    def _compute_window(self, flow: Flow, s: TelemetryState, update_wc: bool) -> None:
        w, stage = reference_window(s.u, s.wc, s.inc_stage, self._eta, self._max_stage, s.w_ai, s.w_init, s.w_min)
        if update_wc:
            s.wc = w
            s.inc_stage = stage
            s.last_update_seq = flow.sent_bytes
        s.w = w
        flow.window_bytes, flow.rate_bps = window_and_rate(w, s.rtt_scale, s.T, flow.line_bps)


# ---------------------------------------------------------------------- shared arithmetic
# Plain functions over ints and floats: Telemetry calls them, and the compiled packet core
# (fabricsim/engine/compiled/core.py, core.SHARED) compiles them from this source, so both kernels
# perform the same IEEE operations in the same order (numba is never given fastmath: no
# reassociation, no fused multiply-add). Every int operand stays below 2**53 (the compiled core's
# coverage bounds the time limit), so its conversion to a double is exact in both.


def hop_utilisation(qlen: int, dtx: int, dt: int, bps: int, T: float) -> float:
    """HPCC's normalised utilisation of one hop, ``u_i = qLen / (B_i T) + txRate_i / B_i``, with
    ``qLen`` bytes, ``dtx`` bytes sent over ``dt`` ps and ``B_i`` = ``bps / 8e12`` bytes per ps.

    ``float(bps) * float(dt)`` is the correctly rounded product of two exact doubles, the same
    double as the exact integer product converted (which int64 could not hold: 4e11 x 1e9).

    >>> hop_utilisation(0, 50_000, 1_000_000, 400 * 10**9, 5e6)    # 50 KB in 1 us at 400G
    1.0
    """
    return (qlen * 8e12) / (bps * T) + (dtx * 8e12) / (float(bps) * float(dt))


def queue_delay_ps(qlen: int, bps: int) -> float:
    """The time ``qlen`` bytes take to drain at ``bps`` (ps, as a float): the forward queueing an
    INT record reports.

    >>> queue_delay_ps(50_000, 400 * 10**9)
    1000000.0
    """
    return qlen * 8e12 / bps


def ewma_over_T(old: float, u: float, w: int, T: float) -> float:
    """An EWMA over ``T``: the new sample ``u`` weighs ``min(w, T) / T`` (``w`` ps since the
    previous one), HPCC's ``U <- (1 - tau/T) U + (tau/T) u``.

    >>> ewma_over_T(1.0, 0.5, 2_500_000, 5e6), ewma_over_T(1.0, 0.5, 10**7, 5e6)
    (0.75, 0.5)
    """
    f = (w if w < T else T) / T
    return (1.0 - f) * old + f * u


def unseen_delay(srtt: float, have_srtt: bool, rtt_ps: int, base_rtt_ps: int, fwd_ps: float, gain: float,
                 T: float, rtt_max: float) -> tuple[float, float]:
    """The smoothed round-trip excess INT does not report and the NIC window's scale
    (:meth:`Telemetry._unseen_delay`): ``d = rtt - base RTT - forward queueing``, its EWMA
    (gain ``gain``; the first sample, ``have_srtt`` False, sets it) and ``1 + srtt / T``
    clamped to ``[1, rtt_max]``. Returns ``(srtt, scale)``.

    >>> unseen_delay(0.0, False, 7_000_000, 5_000_000, 1e6, 0.125, 5e6, 1.25)
    (1000000.0, 1.2)
    """
    d = rtt_ps - base_rtt_ps - fwd_ps
    srtt = d if not have_srtt else (1.0 - gain) * srtt + gain * d
    r = 1.0 + srtt / T
    return srtt, (1.0 if r < 1.0 else (r if r < rtt_max else rtt_max))


def reference_window(u: float, wc: float, inc_stage: int, eta: float, max_stage: int, w_ai: float,
                     w_init: float, w_min: float) -> tuple[float, int]:
    """HPCC's window from the utilisation ``u`` and the reference window ``wc``: multiplicative to
    the target (``wc / (u / eta) + w_ai``) when ``u >= eta`` or after ``max_stage`` additive steps,
    else additive (``wc + w_ai``), clamped to ``[w_min, w_init]``. Returns ``(w, incStage)``,
    the stage the reference would take with it.

    >>> reference_window(1.9, 100_000.0, 0, 0.95, 0, 1_000.0, 200_000.0, 4_096.0)
    (51000.0, 0)
    >>> reference_window(0.5, 100_000.0, 0, 0.95, 5, 1_000.0, 200_000.0, 4_096.0)
    (101000.0, 1)
    """
    if u >= eta or inc_stage >= max_stage:
        w = wc / ((u if u > 1e-9 else 1e-9) / eta) + w_ai
        stage = 0
    else:
        w = wc + w_ai
        stage = inc_stage + 1
    if w > w_init:
        w = w_init
    elif w < w_min:
        w = w_min
    return w, stage


def window_and_rate(w: float, rtt_scale: float, T: float, line_bps: int):
    """The NIC's window (``w x rtt_scale`` bytes) and pacing rate (``w / T``, at most the line
    rate, which is returned as it is given) of the window ``w``.

    >>> window_and_rate(50_000.0, 1.0, 5e6, 400 * 10**9), window_and_rate(1e6, 1.2, 5e6, 400 * 10**9)
    ((50000.0, 80000000000.0), (1200000.0, 400000000000))
    """
    rate = w * 8e12 / T
    return w * rtt_scale, (rate if rate < line_bps else line_bps)
