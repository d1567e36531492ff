"""``dcqcn``: the DCQCN reaction point (sender NIC), paper version.

Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015, section 3.1.
Per flow (queue pair): current rate Rc, target rate Rt, alpha, timer count T, byte-counter count BC.

* A flow starts at line rate (no slow start).
* On a CNP (Eq. 1): Rt <- Rc (always with ``clamp_target_rate``, else only if an increase event
  happened since the previous cut, as the authors' ns-3 CLAMP_TARGET_RATE=0);
  Rc <- max(Rc (1 - alpha/2), min_rate); alpha <- (1-g) alpha + g; T, BC, the byte counter and
  both timers restart.
* Alpha timer (Eq. 2): every K without a CNP, alpha <- (1-g) alpha.
* Increase events: a timer every Ti (T += 1) and a byte counter every B bytes sent (BC += 1).
  Each event applies one step: fast recovery while max(T, BC) < F: Rc <- (Rt + Rc)/2 (Eq. 3);
  additive increase when one counter has reached F: Rt += R_AI (Eq. 4); hyper increase when both
  have: Rt += i R_HAI with i = min(T, BC) - F + 1 (authors' ns-3 rpr_hyper_increase); then
  Rc <- (Rt + Rc)/2. Rc and Rt never exceed the flow's line rate.

The notification point's CNP spacing N is ``cnp_interval`` (exported as ``cnp_interval_ps`` for the
receiver); the congestion point (ECN marking) is the switch's business.

Timers are ``ctx.schedule`` events with a generation counter per timer (a CNP bumps both
generations, so older events become no-ops). To keep event counts low the timers only run after a
cut: once Rc and Rt are back at line rate both stop; the alpha decays that would have happened
meanwhile are applied lazily at the next CNP (same timer phase, same result as a running timer).
``on_done`` stops everything.
"""
from __future__ import annotations

from pydantic import Field

from ..config.types import PositiveSize, PositiveTime, Rate
from .base import CC, CCParams, CongestionControl, Flow

#: Reference line rate of the authors' sample parameters (40 Gb/s testbed, ns-3 mix/config.txt).
SAMPLE_LINE_BPS = 40_000_000_000
#: Rc within this fraction of line rate (with Rt at line rate) counts as fully recovered.
RECOVERED_TOLERANCE = 1e-4


class DcqcnParams(CCParams):
    g: float = Field(1 / 256, gt=0, le=1, description=(
        "EWMA gain of alpha. Paper section 3.1 and authors' ns-3 DCTCP_GAIN: 1/256 "
        "(ConnectX dce_tcp_g 1019/1024 is about 1/205 per 1 us)."))
    initial_alpha: float = Field(1.0, gt=0, le=1, description=(
        "alpha before the first CNP, so the first cut is Rc*(1-alpha/2). HPCC ns-3 and ConnectX "
        "initial_alpha_value 1023/1024: 1 (a halving); the authors' ns-3 starts at 0.5."))
    alpha_timer: PositiveTime = Field("55us", description=(
        "K: period of the alpha decay without CNPs; must exceed cnp_interval. Paper section 3.1 "
        "and authors' ns-3 ALPHA_RESUME_INTERVAL: 55 us (ConnectX dce_tcp_rtt 1 us)."))
    cnp_interval: PositiveTime = Field("50us", description=(
        "N: minimum spacing of CNPs per flow at the notification point (receiver NIC). Paper "
        "section 3.1 and authors' ns-3 CNP_INTERVAL: 50 us (ConnectX min_time_between_cnps 4 us)."))
    rate_increase_timer: PositiveTime = Field("55us", description=(
        "Ti: period of the rate-increase timer. Paper section 3.1: 55 us (authors' ns-3 RP_TIMER "
        "60 us; HPCC ns-3 and ConnectX rpg_time_reset 300 us)."))
    byte_counter: PositiveSize = Field("10MB", description=(
        "B: bytes sent per byte-counter increase event. Paper section 3.1: 10 MB (authors' ns-3 "
        "BYTE_COUNTER 300 MB, i.e. off; ConnectX rpg_byte_reset 32767)."))
    fast_recovery_steps: int = Field(5, ge=1, description=(
        "F: increase events of fast recovery before additive increase. Paper and authors' ns-3 "
        "FAST_RECOVERY_TIMES: 5 (HPCC ns-3 and ConnectX rpg_threshold: 1)."))
    rate_ai: Rate | None = Field(None, description=(
        "R_AI, additive-increase step. None: the authors' 40G sample (40 Mb/s) scaled to the "
        "flow's line rate, i.e. line_rate/1000 (ConnectX rpg_ai_rate 5 Mb/s)."))
    rate_hai: Rate | None = Field(None, description=(
        "R_HAI, hyper-increase step. None: the authors' 40G sample (200 Mb/s) scaled to the "
        "flow's line rate, i.e. line_rate/200 (ConnectX rpg_hai_rate 50 Mb/s)."))
    min_rate: Rate = Field("100Mbps", description=(
        "Floor of Rc. HPCC ns-3 mix/config.txt MIN_RATE 100 Mb/s (run.py 1000 Mb/s; ConnectX "
        "rpg_min_rate 1 Mb/s); the paper has none."))
    clamp_target_rate: bool = Field(True, description=(
        "True: Rt <- Rc on every CNP (paper Eq. 1, authors' ns-3 CLAMP_TARGET_RATE 1). False: only "
        "if an increase event happened since the previous cut (HPCC ns-3 / ConnectX clamp_tgt_rate 0)."))


class DcqcnState:
    """Per-flow reaction-point variables (``flow.state``)."""

    __slots__ = ("rc", "rt", "alpha", "t_count", "bc_count", "bytes", "alpha_gen", "inc_gen",
                 "alpha_running", "inc_running", "alpha_phase", "increased", "rai", "rhai", "min_rate",
                 "cnps")

    def __init__(self, line: float, alpha: float, rai: float, rhai: float, min_rate: float):
        self.rc = line
        self.rt = line
        self.alpha = alpha
        self.t_count = 0
        self.bc_count = 0
        self.bytes = 0
        self.alpha_gen = 0
        self.inc_gen = 0
        self.alpha_running = False
        self.inc_running = False
        self.alpha_phase = None   # time of the last alpha-timer expiry (or CNP) when the timer stopped
        self.increased = False    # an increase event happened since the last cut
        self.rai = rai
        self.rhai = rhai
        self.min_rate = min_rate
        self.cnps = 0


@CC.register("dcqcn")
class Dcqcn(CongestionControl):
    """DCQCN reaction point, paper version (Zhu et al. 2015, section 3.1); rate-based, no window."""

    Params = DcqcnParams
    uses_int = False
    cnp_interval_ps = DcqcnParams().cnp_interval  # the default (50 us); __init__ sets the configured one

    def __init__(self, params: DcqcnParams | None, ctx):
        params = params if params is not None else DcqcnParams()
        super().__init__(params, ctx)
        self.cnp_interval_ps = params.cnp_interval
        self._decay = 1.0 - params.g
        self._k = params.alpha_timer
        self._ti = params.rate_increase_timer
        self._b = params.byte_counter
        self._f = params.fast_recovery_steps

    # -- hooks -------------------------------------------------------------------------------
    def start(self, flow: Flow, t: int) -> None:
        p = self.params
        line = float(flow.line_bps)
        scale = line / SAMPLE_LINE_BPS
        rai = float(p.rate_ai) if p.rate_ai is not None else 40e6 * scale
        rhai = float(p.rate_hai) if p.rate_hai is not None else 200e6 * scale
        flow.state = DcqcnState(line, p.initial_alpha, rai, rhai, min(float(p.min_rate), line))
        flow.rate_bps = flow.line_bps
        flow.window_bytes = None

    def on_cnp(self, flow: Flow, t: int) -> None:
        s: DcqcnState = flow.state
        if s is None or not flow.active:
            return
        if not s.alpha_running and s.alpha_phase is not None:
            # alpha timer was parked while the flow ran at line rate: apply its missed expiries
            s.alpha = alpha_catch_up(s.alpha, self._decay, (t - s.alpha_phase) // self._k)
        s.cnps += 1
        s.rc, s.rt, s.alpha = rate_cut(s.rc, s.rt, s.alpha, s.min_rate, self._decay, self.params.g,
                                       self.params.clamp_target_rate or s.increased or s.cnps == 1)
        s.t_count = 0
        s.bc_count = 0
        s.bytes = 0
        s.increased = False
        s.alpha_phase = None
        flow.rate_bps = s.rc
        # restart both timers (older events become stale through the generation counters)
        s.alpha_gen += 1
        s.alpha_running = True
        self.ctx.schedule(t + self._k, self._alpha_timer, (flow, s.alpha_gen))
        s.inc_gen += 1
        s.inc_running = True
        self.ctx.schedule(t + self._ti, self._increase_timer, (flow, s.inc_gen))

    def on_send(self, flow: Flow, t: int, nbytes: int) -> None:
        s: DcqcnState = flow.state
        if s is None or not s.inc_running:   # at line rate nothing can increase
            return
        s.bytes += nbytes
        while s.bytes >= self._b and s.inc_running:
            s.bytes -= self._b
            s.bc_count += 1
            self._increase(flow, s, t)

    def on_done(self, flow: Flow, t: int) -> None:
        s: DcqcnState = flow.state
        if s is None:
            return
        s.alpha_gen += 1
        s.inc_gen += 1
        s.alpha_running = False
        s.inc_running = False

    # -- timers ------------------------------------------------------------------------------
    def _alpha_timer(self, t: int, arg) -> None:
        flow, gen = arg
        s: DcqcnState = flow.state
        if gen != s.alpha_gen or not flow.active:
            return
        s.alpha *= self._decay              # (one IEEE multiplication: the compiled core's too)
        if s.inc_running:
            self.ctx.schedule(t + self._k, self._alpha_timer, (flow, gen))
        else:
            # fully recovered: park the timer, remember its phase for the lazy catch-up in on_cnp
            s.alpha_running = False
            s.alpha_phase = t

    def _increase_timer(self, t: int, arg) -> None:
        flow, gen = arg
        s: DcqcnState = flow.state
        if gen != s.inc_gen or not flow.active:
            return
        s.t_count += 1
        self._increase(flow, s, t)
        if s.inc_running:
            self.ctx.schedule(t + self._ti, self._increase_timer, (flow, gen))

    def _increase(self, flow: Flow, s: DcqcnState, t: int) -> None:
        s.rc, s.rt, recovered = rate_increase(s.rc, s.rt, s.t_count, s.bc_count, self._f, s.rai, s.rhai,
                                              float(flow.line_bps))
        s.increased = True
        if recovered:
            s.inc_running = False      # back at line rate: stop the increase timer
            s.inc_gen += 1
            s.bytes = 0
        flow.rate_bps = s.rc


# ---------------------------------------------------------------------- shared arithmetic
# Plain functions over ints and floats: Dcqcn calls them, and the compiled packet core
# (fabricsim/engine/compiled/core.py, core.SHARED) compiles them from this source, so both kernels
# perform the same IEEE operations in the same order (numba is never given fastmath: no
# reassociation, no fused multiply-add). ``max`` and ``min`` are written out as comparisons with
# Python's meaning (``max(a, b)`` is ``b`` only if ``b > a``).


def alpha_catch_up(alpha: float, decay: float, periods: int) -> float:
    """alpha after ``periods`` expiries of the alpha timer (``alpha x decay^periods``), applied at
    once at the next CNP when the timer was parked (module doc). The power is taken of the period
    count as a double (``decay ** float(n)``: what CPython's ``float ** int`` does, and libm's
    ``pow`` in both kernels; numba's ``float ** int`` would multiply by squaring instead).

    >>> alpha_catch_up(1.0, 0.5, 3)
    0.125
    """
    return alpha * decay ** float(periods)


def rate_cut(rc: float, rt: float, alpha: float, min_rate: float, decay: float, g: float,
             clamp: bool) -> tuple[float, float, float]:
    """The reaction to a CNP (paper Eq. 1): ``Rt <- Rc`` if ``clamp``; ``Rc <- max(Rc (1 - alpha/2),
    min_rate)``; ``alpha <- decay alpha + g`` (``decay = 1 - g``). Returns ``(Rc, Rt, alpha)``.

    >>> rate_cut(100e9, 100e9, 1.0, 1e8, 1 - 1 / 256, 1 / 256, True)
    (50000000000.0, 100000000000.0, 1.0)
    """
    if clamp:
        rt = rc
    cut = rc * (1.0 - alpha / 2.0)
    rc = min_rate if min_rate > cut else cut
    return rc, rt, decay * alpha + g


def rate_increase(rc: float, rt: float, t_count: int, bc_count: int, f: int, rai: float, rhai: float,
                  line: float) -> tuple[float, float, bool]:
    """One increase event with the timer and byte counts ``t_count``, ``bc_count``: fast recovery
    while both are below ``f`` (Eq. 3), hyper increase (``Rt += i R_HAI``, ``i = min - f + 1``) once
    both have reached it, else additive increase (``Rt += R_AI``, Eq. 4); then ``Rc <- (Rt + Rc)/2``,
    both capped at ``line``. Returns ``(Rc, Rt, recovered)``: recovered when Rt is at line rate and
    Rc within ``RECOVERED_TOLERANCE`` of it (Rc is then set to it).

    >>> rate_increase(50e9, 100e9, 1, 0, 5, 1e8, 5e8, 100e9)
    (75000000000.0, 100000000000.0, False)
    """
    lo, hi = (t_count, bc_count) if t_count < bc_count else (bc_count, t_count)
    if hi < f:
        pass                                   # fast recovery (Eq. 3)
    elif lo >= f:                              # hyper increase
        rt += (lo - f + 1) * rhai
    else:                                      # additive increase (Eq. 4)
        rt += rai
    if rt > line:
        rt = line
    rc = (rt + rc) / 2.0
    if rc > line:
        rc = line
    if rt >= line and rc >= line * (1.0 - RECOVERED_TOLERANCE):
        return line, rt, True
    return rc, rt, False
