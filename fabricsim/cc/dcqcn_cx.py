"""``dcqcn_cx``: the DCQCN reaction point as ConnectX firmware runs it (DOCA parameters).

Same roles as the paper version (:mod:`fabricsim.cc.dcqcn`), different clockwork (NVIDIA DOCA
"DCQCN CC Algorithm / Parameters"; google/isekai host/rdma/rdma_roce_cc_dcqcn.cc models the same
firmware with these parameter names; HPCC ns-3 rdma-hw.cc "Mellanox version" is a simplification).
Per flow: current rate Rc, target rate Rt, alpha as a 10-bit integer ``a`` (alpha = a/1024), a
timer stage T and a byte stage BC.

* **First CNP** of a queue pair: ``a <- initial_alpha_value``; Rc <- Rt <- ``rate_to_set_on_first_cnp``
  (None: the line rate, i.e. no cut). No rate cut yet. Its time ``t0`` is the phase of the two
  periodic processes below.
* **Alpha**, every ``dce_tcp_rtt`` after t0: ``a <- floor(g' a / 1024) + (1024 - g')`` if a CNP
  arrived in the period (capped at 1023), else ``a <- floor(g' a / 1024)``; g' = ``dce_tcp_g``
  (1019: gain 5/1024 ~ 1/205 per period).
* **Rate cut**, every ``rate_reduce_monitor_period`` after t0, only if a CNP arrived in the period:
  Rt <- Rc if ``clamp_tgt_rate``, or a byte-counter increase happened since the last cut, or
  (``clamp_tgt_rate_after_time_inc``) a timer increase did; then
  Rc <- Rc - min(Rc a / 2^rpg_gd, Rc (100 - rpg_min_dec_fac)/100), at least ``rpg_min_rate``
  (rpg_gd 11: a cut of alpha/2; at most a halving). T, BC and the byte count reset and the increase
  timer restarts. When an alpha update and a cut fall on the same instant, alpha is updated first
  (both timers start at t0, alpha's first).
* **Increase events**: the timer every ``rpg_time_reset`` since the last cut (then T += 1) and
  the byte counter every ``rpg_byte_reset`` bytes sent (then BC += 1); each event first applies one
  step with the stages before it: hyper (Rt += R_HAI, once) if min(T, BC) > F, additive
  (Rt += R_AI) if max(T, BC) >= F, else fast recovery; Rt <= ``rpg_max_rate``; Rc <- (Rt + Rc)/2.
  F = ``rpg_threshold``.
* **Notification point**: the receiver sends at most one CNP per flow per ``min_time_between_cnps``.

Events: the firmware's timers tick forever; here the alpha process is evaluated lazily (the k
periods since the last update are applied when alpha is next needed: exactly the same integer
sequence), a rate-cut check is scheduled only for the next period boundary after a CNP, and the
increase timer runs only between a cut and the return to line rate, as in the paper version. So a
flow costs no events while nothing marks it.

Byte counter units: ``rpg_byte_reset`` 32767 is read as bytes, as the mlxconfig text and the DOCA
table say; isekai reads it in 64 B units (2 MiB). Set ``rpg_byte_reset`` to compare.
"""
from __future__ import annotations

from typing import Optional

from pydantic import Field, model_validator

from ..config.types import PositiveTime, Rate, Size
from .base import CC, CCParams, CongestionControl, Flow

#: Rc within this fraction of the maximum rate (with Rt at it) counts as fully recovered.
RECOVERED_TOLERANCE = 1e-4
#: after this many empty alpha periods alpha is 0 whatever it was (floor(1019 a/1024) reaches 0
#: from 1023 in under 1300 steps for any g' <= 1023 that decays at all)
ALPHA_STEPS_MAX = 1 << 16


class DcqcnCxParams(CCParams):
    dce_tcp_g: int = Field(1019, ge=0, le=1023, description=(
        "g': alpha <- g'/1024 alpha (+ 1 - g'/1024 if a CNP arrived) per dce_tcp_rtt (DOCA default 1019)"))
    dce_tcp_rtt: PositiveTime = Field("1us", description="period of the alpha update (DOCA default 1 us)")
    initial_alpha_value: int = Field(1023, ge=0, le=1023, description="alpha x 1024 at the first CNP (1023)")
    rate_to_set_on_first_cnp: Optional[Rate] = Field(None, description=(
        "Rc at the first CNP; None (DOCA 0) = the line rate"))
    rate_reduce_monitor_period: PositiveTime = Field("4us", description=(
        "period of the rate-cut check; a cut happens if a CNP arrived in the period (DOCA 4 us)"))
    rpg_gd: int = Field(11, ge=10, le=20, description="cut = Rc alpha / 2^(rpg_gd - 10): 11 = alpha/2")
    rpg_min_dec_fac: int = Field(50, ge=1, le=100, description="a cut leaves at least this % of Rc (50)")
    rpg_min_rate: Rate = Field("1Mbps", description="floor of Rc (DOCA 1 Mb/s)")
    rpg_max_rate: Optional[Rate] = Field(None, description="cap of Rt and Rc; None (DOCA 0) = line rate")
    rpg_time_reset: PositiveTime = Field("300us", description="increase timer period (300 us)")
    rpg_byte_reset: Size = Field("32767B", description=(
        "bytes sent per byte-counter increase event; 0 = off (32767, bytes per mlxconfig; isekai x 64 B)"))
    rpg_threshold: int = Field(1, ge=1, description="F: increase stages before additive increase (1)")
    rpg_ai_rate: Rate = Field("5Mbps", description="R_AI (5 Mb/s)")
    rpg_hai_rate: Rate = Field("50Mbps", description="R_HAI (50 Mb/s)")
    clamp_tgt_rate: bool = Field(False, description="Rt <- Rc at every cut (0)")
    clamp_tgt_rate_after_time_inc: bool = Field(True, description=(
        "Rt <- Rc at a cut if a timer increase happened since the last one (1)"))
    min_time_between_cnps: PositiveTime = Field("4us", description=(
        "notification point: minimum spacing of CNPs per flow (ConnectX-5 default 4 us; 2 us on other cards)"))

    @model_validator(mode="after")
    def _periods(self):
        if self.rate_reduce_monitor_period < self.dce_tcp_rtt:
            raise ValueError(f"rate_reduce_monitor_period ({self.rate_reduce_monitor_period} ps) must not be "
                             f"shorter than dce_tcp_rtt ({self.dce_tcp_rtt} ps)")
        if self.rpg_max_rate is not None and self.rpg_min_rate > self.rpg_max_rate:
            raise ValueError(f"rpg_min_rate: {self.rpg_min_rate} bit/s exceeds rpg_max_rate "
                             f"({self.rpg_max_rate} bit/s) (allowed: rpg_min_rate <= rpg_max_rate)")
        return self


class DcqcnCxState:
    """Per-flow reaction-point variables (``flow.state``)."""

    __slots__ = ("rc", "rt", "alpha", "first", "t0", "alpha_k", "alpha_cnp", "dec_cnp", "dec_pending",
                 "t_stage", "b_stage", "bytes", "inc_gen", "inc_running", "max_rate", "cuts")

    def __init__(self, line: float):
        self.rc = line
        self.rt = line
        self.alpha = 0          # 10-bit integer, alpha = alpha / 1024
        self.first = True
        self.t0 = 0             # time of the first CNP: phase of the alpha and rate-cut periods
        self.alpha_k = 0        # alpha periods applied so far (boundaries t0 + k dce_tcp_rtt)
        self.alpha_cnp = False  # a CNP arrived in the current alpha period
        self.dec_cnp = False    # a CNP arrived in the current rate-cut period
        self.dec_pending = False
        self.t_stage = 0
        self.b_stage = 0
        self.bytes = 0
        self.inc_gen = 0
        self.inc_running = False
        self.max_rate = line
        self.cuts = 0


@CC.register("dcqcn_cx")
class DcqcnConnectX(CongestionControl):
    """DCQCN reaction point, ConnectX firmware version (module doc); rate-based, no window."""

    Params = DcqcnCxParams
    uses_int = False
    cnp_interval_ps = DcqcnCxParams().min_time_between_cnps   # the default; __init__ sets the configured one

    def __init__(self, params: DcqcnCxParams | None, ctx):
        params = params if params is not None else DcqcnCxParams()
        super().__init__(params, ctx)
        self.cnp_interval_ps = params.min_time_between_cnps
        self._g = params.dce_tcp_g
        self._p = params.dce_tcp_rtt
        self._d = params.rate_reduce_monitor_period
        self._ti = params.rpg_time_reset
        self._b = params.rpg_byte_reset
        self._f = params.rpg_threshold
        self._shift = 1 << params.rpg_gd
        self._keep = params.rpg_min_dec_fac / 100.0

    # -- hooks -------------------------------------------------------------------------------
    def start(self, flow: Flow, t: int) -> None:
        line = float(flow.line_bps)
        s = flow.state = DcqcnCxState(line)
        if self.params.rpg_max_rate is not None:
            s.max_rate = min(line, float(self.params.rpg_max_rate))
        flow.rate_bps = flow.line_bps
        flow.window_bytes = None

    def on_cnp(self, flow: Flow, t: int) -> None:
        s: DcqcnCxState = flow.state
        if s is None or not flow.active:
            return
        if s.first:
            s.first = False
            s.t0 = t
            s.alpha = self.params.initial_alpha_value
            r = self.params.rate_to_set_on_first_cnp
            if r is not None:
                s.rc = s.rt = first_rate(float(r), s.max_rate)
                flow.rate_bps = s.rc
                self._start_increase(flow, s, t)
            return
        self._advance_alpha(s, t)
        s.alpha_cnp = True
        s.dec_cnp = True
        if not s.dec_pending:
            s.dec_pending = True
            d = self._d
            self.ctx.schedule(s.t0 + ((t - s.t0) // d + 1) * d, self._rate_check, flow)

    def on_send(self, flow: Flow, t: int, nbytes: int) -> None:
        s: DcqcnCxState = flow.state
        if s is None or not s.inc_running or not self._b:
            return
        s.bytes += nbytes
        while s.bytes >= self._b and s.inc_running:
            s.bytes -= self._b
            self._increase(flow, s)
            s.b_stage += 1

    def on_done(self, flow: Flow, t: int) -> None:
        s: DcqcnCxState = flow.state
        if s is None:
            return
        s.inc_gen += 1
        s.inc_running = False

    # -- the periodic processes ----------------------------------------------------------------
    def _advance_alpha(self, s: DcqcnCxState, t: int) -> None:
        """Apply the alpha updates of every period boundary ``t0 + k dce_tcp_rtt <= t`` not yet applied."""
        n = (t - s.t0) // self._p
        if n <= s.alpha_k:
            return
        s.alpha = alpha_periods(s.alpha, s.alpha_cnp, self._g, n - s.alpha_k)
        s.alpha_cnp = False
        s.alpha_k = n

    def _rate_check(self, t: int, flow: Flow) -> None:
        s: DcqcnCxState = flow.state
        s.dec_pending = False
        if not flow.active or not s.dec_cnp:
            return
        self._advance_alpha(s, t)
        s.dec_cnp = False
        p = self.params
        if p.clamp_tgt_rate or s.b_stage > 0 or (p.clamp_tgt_rate_after_time_inc and s.t_stage > 0):
            s.rt = s.rc
        s.rc = rate_cut(s.rc, s.alpha, self._shift, self._keep, float(p.rpg_min_rate), s.max_rate)
        s.cuts += 1
        flow.rate_bps = s.rc
        self._start_increase(flow, s, t)

    def _start_increase(self, flow: Flow, s: DcqcnCxState, t: int) -> None:
        s.t_stage = 0
        s.b_stage = 0
        s.bytes = 0
        s.inc_gen += 1
        s.inc_running = True
        self.ctx.schedule(t + self._ti, self._increase_timer, (flow, s.inc_gen))

    def _increase_timer(self, t: int, arg) -> None:
        flow, gen = arg
        s: DcqcnCxState = flow.state
        if gen != s.inc_gen or not flow.active:
            return
        self._increase(flow, s)
        s.t_stage += 1
        if s.inc_running:
            self.ctx.schedule(t + self._ti, self._increase_timer, (flow, gen))

    def _increase(self, flow: Flow, s: DcqcnCxState) -> None:
        p = self.params
        s.rc, s.rt, recovered = rate_increase(s.rc, s.rt, s.t_stage, s.b_stage, self._f, float(p.rpg_ai_rate),
                                              float(p.rpg_hai_rate), s.max_rate)
        if recovered:
            s.inc_running = False      # back at the maximum: nothing left to increase
            s.inc_gen += 1
            s.bytes = 0
        flow.rate_bps = s.rc


# ---------------------------------------------------------------------- shared arithmetic
# Plain functions over ints and floats: DcqcnConnectX calls them, and the compiled packet core
# (fabricsim/engine/compiled/core.py, core.SHARED) compiles them from this source, so both kernels
# perform the same operations in the same order (numba is never given fastmath). ``min`` and
# ``max`` are written out as comparisons with Python's meaning (``min(a, b)`` is ``b`` only if
# ``b < a``).


def alpha_periods(alpha: int, cnp: bool, g: int, periods: int) -> int:
    """The 10-bit alpha after ``periods >= 1`` boundaries of the alpha period: the first with a
    CNP in it if ``cnp`` (``floor(g' a / 1024) + 1024 - g'``, capped at 1023), the others empty
    (``floor(g' a / 1024)``; at most ``ALPHA_STEPS_MAX`` of them, after which alpha is 0 anyway).

    >>> alpha_periods(1023, True, 1019, 1), alpha_periods(1023, False, 1019, 3)
    (1023, 1008)
    """
    a = g * alpha // 1024
    if cnp:
        a += 1024 - g
        if a > 1023:
            a = 1023
    steps = periods - 1
    if steps > ALPHA_STEPS_MAX:
        steps = ALPHA_STEPS_MAX
    for _ in range(steps):
        if a == 0:
            break
        a = g * a // 1024
    return a


def first_rate(rate: float, max_rate: float) -> float:
    """Rc (and Rt) at a queue pair's first CNP: ``rate_to_set_on_first_cnp``, at most the maximum rate.

    >>> first_rate(100e9, 400e9)
    100000000000.0
    """
    return max_rate if max_rate < rate else rate


def rate_cut(rc: float, alpha: int, shift: int, keep: float, min_rate: float, max_rate: float) -> float:
    """Rc after a rate cut: ``Rc - min(Rc alpha / 2^rpg_gd, Rc (1 - keep))`` (``shift = 2^rpg_gd``,
    ``keep = rpg_min_dec_fac / 100``), at least ``min(rpg_min_rate, the maximum rate)``.

    >>> rate_cut(400e9, 1023, 2048, 0.5, 1e6, 400e9)
    200195312500.0
    """
    a = rc * alpha / shift
    b = rc * (1.0 - keep)
    r = rc - (b if b < a else a)
    floor = max_rate if max_rate < min_rate else min_rate
    return floor if floor > r else r


def rate_increase(rc: float, rt: float, t_stage: int, b_stage: int, f: int, ai: float, hai: float,
                  top: float) -> tuple[float, float, bool]:
    """One increase event with the timer and byte stages before it: hyper (``Rt += R_HAI``) if both
    stages exceed ``f``, additive (``Rt += R_AI``) if one has reached it, else fast recovery; then
    ``Rc <- (Rt + Rc)/2``, both capped at ``top`` (the maximum rate). Returns ``(Rc, Rt,
    recovered)``: recovered when Rt is at the top and Rc within ``RECOVERED_TOLERANCE`` of it (Rc
    is then set to it).

    >>> rate_increase(200e9, 400e9, 0, 0, 1, 5e6, 5e7, 400e9)
    (300000000000.0, 400000000000.0, False)
    """
    lo, hi = (t_stage, b_stage) if t_stage < b_stage else (b_stage, t_stage)
    if lo > f:                                 # hyper increase
        rt += hai
    elif hi >= f:                              # additive increase
        rt += ai
    if rt > top:
        rt = top
    rc = (rt + rc) / 2.0
    if rc > top:
        rc = top
    if rt >= top and rc >= top * (1.0 - RECOVERED_TOLERANCE):
        return top, rt, True
    return rc, rt, False
