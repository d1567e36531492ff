"""Counter-based random draws of the packet engine (:func:`fabricsim.flows.identity.packet_draw`).

Every per-packet random choice (spraying, adaptive routing's pick among tied ports, the exact
adaptive policy's tie-break, RED's ECN marking) takes the packet's draw: fixed by the packet's
identity, the switch and a seeded salt. These tests pin what that must give: uniform, independent
draws (also for the consecutive packets of one flow, where a weak hash repeats itself), and a
decision that does not depend on which decisions were taken before it.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from fabricsim.engine.rng import RandomStreams
from fabricsim.flows.identity import UNIT, packet_draw
from fabricsim.net.switch import Switch
from fabricsim.routing import ROUTING


def _packets(n_qps=3, per_qp=4000, gap_ps=84_000):
    """The data packets of ``n_qps`` queue pairs sending back to back, one per ``gap_ps``."""
    return [SimpleNamespace(qp=SimpleNamespace(uid=u), seq=s, t_tx=s * gap_ps + u, kind=0)
            for u in range(n_qps) for s in range(per_qp)]


def test_draws_modulo_ports_are_uniform_and_consecutive_packets_independent():
    pk = _packets()
    n = 8
    idx = np.array([packet_draw(12345, p, 7) % n for p in pk]).reshape(3, -1)
    counts = np.bincount(idx.ravel(), minlength=n)
    expected = idx.size / n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 24.3                      # 7 degrees of freedom: p ~ 0.001 if uniform
    # a flow's next packet repeats the previous one's port with probability 1/8 (binomial, 5 sigma)
    same = float((idx[:, 1:] == idx[:, :-1]).mean())
    m = idx[:, 1:].size
    assert abs(same - 1 / n) < 5 * np.sqrt(1 / n * (1 - 1 / n) / m)


def test_draws_as_uniform_floats_hit_each_probability():
    pk = _packets()
    u = np.array([packet_draw(99, p, 3) * UNIT for p in pk])
    assert u.min() >= 0.0 and u.max() < 1.0
    for prob in (0.01, 0.2, 0.5):
        hit = float((u < prob).mean())
        assert abs(hit - prob) < 5 * np.sqrt(prob * (1 - prob) / u.size), (prob, hit)
    # consecutive packets of a flow: no correlation (5 sigma of ~1/sqrt(m))
    per = u.reshape(3, -1)
    r = np.corrcoef(per[:, 1:].ravel(), per[:, :-1].ravel())[0, 1]
    assert abs(r) < 5 / np.sqrt(per[:, 1:].size)


def test_switches_and_salts_draw_independently():
    pk = _packets(n_qps=1)
    a = np.array([packet_draw(5, p, 1) * UNIT for p in pk])
    b = np.array([packet_draw(5, p, 2) * UNIT for p in pk])
    c = np.array([packet_draw(6, p, 1) * UNIT for p in pk])
    lim = 5 / np.sqrt(a.size)
    assert abs(np.corrcoef(a, b)[0, 1]) < lim and abs(np.corrcoef(a, c)[0, 1]) < lim
    # and a draw is a function of the packet: the same fields, the same draw
    p = pk[10]
    q = SimpleNamespace(qp=SimpleNamespace(uid=p.qp.uid), seq=p.seq, t_tx=p.t_tx, kind=p.kind)
    assert packet_draw(5, p, 1) == packet_draw(5, q, 1)
    assert packet_draw(5, p, 1) != packet_draw(5, SimpleNamespace(qp=q.qp, seq=q.seq, t_tx=q.t_tx, kind=1), 1)


@pytest.mark.parametrize("routing", [{"policy": "spray"}, {"policy": "adaptive", "exact": True}])
def test_a_packets_port_does_not_depend_on_the_choices_before_it(routing):
    # the same packet, asked of a fresh policy and of one that has already chosen for thousands of
    # other packets, takes the same port (a sequential stream would give it the next number)
    cls = ROUTING.get(routing["policy"])
    params = cls.Params.model_validate({k: v for k, v in routing.items() if k != "policy"}) if cls.Params else None
    ports = tuple(SimpleNamespace(busy_until=0, rate=400_000_000_000, index=i) for i in range(8))
    sw = SimpleNamespace(id=4)
    pk = _packets(n_qps=1, per_qp=200)
    fresh = [cls(params, RandomStreams(3)).choose(sw, ports, p, 0).index for p in pk]
    busy = cls(params, RandomStreams(3))
    for p in _packets(n_qps=5, per_qp=500):
        busy.choose(sw, ports, SimpleNamespace(qp=SimpleNamespace(uid=p.qp.uid + 10), seq=p.seq, t_tx=p.t_tx,
                                               kind=0), 0)
    late = [busy.choose(sw, ports, p, 0).index for p in reversed(pk)][::-1]
    assert fresh == late
    assert len(set(fresh)) == 8                     # and it does spread (all ties at an idle switch)
    other_seed = [cls(params, RandomStreams(4)).choose(sw, ports, p, 0).index for p in pk]
    assert other_seed != fresh                      # the seed is in the draw


def test_ecn_marks_with_red_probability_and_the_same_packet_gets_the_same_verdict():
    sw = Switch(0, "sw", None)
    sw.kmin, sw.kmax, sw.pmax, sw.ecn_salt = 10_000, 20_000, 0.2, 77
    pk = _packets()
    for q, prob in ((15_000, 0.1), (19_000, 0.18)):
        hits = np.array([sw.mark(q, p) for p in pk])
        assert abs(hits.mean() - prob) < 5 * np.sqrt(prob * (1 - prob) / hits.size), (q, hits.mean())
        assert [sw.mark(q, p) for p in pk[:500]] == list(hits[:500])       # deterministic per packet
    assert all(sw.mark(20_001, p) for p in pk[:100])                     # above kmax: always


# ----------------------------------------------------------------------------- the draw's definition
GOLDEN = [  # (salt, uid, seq, t_tx, kind, switch) -> packet_draw, pinned on CPython 3.11
    ((0, 0, 0, 0, 0, 0), 8660336714046985669),
    ((12345, 3, 10, 5000, 0, 1), 16538822935908686320),
    ((2**61 - 1, 7, 1, 84000, 1, 2), 5025869554355798938),
    ((2**64 - 1, 1, 2, 3, 2, 4), 7429375241796866600),
    ((0x9E3779B97F4A7C15, 123456, 65535, 10**12, 0, 4999), 3466662378896263826),
]
P1, P2, P5 = 11400714785074694791, 14029467366897019727, 2870177450012600261
M61 = (1 << 61) - 1
MASK = (1 << 64) - 1


def _int_hash(x: int) -> int:
    """CPython's hash of an int: |x| mod (2**61 - 1), sign restored, -1 mapped to -2."""
    h = abs(x) % M61
    h = -h if x < 0 else h
    return -2 if h == -1 else h


def _tuple_hash(items) -> int:
    """CPython 3.8+'s tuplehash (xxHash-based, 64-bit), written out: the draw's specification."""
    acc = P5
    for it in items:
        acc = (acc + (_int_hash(it) & MASK) * P2) & MASK
        acc = ((acc << 31) | (acc >> 33)) & MASK
        acc = (acc * P1) & MASK
    acc = (acc + (len(items) ^ (P5 ^ 3527539))) & MASK
    if acc == MASK:
        return 1546275796
    return acc - (1 << 64) if acc >> 63 else acc


def _pkt(uid, seq, t_tx, kind):
    return SimpleNamespace(qp=SimpleNamespace(uid=uid), seq=seq, t_tx=t_tx, kind=kind)


def test_packet_draw_is_pinned_and_is_the_tuple_hash_written_out():
    # every spray, adaptive tie-break and ECN verdict rests on these numbers: an interpreter whose
    # tuple hash differed would change results silently, so the values are pinned here
    from fabricsim.flows.identity import mix64
    for (salt, uid, seq, t, kind, sw), want in GOLDEN:
        assert packet_draw(salt, _pkt(uid, seq, t, kind), sw) == want
    rng = np.random.default_rng(5)
    for _ in range(3000):
        f = (int(rng.integers(0, 2**63)) * 2 + int(rng.integers(0, 2)), int(rng.integers(0, 2**30)),
             int(rng.integers(0, 2**20)), int(rng.integers(0, 2**45)), int(rng.integers(0, 4)), int(rng.integers(0, 5000)))
        assert _tuple_hash(f) == hash(f)
        assert packet_draw(f[0], _pkt(*f[1:5]), f[5]) == mix64(_tuple_hash(f))


def test_compiled_code_draws_the_same_numbers():
    # the compiled core's draw: numba's hash of the same tuple (numba mirrors CPython's tuplehash)
    # and the same mix64 source, on uint64 (numba's uint64-with-int64 arithmetic is int64)
    from numba import njit
    from fabricsim.flows import identity
    mix = njit(identity.mix64)

    @njit
    def draw(salt, uid, seq, t, kind, sw):
        return mix(np.uint64(hash((salt, uid, seq, t, kind, sw))))

    cases = [f for f, _ in GOLDEN]
    rng = np.random.default_rng(6)
    cases += [(int(rng.integers(0, 2**63)) * 2 + int(rng.integers(0, 2)), int(rng.integers(0, 2**30)),
               int(rng.integers(0, 2**20)), int(rng.integers(0, 2**45)), int(rng.integers(0, 4)),
               int(rng.integers(0, 5000))) for _ in range(2000)]
    for salt, uid, seq, t, kind, sw in cases:
        assert int(draw(np.uint64(salt), uid, seq, t, kind, sw)) == packet_draw(salt, _pkt(uid, seq, t, kind), sw)
