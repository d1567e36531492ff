"""Switch models against hand-computed cases and theory: priority classes, dequeue-time ECN/INT,
the dynamic-threshold shared buffer (Choudhury-Hahne), INT wire bytes, PFC response delay and
headroom, and the ConnectX DCQCN reaction point on a fake clock.

The unit cases drive one switch directly: packets are injected on an upstream port at chosen
times and a sink records what reaches the next node and when. 400G: 20 ps per byte, so a 4178 B
frame takes 83 560 ps and a 64 B control packet 1 280 ps.
"""
from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

import fabricsim
from fabricsim.cc import CC
from fabricsim.config.switch import SwitchFeatures, pfc_response_ps
from fabricsim.engine.kernel import HeapKernel
from fabricsim.net.lossless import LosslessPort, LosslessSwitch, Pfc
from fabricsim.net.packet import ACK, CNP, DATA, Packet
from fabricsim.net.port import Port, SharedBuffer
from fabricsim.net.switch import Switch

G400 = 400 * 10**9
W = 4178                  # data frame, wire bytes
C = 64                    # control packet, wire bytes
SER = W * 20              # 83 560 ps at 400G
CSER = C * 20             # 1 280 ps
DELAY = 500_000           # 500 ns link
US = 1_000_000


class Bench:
    """One switch (lossy or lossless) with ``nports`` egress ports at 400G, fed by one upstream port."""

    def __init__(self, lossless=False, nports=1, node=None, **feats):
        self.kernel = k = HeapKernel()
        self.feats = f = SwitchFeatures.model_validate(feats)
        self.got, self.drops = [], []
        self.sent = 0
        stamp = f.telemetry == "on"
        sw = self.sw = (LosslessSwitch if lossless else Switch)(0, "sw", self)
        sw.kernel, sw.push, sw.seq = k, k.push, k.seq
        pcls = LosslessPort if lossless else Port
        if lossless:
            sw.pfc = Pfc(f.pfc, k, stamp, W)
        node = node or {}
        per_port = node.get("buffer_bytes") if node.get("buffer_mode") == "per_port" else None
        for i in range(nports):
            p = pcls(i, 0, 100 + i, "x", G400, DELAY, 0, per_port)
            p.deliver = self.sink
            if lossless:
                p.pfc = sw.pfc
            sw.ports.append(p)
            sw.port_to[100 + i] = [p]
            sw.route[100 + i] = (p, (p,))
        if f.ecn.enabled:
            sw.kmin, sw.kmax, sw.pmax, sw.ecn_salt = f.ecn.kmin, f.ecn.kmax, f.ecn.pmax, 1
        sw.stamp = stamp
        sw.setup(f, node, self.sink)
        self.up = pcls(99, 50, 0, "x", G400, DELAY, 0, None)
        if lossless:
            self.up.pfc = sw.pfc

    def drop(self, port, pkt):
        self.drops.append(pkt)

    def sink(self, t, pkt):
        inflight = pkt.hop.inflight
        inflight.popleft()
        if inflight:
            self.kernel.push(inflight[0])
        self.got.append((t, pkt))

    def _inject(self, t, pkt):
        self.up.inflight.append(None)       # the switch pops its own arrival from the upstream port
        self.sw.arrive(t, pkt)

    def send(self, t, kind=DATA, wire=W, dst=100, name=None):
        # (a queue pair of its own: ECN's marking draw is keyed by the packet's identity)
        self.sent += 1
        pkt = Packet(SimpleNamespace(uid=self.sent), dst, wire, wire, 0, t, 1, self.up, kind)
        pkt.sack = name
        self.kernel.schedule(t, self._inject, pkt)
        return pkt

    def run(self):
        self.kernel.run(10**15)
        return {pkt.sack: (t, pkt) for t, pkt in self.got}


# ---------------------------------------------------------------------------------------------
# priority classes: CNP strict (TC6), ACK/NAK in the data class (TC3), in both modes


@pytest.mark.parametrize("lossless", [False, True])
def test_cnp_overtakes_a_full_data_queue_and_ack_waits_in_it(lossless):
    b = Bench(lossless=lossless, ecn={"enabled": False})
    for i in range(10):
        b.send(0, name=f"d{i}")
    b.send(1000, CNP, C, name="cnp")
    b.send(1000, ACK, C, name="ack")
    b.send(2000, name="late")
    out = b.run()
    # the CNP leaves right after the packet on the wire (d0, last bit at SER), ahead of d1..d9
    assert out["cnp"][0] == SER + CSER + DELAY
    # the ACK waits behind the ten data packets and the CNP, the late data packet behind it
    assert out["ack"][0] == 10 * SER + CSER + CSER + DELAY
    assert out["late"][0] == out["ack"][0] + SER
    order = [pkt.sack for _, pkt in sorted(b.got, key=lambda e: e[0])]
    assert order == ["d0", "cnp"] + [f"d{i}" for i in range(1, 10)] + ["ack", "late"]


def test_strict_priority_none_and_control_reproduce_one_fifo_and_all_control_strict():
    fifo = Bench(strict_priority="none", ecn={"enabled": False})
    allc = Bench(strict_priority="control", ecn={"enabled": False})
    for b in (fifo, allc):
        for i in range(4):
            b.send(0, name=f"d{i}")
        b.send(1000, ACK, C, name="ack")
    assert fifo.run()["ack"][0] == 4 * SER + CSER + DELAY
    assert allc.run()["ack"][0] == SER + CSER + DELAY


# ---------------------------------------------------------------------------------------------
# ECN and INT sampled at dequeue (both ns-3 reference codes) or at enqueue
#
# p0 at t=0 on an idle port; A at 1 ns (queue ahead: the rest of p0, 4128 B, below kmin);
# b1..b6 at 2..7 ns, all before A starts at 83.56 ns; L at 100 ns, after A started, before b1.
# At its start A has b1..b6 behind it: 6 x 4178 = 25 068 B > kmax: marked at dequeue, not at
# enqueue. b1 has b2..b6 + L = 25 068 B, b2 5 x 4178 = 20 890 B (> kmax), ..., L nothing.

ECN_CASE = {"enabled": True, "kmin": "10000B", "kmax": "20000B", "pmax": 1.0}
NAMES = ["p0", "A"] + [f"b{i}" for i in range(1, 7)] + ["L"]
DEQ_Q = [0, 6 * W, 6 * W, 5 * W, 4 * W, 3 * W, 2 * W, W, 0]


def _ecn_case(lossless=False, sample="dequeue"):
    b = Bench(lossless=lossless, ecn=dict(ECN_CASE, sample=sample), telemetry="on", int_hop="0B", int_header="0B")
    b.send(0, name="p0")
    b.send(1000, name="A")
    for i in range(1, 7):
        b.send(1000 + 1000 * i, name=f"b{i}")
    b.send(100_000, name="L")
    return b.run()


@pytest.mark.parametrize("lossless", [False, True])
def test_dequeue_ecn_marks_a_packet_that_found_a_short_queue_but_left_a_long_one(lossless):
    out = _ecn_case(lossless)
    qlen = [out[n][1].tel[0][2] for n in NAMES]
    assert qlen == DEQ_Q
    marked = [n for n in NAMES if out[n][1].ce]
    # above kmax always; kmin < q <= kmax with probability (q - kmin)/(kmax - kmin); <= kmin never
    assert {"A", "b1", "b2"} <= set(marked)
    assert not {"p0", "b5", "b6", "L"} & set(marked)
    # the departure stamp is the packet's last bit out (A leaves second: 2 x SER)
    assert out["A"][1].tel[0][0] == 2 * SER


def test_enqueue_sampling_sees_the_queue_ahead():
    out = _ecn_case(sample="enqueue")
    assert out["A"][1].tel[0][2] == (SER - 1000) // 20      # the rest of p0: 4128 B
    assert not out["A"][1].ce
    assert out["b6"][1].tel[0][2] == (7 * SER - 7000) // 20  # p0 rest + A + b1..b5 ahead
    assert out["b6"][1].ce


# ---------------------------------------------------------------------------------------------
# dynamic threshold (Choudhury & Hahne 1998): admit iff q + w <= alpha (B - used)


@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0])
def test_dynamic_threshold_admits_a_burst_up_to_alpha_times_the_free_buffer(alpha):
    B = 100_000
    b = Bench(node={"buffer_bytes": B, "buffer_mode": "shared"}, ecn={"enabled": False},
              buffer={"admission": "dynamic", "alpha": alpha})
    for i in range(40):
        b.send(0, name=i)
    out = b.run()
    # at t=0 the k-th packet (k = 0, 1, ...) finds q = used = k w: admitted iff (k+1) w <= alpha (B - k w)
    k_max = int((alpha * B - W) // ((1 + alpha) * W))
    assert len(out) == k_max + 1 and len(b.drops) == 40 - (k_max + 1)


def test_static_per_port_buffer_is_still_available():
    b = Bench(node={"buffer_bytes": 5 * W, "buffer_mode": "per_port"}, ecn={"enabled": False})
    for i in range(10):
        b.send(0, name=i)
    assert len(b.run()) == 5


@pytest.mark.parametrize("alpha", [0.5, 1.0, 2.0])
def test_two_overloaded_ports_settle_at_alpha_b_over_one_plus_two_alpha(alpha):
    B = 1_000_000
    b = Bench(nports=2, node={"buffer_bytes": B, "buffer_mode": "shared"}, ecn={"enabled": False},
              buffer={"admission": "dynamic", "alpha": alpha})
    for i in range(3000):                 # each port offered twice its line rate for 125 us
        t = i * SER // 2
        b.send(t, dst=100, name=("a", i))
        b.send(t, dst=101, name=("b", i))
    b.run()
    q_star = alpha * B / (1 + 2 * alpha)  # 250 000 / 333 333 / 400 000 B
    for p in b.sw.ports:
        assert abs(p.peak_queue_bytes - q_star) <= W
    assert len(b.drops) > 2500             # about half the offered packets


def test_incremental_pool_occupancy_equals_the_sum_over_ports():
    rng = random.Random(7)
    pool = SharedBuffer(10**9)
    ports = [Port(i, 0, 1, "x", rng.choice([100, 400, 800]) * 10**9, 0, 0, None) for i in range(16)]
    for p in ports:
        pool.add(p)
    t = 0
    for _ in range(5000):
        t += rng.randrange(0, 20_000)
        p = rng.choice(ports)
        used = pool.used(t)
        assert abs(used - sum(q.queued_bytes(t) for q in ports)) <= len(ports)
        bu = max(p.busy_until, t) + p.ser_ps(rng.randrange(64, 9000))
        pool.set_busy_until(p, t, bu)
        p.busy_until = bu


# ---------------------------------------------------------------------------------------------
# INT adds its bytes to the wire: header once + per hop (HPCC ns-3: 2 + 8 per hop)


def test_int_adds_header_plus_hops_times_bytes_per_hop(tmp_path):
    (tmp_path / "m.csv").write_text("id,src,dst,size_bytes\n0,0,1,1048576\n")

    def links(telemetry):
        res = fabricsim.run({"name": "int", "topology": {"hosts_per_leaf": 1, "leaves": 2, "spines": 1,
                                                          "buffer": {"size": "unbounded"}},
                             "traffic": {"pattern": "csv", "path": str(tmp_path / "m.csv")},
                             "switch": {"telemetry": telemetry, "int_hop": "8B", "int_header": "2B"}})
        L = res.links
        return {(r.src_name, r.dst_name): r.tx_data_bytes for r in L.itertuples()}, int(res.messages["delivered_bytes"].sum())

    off, _ = links("off")
    on, delivered = links("on")
    n = 1048576 // 4096
    path = [("h0", "leaf0", 0), ("leaf0", "spine0", 1), ("spine0", "leaf1", 2), ("leaf1", "h1", 3)]
    for a, b, hops in path:
        extra = 0 if hops == 0 else 2 + 8 * hops
        assert on[(a, b)] - off[(a, b)] == n * extra, (a, b)
    assert delivered == 1048576                     # payload unchanged


# ---------------------------------------------------------------------------------------------
# PFC: response delay (IEEE 802.3 Annex 31B) and headroom


def test_pause_takes_effect_after_flight_plus_response():
    assert pfc_response_ps(G400) == -(-905 * 512 * 10**12 // G400)       # 1 158.4 ns
    for response, expect in (("auto", DELAY + pfc_response_ps(G400)), ("300ns", DELAY + 300_000)):
        k = HeapKernel()
        pfc = Pfc(SwitchFeatures.model_validate({"pfc": {"enabled": True, "response": response}}).pfc, k, False, W)
        port = LosslessPort(0, 0, 1, "x", G400, DELAY, 0, None)
        port.nic = object()                 # a NIC port: pausing only sets the flag
        pfc.signal(0, port, True)
        k.run(expect - 1)
        assert not port.paused
        k.run(expect)
        assert port.paused


def test_incast_ingress_occupancy_stays_within_xoff_plus_computed_headroom(tmp_path):
    rows = ["id,src,dst,size_bytes"] + [f"{i},{i},0,2097152" for i in range(1, 9)]
    (tmp_path / "i.csv").write_text("\n".join(rows) + "\n")

    def run(response):
        return fabricsim.run({"name": "pfc", "topology": {"hosts_per_leaf": 9, "leaves": 1, "spines": 0,
                                                          "host_link": {"rate": "400Gbps", "delay": "1us"}},
                              "traffic": {"pattern": "csv", "path": str(tmp_path / "i.csv")},
                              "switch": {"pfc": {"enabled": True, "response": response}}})
    xoff = SwitchFeatures().pfc.xoff
    over = {}
    for response in ("0ns", "auto"):
        res = run(response)
        L = res.links
        up = L[(L["dst_name"] == "leaf0") & (L["src_name"] != "h0")]
        assert (up["pfc_pause_events"] > 0).all()
        assert (up["pfc_peak_ingress_bytes"] <= xoff + up["pfc_headroom_bytes"]).all()
        over[response] = int((up["pfc_peak_ingress_bytes"] - xoff).max())
        assert res.messages["completed"].all()
    # the response time is 1.16 us at 400G: up to 58 KB more arrives after XOFF (7/8 of it net,
    # the hot port drains each ingress at 1/8 of line rate)
    resp_bytes = pfc_response_ps(G400) * G400 // (8 * 10**12)
    assert over["auto"] - over["0ns"] > 0.75 * resp_bytes


# ---------------------------------------------------------------------------------------------
# ConnectX DCQCN (DOCA parameters) on a fake clock


class FakeCtx:
    def __init__(self):
        self.now = 0
        self.q = []
        self.n = 0

    def schedule(self, t, fn, arg):
        import heapq
        assert t >= self.now
        heapq.heappush(self.q, (t, self.n, fn, arg))
        self.n += 1

    def run_until(self, t_end):
        import heapq
        while self.q and self.q[0][0] <= t_end:
            t, _, fn, arg = heapq.heappop(self.q)
            self.now = t
            fn(t, arg)
        self.now = t_end


def _cx(**params):
    from fabricsim.cc import Flow
    cls = CC.get("dcqcn_cx")
    ctx = FakeCtx()
    cc = cls(cls.Params.model_validate(params), ctx)
    f = Flow(0, 100 * 10**9, 10 * US, 4096)
    cc.start(f, 0)
    return cc, ctx, f


def _alpha_step(a, cnp, g=1019):
    """DOCA rule, 10-bit: a <- g a / 1024 (+ 1024 - g if a CNP arrived in the period), at most 1023."""
    a = g * a // 1024
    return min(a + 1024 - g, 1023) if cnp else a


def test_connectx_first_cnp_sets_alpha_and_keeps_line_rate():
    cc, ctx, f = _cx()
    assert cc.cnp_interval_ps == 4 * US          # min_time_between_cnps
    cc.on_cnp(f, 0)
    assert f.state.alpha == 1023 and f.rate_bps == 100 * 10**9
    assert not ctx.q                              # nothing to do until another CNP


def test_connectx_alpha_and_rate_trajectory_follow_the_doca_rules():
    cc, ctx, f = _cx()
    line = 100e9
    cc.on_cnp(f, 0)                               # t0 = 0: alpha 1023, no cut
    cc.on_cnp(f, 1_500_000)                       # in alpha period 2 and rate period 1
    a = _alpha_step(1023, False)                  # boundary 1 us: no CNP in [0, 1)
    assert f.state.alpha == a
    ctx.run_until(4 * US)                         # rate-cut check at 4 us
    a = _alpha_step(a, True)                      # 2 us: the CNP at 1.5 us
    a = _alpha_step(_alpha_step(a, False), False)  # 3 us, 4 us
    assert f.state.alpha == a
    rc = line - min(line * a / 2048, line * 0.5)  # rpg_gd 11: alpha/2, at most 50 %
    assert f.rate_bps == pytest.approx(rc) and f.state.rt == line   # no clamp: no increase yet
    # byte counter (32767 B): first event fast recovery (stages 0 < F = 1), then additive increase
    cc.on_send(f, 4 * US, 32767)
    rc = (rc + line) / 2
    assert f.rate_bps == pytest.approx(rc)
    # a CNP after a byte-counter increase: the next cut (8 us) clamps Rt to Rc first
    cc.on_cnp(f, 5 * US)
    ctx.run_until(8 * US)
    for i in range(5, 9):                          # boundaries 5..8 us; the CNP at 5 us counts for (5, 6]
        a = _alpha_step(a, i == 6)
    assert f.state.alpha == a
    assert f.state.rt == pytest.approx(rc)
    assert f.rate_bps == pytest.approx(rc - min(rc * a / 2048, rc * 0.5))
    # no CNP in (8, 12] us: no cut, and no event is even scheduled for it
    before = f.rate_bps
    assert all(e[2] != cc._rate_check for e in ctx.q)
    ctx.run_until(12 * US)
    assert f.rate_bps == before


def test_connectx_increase_timer_hyper_and_recovery():
    cc, ctx, f = _cx(rpg_byte_reset="0B", rpg_time_reset="10us", rpg_hai_rate="10Gbps", rpg_ai_rate="1Gbps")
    cc.on_cnp(f, 0)
    cc.on_cnp(f, 100_000)
    ctx.run_until(4 * US)
    rc, rt = f.rate_bps, f.state.rt
    assert rt == 100e9 and rc < 60e9
    ctx.run_until(14 * US)                         # timer 1: stage 0 -> fast recovery
    rc = (rc + rt) / 2
    assert f.rate_bps == pytest.approx(rc)
    ctx.run_until(10**9)                           # stage 1: AI (Rt capped at line); back to line rate
    assert f.rate_bps == 100e9 and not f.state.inc_running


def test_connectx_is_selectable_and_runs_an_incast(tmp_path):
    rows = ["id,src,dst,size_bytes"] + [f"{i},{i},0,1048576" for i in range(1, 9)]
    (tmp_path / "i.csv").write_text("\n".join(rows) + "\n")
    res = fabricsim.run({"name": "cx", "topology": {"hosts_per_leaf": 9, "leaves": 1, "spines": 0},
                         "traffic": {"pattern": "csv", "path": str(tmp_path / "i.csv")},
                         "congestion_control": {"algorithm": "dcqcn_cx", "min_time_between_cnps": "2us"},
                         "switch": {"ecn": {"kmin": "20KB", "kmax": "200KB"}}})
    assert res.messages["completed"].all()
    assert res.summary["transport"]["cnps"] > 0


def test_docstring_examples():
    import doctest

    import fabricsim.config.switch as cfg
    import fabricsim.net.port as port
    for mod in (cfg, port):
        assert doctest.testmod(mod).failed == 0, mod.__name__


@pytest.mark.parametrize("section,bad,field", [
    ("congestion_control", {"algorithm": "dcqcn_cx", "dce_tcp_g": 2000}, "dce_tcp_g"),
    ("congestion_control", {"algorithm": "dcqcn_cx", "rate_reduce_monitor_period": "500ns"}, "dce_tcp_rtt"),
    ("congestion_control", {"algorithm": "dcqcn_cx", "rpg_min_dec_fac": 0}, "rpg_min_dec_fac"),
    ("switch", {"ecn": {"sample": "midway"}}, "sample"),
    ("switch", {"buffer": {"admission": "dynamic", "alpha": 0}}, "alpha"),
    ("switch", {"buffer": {"admission": "elastic"}}, "admission"),
    ("switch", {"pfc": {"enabled": True, "response": "soon"}}, "response"),
    ("switch", {"strict_priority": "ack"}, "strict_priority"),
])
def test_bad_switch_and_connectx_parameters_are_rejected_with_the_field_named(section, bad, field):
    from fabricsim.errors import ConfigError
    sc = {"name": "bad", "topology": {"hosts_per_leaf": 2, "leaves": 1, "spines": 0},
          "traffic": {"pattern": "permutation", "message_size": "4KiB"}, section: bad}
    with pytest.raises(ConfigError) as e:
        fabricsim.run(sc)
    assert field in str(e.value) and section in str(e.value)
