"""Unit tests of the congestion-control algorithm objects (fabricsim.cc), driven by a fake clock.

No packet engine: a tiny event queue stands in for ``ctx`` and the tests call the hooks directly.
"""
from __future__ import annotations

import heapq
import itertools
from collections import deque

import pytest
from pydantic import ValidationError

from fabricsim.cc import CC, AckInfo, Flow
from fabricsim.cc.dcqcn import Dcqcn
from fabricsim.cc.telemetry import Telemetry

US = 1_000_000          # ps
G100 = 100_000_000_000  # bit/s


class FakeCtx:
    def __init__(self):
        self.now = 0
        self._q = []
        self._seq = itertools.count()
        self.scheduled = 0

    def schedule(self, t, fn, arg):
        assert t >= self.now
        self.scheduled += 1
        heapq.heappush(self._q, (t, next(self._seq), fn, arg))

    def run_until(self, t_end):
        while self._q and self._q[0][0] <= t_end:
            t, _, fn, arg = heapq.heappop(self._q)
            self.now = t
            fn(t, arg)
        self.now = t_end

    def pending(self):
        return len(self._q)


def jain(xs):
    return sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))


def make_dcqcn(**params):
    ctx = FakeCtx()
    cls = CC.get("dcqcn")
    return cls(cls.Params.model_validate(params), ctx), ctx


def new_flow(cc, uid=0, line=G100, rtt=10 * US, mtu=4096, t=0):
    f = Flow(uid, line, rtt, mtu)
    cc.start(f, t)
    return f


# --------------------------------------------------------------------------- registry / params
def test_registry_and_params():
    assert CC.get("dcqcn") is Dcqcn and CC.get("telemetry") is Telemetry
    assert Telemetry.uses_int and not Dcqcn.uses_int
    P = CC.get("dcqcn").Params
    for bad in ({"g": 2}, {"g": 0}, {"fast_recovery_steps": 0}, {"alpha_timer": "0us"},
                {"byte_counter": "-1MB"}, {"min_rate": "0Gbps"}, {"nonsense": 1}):
        with pytest.raises(ValidationError):
            P.model_validate(bad)
    p = P.model_validate({"alpha_timer": "60us", "byte_counter": "10MB", "rate_ai": "40Mbps",
                          "cnp_interval": "4us"})
    assert (p.alpha_timer, p.byte_counter, p.rate_ai) == (60 * US, 10_000_000, 40_000_000)
    cc = Dcqcn(p, FakeCtx())
    assert cc.cnp_interval_ps == 4 * US
    assert Dcqcn.cnp_interval_ps == 50 * US
    TP = CC.get("telemetry").Params
    for bad in ({"eta": 1.5}, {"eta": 0}, {"expected_flows": 0}, {"base_rtt": "0us"},
                {"rate_interval_rtts": -1}, {"qlen_window_rtts": -0.5}, {"window_rtt_max": 0.9},
                {"rtt_gain": 0}, {"estimator": "max"}, {"global_base_rtt": True, "base_rtt": "5us"}):
        with pytest.raises(ValidationError):
            TP.model_validate(bad)
    tp = TP.model_validate({"base_rtt": "5us", "w_ai": "1KB", "min_rate": "1Gbps"})
    assert (tp.base_rtt, tp.w_ai, tp.min_rate) == (5 * US, 1000, 10 ** 9)


# --------------------------------------------------------------------------- DCQCN
def test_dcqcn_starts_at_line_rate_without_timers():
    cc, ctx = make_dcqcn()
    f = new_flow(cc)
    assert f.rate_bps == G100 and f.window_bytes is None
    cc.on_send(f, 0, 100_000_000)
    assert ctx.pending() == 0 and f.rate_bps == G100


def test_dcqcn_first_cnp_halves_and_keeps_target():
    cc, ctx = make_dcqcn(g=1 / 256)
    f = new_flow(cc)
    cc.on_cnp(f, 0)
    s = f.state
    assert f.rate_bps == pytest.approx(G100 / 2)
    assert s.rt == G100
    assert s.alpha == pytest.approx((1 - 1 / 256) + 1 / 256)   # alpha stays 1
    # a second cut right away: Rt <- Rc (clamp), Rc *= 1 - alpha/2
    cc.on_cnp(f, 1)
    assert s.rt == pytest.approx(G100 / 2)
    assert s.rc == pytest.approx(G100 / 4)


def test_dcqcn_no_clamp_keeps_target_without_increase():
    cc, ctx = make_dcqcn(clamp_target_rate=False)
    f = new_flow(cc)
    cc.on_cnp(f, 0)
    cc.on_cnp(f, 1)
    assert f.state.rt == G100          # no increase happened: the target is not lowered
    assert f.state.rc == pytest.approx(G100 / 4)


def test_dcqcn_alpha_decays_per_K():
    g, K = 1 / 16, 55 * US
    cc, ctx = make_dcqcn(g=g, initial_alpha=0.5, alpha_timer="55us")
    f = new_flow(cc)
    cc.on_cnp(f, 0)
    a0 = (1 - g) * 0.5 + g
    assert f.state.alpha == pytest.approx(a0)
    ctx.run_until(K - 1)
    assert f.state.alpha == pytest.approx(a0)
    for n in range(1, 6):
        ctx.run_until(n * K)
        assert f.state.alpha == pytest.approx(a0 * (1 - g) ** n)
    # a CNP restarts the alpha timer: no decay K after the previous expiry
    t_cnp = 5 * K + 10 * US
    cc.on_cnp(f, t_cnp)
    a1 = f.state.alpha
    ctx.run_until(6 * K + 1)
    assert f.state.alpha == a1
    ctx.run_until(t_cnp + K)
    assert f.state.alpha == pytest.approx(a1 * (1 - g))


def test_dcqcn_fast_recovery_then_additive_then_hyper():
    F, Ti = 5, 55 * US
    cc, ctx = make_dcqcn(fast_recovery_steps=F, rate_increase_timer="55us", alpha_timer="1000ms",
                         rate_ai="40Mbps", rate_hai="200Mbps", byte_counter="1GB")
    f = new_flow(cc)
    cc.on_cnp(f, 0)
    cc.on_cnp(f, 0)                            # Rt = 50G, Rc = 25G
    s = f.state
    rt, rc = s.rt, s.rc
    assert rt == pytest.approx(G100 / 2)
    for k in range(1, F):                      # timer events 1..F-1: fast recovery
        ctx.run_until(k * Ti)
        assert s.t_count == k and s.rt == rt
        assert s.rc == pytest.approx((rt + rc) / 2)
        assert rt - s.rc == pytest.approx((rt - rc) / 2)
        rc = s.rc
    ctx.run_until(F * Ti)                      # T reaches F: additive increase
    assert s.rt == pytest.approx(rt + 40e6)
    assert s.rc == pytest.approx((rt + 40e6 + rc) / 2)
    rt, rc = s.rt, s.rc
    ctx.run_until((F + 1) * Ti)
    assert s.rt == pytest.approx(rt + 40e6)
    # byte counter: B bytes per event; both counters >= F -> hyper increase i*R_HAI
    rt = s.rt
    cc.on_send(f, ctx.now, 5 * 10 ** 9)        # 5 events; the 5th has BC = F, T = F+1: i = 1
    assert s.bc_count == 5
    assert s.rt == pytest.approx(rt + 4 * 40e6 + 200e6)
    rt = s.rt
    cc.on_send(f, ctx.now, 10 ** 9)            # BC = 6, T = 6: i = min - F + 1 = 2
    assert s.rt == pytest.approx(rt + 2 * 200e6)


def test_dcqcn_default_steps_scale_with_line_rate():
    cc, ctx = make_dcqcn()
    f40 = new_flow(cc, uid=1, line=40 * 10 ** 9)
    f400 = new_flow(cc, uid=2, line=400 * 10 ** 9)
    assert f40.state.rai == pytest.approx(40e6) and f40.state.rhai == pytest.approx(200e6)
    assert f400.state.rai == pytest.approx(400e6) and f400.state.rhai == pytest.approx(2000e6)


def test_dcqcn_min_rate_floor():
    cc, ctx = make_dcqcn(min_rate="1Gbps")
    f = new_flow(cc)
    for i in range(20):
        cc.on_cnp(f, i)
    assert f.rate_bps == 1e9 and f.state.rc == 1e9


def test_dcqcn_recovers_to_line_rate_and_parks_timers():
    cc, ctx = make_dcqcn(rate_ai="5Gbps", rate_hai="20Gbps", byte_counter="1MB")
    f = new_flow(cc)
    cc.on_cnp(f, 0)
    cc.on_cnp(f, 1)
    t = 0
    while f.state.inc_running and t < 1000 * 55 * US:
        t += 5 * US
        cc.on_send(f, t, int(f.rate_bps * 5 * US / 8e12))
        ctx.run_until(t)
        assert f.rate_bps <= G100 and f.state.rt <= G100
    assert f.rate_bps == G100 and f.state.rt == G100
    ctx.run_until(t + 200 * US)
    assert ctx.pending() == 0                  # both timers stopped at line rate
    # the parked alpha timer's missed expiries are applied at the next CNP
    s = f.state
    a_parked, phase = s.alpha, s.alpha_phase
    t_cnp = phase + 10 * 55 * US + 7
    cc.on_cnp(f, t_cnp)
    assert s.alpha == pytest.approx(a_parked * (1 - 1 / 256) ** 10 * (1 - 1 / 256) + 1 / 256)


def test_dcqcn_timers_stop_after_done():
    cc, ctx = make_dcqcn()
    f = new_flow(cc)
    cc.on_cnp(f, 0)
    ctx.run_until(200 * US)
    rate = f.rate_bps
    f.active = False
    cc.on_done(f, ctx.now)
    n = ctx.scheduled
    ctx.run_until(10_000 * US)
    assert ctx.pending() == 0 and ctx.scheduled == n
    assert f.rate_bps == rate
    cc.on_cnp(f, ctx.now)                      # a late CNP for a finished flow is ignored
    assert ctx.pending() == 0 and f.rate_bps == rate


def test_dcqcn_fluid_fairness():
    """N staggered flows on one bottleneck; every N us a CNP goes to every flow while the
    aggregate exceeds C (a step-marking switch and NP in fluid form)."""
    n, C = 4, G100
    cc, ctx = make_dcqcn()
    step = cc.cnp_interval_ps
    flows = []
    t, t_end = 0, 250_000 * US         # default DCQCN converges slowly (Jain ~0.9 at 50 ms, ~0.99 at 200 ms)
    starts = [i * 3000 * US for i in range(n)]
    samples = []
    while t < t_end:
        for i, s0 in enumerate(starts):
            if len(flows) == i and t >= s0:
                flows.append(new_flow(cc, uid=i, t=t))
        t += step
        for f in flows:
            cc.on_send(f, t, int(f.rate_bps * step / 8e12))
        ctx.run_until(t)
        if sum(f.rate_bps for f in flows) > C:
            for f in flows:
                cc.on_cnp(f, t)
        if t > t_end - 20_000 * US:
            samples.append([f.rate_bps for f in flows])
    mean = [sum(col) / len(samples) for col in zip(*samples)]
    assert jain(mean) >= 0.95
    util = sum(mean) / C
    assert 0.85 <= util <= 1.05


# --------------------------------------------------------------------------- telemetry
T_RTT = 10 * US


def make_tel(**params):
    ctx = FakeCtx()
    cls = CC.get("telemetry")
    return cls(cls.Params.model_validate(params), ctx), ctx


def hop(ts, tx, q=0, bps=G100):
    return ((ts, tx, q, bps),)


def test_telemetry_start_window():
    cc, _ = make_tel(eta=0.95, expected_flows=16)
    f = new_flow(cc, rtt=T_RTT)
    w_init = G100 * T_RTT / 8e12
    assert f.window_bytes == pytest.approx(w_init) == 125_000
    assert f.rate_bps == G100
    assert f.state.w_ai == pytest.approx(w_init * 0.05 / 16)
    cc2, _ = make_tel(base_rtt="5us")
    assert new_flow(cc2, rtt=T_RTT).window_bytes == pytest.approx(G100 * 5 * US / 8e12)


def test_telemetry_overload_shrinks_window_to_target():
    cc, _ = make_tel(eta=0.95, initial_u=0.0)
    f = new_flow(cc, rtt=T_RTT)
    s = f.state
    wc = s.wc
    cc.on_ack(f, 0, AckInfo(cum_bytes=1, int_hops=hop(0, 0)))
    assert f.window_bytes == pytest.approx(wc)            # first ACK only stores the hops
    # one full T later the link sent 1.5x capacity worth of bytes: u = 1.5, tau = T -> U = 1.5
    tx = 1.5 * G100 * T_RTT / 8e12
    f.sent_bytes = 10_000
    cc.on_ack(f, T_RTT, AckInfo(cum_bytes=2, int_hops=hop(T_RTT, tx)))
    assert s.u == pytest.approx(1.5)
    assert f.window_bytes == pytest.approx(wc * 0.95 / 1.5 + s.w_ai)
    assert f.rate_bps == pytest.approx(f.window_bytes * 8e12 / T_RTT)
    assert s.wc == pytest.approx(f.window_bytes) and s.last_update_seq == 10_000


def test_telemetry_queue_counts_in_utilisation():
    cc, _ = make_tel(eta=0.95, initial_u=0.0)
    f = new_flow(cc, rtt=T_RTT)
    bdp = G100 * T_RTT / 8e12
    cc.on_ack(f, 0, AckInfo(cum_bytes=1, int_hops=hop(0, 0, q=bdp)))
    cc.on_ack(f, T_RTT, AckInfo(cum_bytes=2, int_hops=hop(T_RTT, 0, q=2 * bdp)))
    assert f.state.u == pytest.approx(1.0)                # min(q, L.q)/(B T) = 1, no tx


def test_telemetry_idle_grows_by_w_ai_up_to_w_init():
    cc, _ = make_tel(eta=0.95, max_stage=1000, initial_u=0.0, w_ai="1KB")
    f = new_flow(cc, rtt=T_RTT)
    s = f.state
    s.wc = s.w = 50_000.0
    t = 0
    cc.on_ack(f, t, AckInfo(cum_bytes=1, int_hops=hop(t, 0)))
    for k in range(1, 30):
        t += T_RTT
        f.sent_bytes += 1
        before = s.wc
        cc.on_ack(f, t, AckInfo(cum_bytes=f.sent_bytes, int_hops=hop(t, 0)))
        assert s.wc == pytest.approx(before + 1000)        # additive, one per RTT
    for k in range(200):
        t += T_RTT
        f.sent_bytes += 1
        cc.on_ack(f, t, AckInfo(cum_bytes=f.sent_bytes, int_hops=hop(t, 0)))
    assert f.window_bytes == s.w_init and f.rate_bps == G100


def test_telemetry_wc_once_per_rtt():
    cc, _ = make_tel(eta=0.95, initial_u=0.0)
    f = new_flow(cc, rtt=T_RTT)
    s = f.state
    cc.on_ack(f, 0, AckInfo(cum_bytes=10, int_hops=hop(0, 0)))
    f.sent_bytes = 1_000_000
    tx, t = 0.0, 0
    cc.on_ack(f, 1, AckInfo(cum_bytes=100, int_hops=hop(1, 0)))   # updates Wc, lastUpdateSeq = 1e6
    wc = s.wc
    ws = []
    for k in range(50):                                            # overloaded link, ACKs below 1e6
        t += US
        tx += 2 * G100 * US / 8e12
        cc.on_ack(f, t, AckInfo(cum_bytes=200 + k, int_hops=hop(t, tx)))
        ws.append(f.window_bytes)
    assert s.wc == wc                                              # reference window fixed
    assert all(b <= a for a, b in zip(ws, ws[1:])) and ws[-1] < wc  # W reacts per ACK...
    assert s.u > 1.9
    assert ws[-1] == pytest.approx(wc * 0.95 / s.u + s.w_ai)       # ...from the same Wc (no compounding)
    cc.on_ack(f, t + US, AckInfo(cum_bytes=1_000_001, int_hops=hop(t + US, tx + 2 * G100 * US / 8e12)))
    assert s.wc == f.window_bytes < wc


def test_telemetry_skips_path_change_and_bad_deltas():
    cc, _ = make_tel(initial_u=0.5)
    f = new_flow(cc, rtt=T_RTT)
    s = f.state
    cc.on_ack(f, 0, AckInfo(cum_bytes=1, int_hops=hop(0, 0)))
    two = ((US, 10 ** 6, 0, G100), (US, 10 ** 6, 0, G100))
    cc.on_ack(f, US, AckInfo(cum_bytes=2, int_hops=two))           # hop count changed: store only
    assert s.u == 0.5 and s.last_hops == two
    cc.on_ack(f, US, AckInfo(cum_bytes=3, int_hops=two))           # zero ts delta: nothing measured
    assert s.u == 0.5
    cc.on_ack(f, 2 * US, AckInfo(cum_bytes=4, int_hops=None))       # no INT: ignored
    assert s.u == 0.5
    three = ((2 * US, 0, 0, G100), (2 * US, 10 ** 6 + 2500, 0, G100))
    cc.on_ack(f, 2 * US, AckInfo(cum_bytes=5, int_hops=three[:2]))  # tx went backwards on hop 0 -> 0
    assert s.u == pytest.approx(0.9 * 0.5 + 0.1 * 0.2)             # hop 1: 2500 B in 1 us at 100G


def test_telemetry_min_window():
    cc, _ = make_tel(min_rate="10Gbps", initial_u=0.0)
    f = new_flow(cc, rtt=T_RTT, mtu=4096)
    s = f.state
    assert s.w_min == pytest.approx(12_500)
    cc.on_ack(f, 0, AckInfo(cum_bytes=1, int_hops=hop(0, 0)))
    cc.on_ack(f, T_RTT, AckInfo(cum_bytes=2, int_hops=hop(T_RTT, 0, q=0)))
    cc.on_ack(f, 2 * T_RTT, AckInfo(cum_bytes=3, int_hops=hop(2 * T_RTT, 100 * G100 * T_RTT / 8e12)))
    assert f.window_bytes == pytest.approx(12_500) and f.rate_bps == pytest.approx(10e9)


def test_telemetry_fluid_converges_to_eta_and_fair():
    """N staggered flows over one link of capacity C with a queue; each flow gets an ACK per
    microsecond carrying the link's INT as it was one base RTT earlier."""
    n, C, T = 4, G100, T_RTT
    dt = US
    cc, _ = make_tel(eta=0.95, expected_flows=16)
    starts = [i * 200 * US for i in range(n)]
    flows = []
    q = tx = 0.0
    delay = int(T // dt)
    history = deque(maxlen=delay + 1)     # (int hop tuple, sent_bytes per flow) per step
    t, t_end = 0, 4000 * US
    totals, shares = [], []
    while t < t_end:
        for i, s0 in enumerate(starts):
            if len(flows) == i and t >= s0:
                flows.append(new_flow(cc, uid=i, rtt=T, t=t))
        t += dt
        arrivals = sum(f.rate_bps for f in flows) * dt / 8e12
        for f in flows:
            f.sent_bytes += f.rate_bps * dt / 8e12
        q += arrivals
        out = min(q, C * dt / 8e12)
        q -= out
        tx += out
        history.append((((t, tx, q, C),), [f.sent_bytes for f in flows]))
        if len(history) > delay:
            hops, sent = history[0]
            for f, cum in zip(flows, sent):
                cc.on_ack(f, t, AckInfo(cum_bytes=cum, int_hops=hops))
        if t > t_end - 1000 * US:
            totals.append(sum(f.rate_bps for f in flows))
            shares.append([f.rate_bps for f in flows])
    util = sum(totals) / len(totals) / C
    assert 0.9 <= util <= 1.0
    mean = [sum(col) / len(shares) for col in zip(*shares)]
    assert jain(mean) >= 0.98
    assert q < 0.5 * C * T / 8e12            # the queue drains


def test_telemetry_compares_counters_per_port_when_paths_change_per_packet():
    # two spine ports alternate packet by packet (adaptive routing): port 1 is busy at exactly
    # its capacity, port 2 idle. Samples compared across ports would mix unrelated counters
    # (tx of port 2 minus tx of port 1 is meaningless); per port, U must come out as port 1's 1.0.
    cc, _ = make_tel(eta=0.95, initial_u=0.0)
    f = new_flow(cc, rtt=T_RTT)
    per_T = G100 * T_RTT / 8e12             # bytes a 100G port sends in one T
    busy, idle = 5_000_000_000, 7
    seen = []
    for k in range(8):
        t = k * T_RTT
        port, tx = (1, busy + k * per_T) if k % 2 == 0 else (2, idle)
        f.sent_bytes = k
        cc.on_ack(f, t, AckInfo(cum_bytes=k + 1, int_hops=((t, tx, 0, G100, port),)))
        seen.append(f.state.u)
    assert set(f.state.ports) == {1, 2}
    # from the second sample of each port on: port 1 measures 1.0, port 2 measures 0.0
    # (each sample spans 2 T >= T, so the EWMA takes the new value whole)
    assert seen[2] == pytest.approx(1.0) and seen[4] == pytest.approx(1.0) and seen[6] == pytest.approx(1.0)
    assert seen[3] == pytest.approx(0.0) and seen[5] == pytest.approx(0.0)
