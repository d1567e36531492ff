"""The compiled core's slice 4 remainder: persistent connections and shared switch buffers
(docs/compiled-core.md, Status).

Persistent connections (``conn >= 0``, docs/traces.md "Connections"): the NIC's send-completion
hook (``MessageState.on_sent``: a message's last new byte schedules ``_next_on_connection``, an
``E_SENT`` entry of the core, on a NIC port or an NVLink link), the queue pairs reused by the
connection's successive messages, the RTT estimator's ``heir`` chain under adaptive timeouts, and
the connection lifecycle that stays Python's: messages waiting behind the one sending, completing
deferred behind an earlier one, flushed when a queue pair gives up, refused by a connection in
error. Shared switch buffers (net/port.py ``SharedBuffer``): a plain shared pool (``buffer.mode:
shared``) and the dynamic threshold (``switch.buffer.admission: dynamic``, with ``alpha``, ``reserve``
and its own ``size``), their running sums and heap, the strict-priority lane's packets in them.

Every case runs on both kernels: tables, summary and event count identical, and the lifecycle
counted in the engine's Python methods (which both kernels call) equal; each case asserts that
what it is for fired (:data:`CASES`). The shared-buffer arithmetic is checked against
``SharedBuffer`` operation by operation, and the state left after a run (the pools' sums, heaps and
``in_pool`` flags; every queue pair's estimator and ``heir``) against heap's.
"""
from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

import fabricsim

sys.path.insert(0, str(Path(__file__).parent))

from test_compiled_core import _engine, _nvl, _planes, _pxn, _same_results  # noqa: E402
from test_kernel_equivalence import FABRIC  # noqa: E402

pytest.importorskip("numba")

ROOT = Path(__file__).resolve().parent.parent


def _conn_trace(tmp, hosts, seed=0, n=10, size=49152, name="conn.csv", dsts=None, spread=3):
    """Every one of ``hosts`` sends ``n`` messages to two other hosts, on connections 0-2 (posted at
    0, 3 or 6 us, or with ``spread`` 1 all at 0: most wait behind the one sending on their connection)."""
    r = random.Random(seed)
    rows = ["id,src,dst,size_bytes,start_ps,gap_ps,deps,conn"]
    mid = 0
    for h in range(hosts):
        a, b = dsts(h) if dsts else ((h + hosts // 2) % hosts, (h + 3) % hosts)
        for k in range(n):
            rows.append(f"{mid},{h},{a if k % 2 else b},{size + 4096 * r.randrange(8)},{r.randrange(spread) * 3_000_000},"
                        f"0,,{k % 3}")
            mid += 1
    p = tmp / name
    p.write_text("\n".join(rows) + "\n")
    return {"pattern": "csv", "path": str(p), "qps_per_connection": 2}


def _conn(tmp, **over):
    """Connections on the 8-host leaf-spine into 32 KiB buffers, sprayed: drops and reordering."""
    sc = {"name": "conn", "topology": {**FABRIC, "buffer": {"mode": "per_port", "size": "32KiB"}},
          "traffic": _conn_trace(tmp, 8), "routing": {"policy": "spray"},
          "simulation": {"seed": 1, "time_limit": "20ms"}, "outputs": {"link_sample_interval": "off"}}
    return _over(sc, over)


def _pool(**over):
    """An incast of 6 hosts into host 0 through a plain shared pool of 96 KiB per switch, ECN on."""
    sc = {"name": "pool", "topology": {**FABRIC, "buffer": {"mode": "shared", "size": "96KiB"}},
          "traffic": {"pattern": "incast", "senders": 6, "receiver": 0, "message_size": "256KiB"},
          "routing": {"policy": "ecmp"}, "switch": {"ecn": {"enabled": True, "kmin": "8KB", "kmax": "24KB"}},
          "simulation": {"seed": 1, "time_limit": "20ms"}, "outputs": {"link_sample_interval": "off"}}
    return _over(sc, over)


def _over(sc, over):
    if "traffic" in over and over["traffic"] is None:     # every host to every other, 64 KiB
        over = {**over, "traffic": {"pattern": "all_to_all", "message_size": "64KiB"}}
        sc["traffic"] = {}
    for k, v in over.items():
        sc[k] = {**sc.get(k, {}), **v} if isinstance(v, dict) else v
    return sc


#: the dynamic threshold: every switch's pool of 256 KiB, a port's queue at most alpha x the free pool
_DYN = {"buffer": {"admission": "dynamic", "alpha": 0.5, "size": "256KiB"}}

#: case -> (scenario from a temporary folder, the counters that must be > 0 on heap)
CASES = {
    "conn-spray-lossy": (lambda tmp: _conn(tmp), ("handed", "waited", "deferred")),
    "conn-rto-adaptive": (lambda tmp: _conn(tmp, receiver={"rto_mode": "adaptive"}),
                          ("handed", "waited", "deferred", "heir_walks")),
    "conn-retry-limit-flush": (lambda tmp: _conn(tmp, receiver={"rto_low": "4us", "rto_high": "4us", "retry_limit": 0}),
                               ("handed", "waited", "flushed", "refused", "started_on_done")),
    "conn-rto-adaptive-retry-limit": (lambda tmp: _conn(tmp, receiver={"rto_mode": "adaptive", "rto_min": "3us",
                                                                       "retry_limit": 1}),
                                      ("handed", "flushed", "deferred", "heir_walks")),
    "conn-gbn-coalesced": (lambda tmp: _conn(tmp, receiver={"model": "go_back_n", "ack_every": 8}),
                           ("handed", "waited", "deferred")),
    "conn-dcqcn-coalesced-adaptive": (lambda tmp: _conn(tmp, receiver={"rto_mode": "adaptive", "ack_every": 4},
                                                        congestion_control={"algorithm": "dcqcn"},
                                                        switch={"ecn": {"enabled": True, "kmin": "4KB", "kmax": "16KB"}}),
                                      ("handed", "deferred", "heir_walks", "cnps")),
    "conn-pfc-telemetry": (lambda tmp: _conn(tmp, switch={"pfc": {"enabled": True, "xoff": "20KB", "xon": "10KB"}},
                                             congestion_control={"algorithm": "telemetry"}),
                           ("handed", "waited", "pauses")),
    "conn-ecmp-dcqcn-cx-strict-control": (lambda tmp: _conn(tmp, routing={"policy": "ecmp"},
                                                            congestion_control={"algorithm": "dcqcn_cx"},
                                                            switch={"strict_priority": "control",
                                                                    "ecn": {"enabled": True, "kmin": "4KB",
                                                                            "kmax": "16KB"}}),
                                          ("handed", "waited", "cnps")),
    "conn-planes-per-packet": (lambda tmp: _planes(traffic=_conn_trace(tmp, 16),
                                                   topology={"switch": {"buffer": {"size": "32KiB"}}},
                                                   receiver={"rto_mode": "adaptive"}),
                               ("handed", "waited", "heir_walks")),
    "conn-planes-per-flow": (lambda tmp: _planes(ports=4, split="per_flow", traffic=_conn_trace(tmp, 16)),
                             ("handed", "waited")),
    "conn-nvlink": (lambda tmp: _nvl(traffic=_conn_trace(tmp, 36, n=12, size=20000, spread=1)),
                    ("handed", "waited", "nv_sent")),
    "conn-pxn": (lambda tmp: _pxn(traffic=_conn_trace(tmp, 16, n=12, size=20000, spread=1), receiver={"rto_mode": "adaptive"}),
                 ("handed", "waited", "heir_walks")),
    # the shipped MoE layer (DeepSeek-V3 shape, 64 GPUs): every message on a connection, each released by
    # its dependencies
    "conn-moe-dsv3-64gpu": (lambda tmp: str(ROOT / "scenarios" / "moe_dsv3_64gpu_flat.yaml"), ("handed",)),
    "pool-plain": (lambda tmp: _pool(), ("pool_full",)),
    "pool-dynamic": (lambda tmp: _pool(switch=_DYN), ("threshold",)),
    "pool-dynamic-reserve-300G": (lambda tmp: _pool(
        topology={**FABRIC, "buffer": {"mode": "per_port", "size": "16KiB"},
                  "fabric_link": {"rate": "300Gbps", "delay": "500ns"}},
        switch={"buffer": {"admission": "dynamic", "alpha": 2.0, "reserve": "6KB"}}), ("threshold",)),
    "pool-dynamic-dcqcn-strict-control": (lambda tmp: _pool(switch={**_DYN, "strict_priority": "control",
                                                                    "ecn": {"enabled": True, "kmin": "4KB",
                                                                            "kmax": "16KB"}},
                                                            congestion_control={"algorithm": "dcqcn"}),
                                          ("threshold", "cnps")),
    # every host to every other: ACKs, NAKs and CNPs cross the strict-priority lanes of ports whose pool
    # also holds data, near its threshold
    "pool-all-to-all-lanes": (lambda tmp: _pool(traffic=None,
                                                topology={**FABRIC, "buffer": {"mode": "shared", "size": "48KiB"}},
                                                switch={"buffer": {"admission": "dynamic", "alpha": 1.0},
                                                        "strict_priority": "control",
                                                        "ecn": {"enabled": True, "kmin": "4KB", "kmax": "16KB"}},
                                                congestion_control={"algorithm": "dcqcn"}, routing={"policy": "spray"},
                                                receiver={"model": "go_back_n"}),
                              ("threshold", "lanes_pooled", "cnps")),
    "pool-dynamic-telemetry-int": (lambda tmp: _pool(switch=_DYN, congestion_control={"algorithm": "telemetry"},
                                                     receiver={"ack_every": 4}), ("threshold",)),
    "pool-gbn-adaptive-routing": (lambda tmp: _pool(switch=_DYN, routing={"policy": "adaptive"},
                                                    receiver={"model": "go_back_n", "rto_mode": "adaptive"}),
                                  ("threshold",)),
    "pool-planes": (lambda tmp: _planes(traffic={"pattern": "incast", "senders": 10, "receiver": 0,
                                                 "message_size": "256KiB", "qps_per_message": 2},
                                        topology={"switch": {"buffer": {"mode": "shared", "size": "128KiB"}}},
                                        switch={"buffer": {"admission": "dynamic", "alpha": 0.25}}), ("threshold",)),
    # (the NVLink chips have a pool too, which nothing uses: NvlinkSwitch never asks it)
    "pool-pxn": (lambda tmp: _pxn(topology={"domain": "hgx8", "switch": {"buffer": {"mode": "shared", "size": "24KiB"}}},
                                  switch={"buffer": {"admission": "dynamic", "alpha": 0.25}}),
                 ("threshold",)),
    "pool-time-limit-cut-sampling": (lambda tmp: _pool(switch=_DYN, simulation={"time_limit": "12us"},
                                                       outputs={"link_sample_interval": "1us"}), ("threshold",)),
    "pool-with-connections": (lambda tmp: _conn(tmp, topology={**FABRIC, "buffer": {"mode": "shared", "size": "64KiB"}},
                                                switch={"buffer": {"admission": "dynamic", "alpha": 1.0}},
                                                routing={"policy": "adaptive"}),
                              ("handed", "waited", "deferred", "pool_full|threshold")),
}


class Counts:
    """Counters of the features firing, by wrapping Python methods: the connections' lifecycle (both
    kernels call it: the counts must be equal) and what heap alone runs in Python (the estimator's
    heir chain, a shared pool's admission, the NVLink link's hook)."""

    LIFECYCLE = ("handed", "waited", "deferred", "flushed", "refused", "started_on_done", "deferred_failed")

    def __init__(self, monkeypatch):
        from fabricsim.engine.packet import PacketEngine
        from fabricsim.flows.replay import Connections
        from fabricsim.net.port import SharedBuffer
        from fabricsim.net.sender import Sender
        from fabricsim.net.switch import Switch
        self.n: dict = {}
        prio = Switch.priority
        nxt, post, done, admits = (PacketEngine._next_on_connection, Connections.post, Connections.done,
                                   SharedBuffer.admits)
        fail, est, sent = PacketEngine.fail_qp, Sender._estimator, PacketEngine._conn_sent
        n = self.n

        def inc(k, v=1):
            n[k] = n.get(k, 0) + v

        def next_on_connection(eng, t, st):
            inc("handed", st.on_sent is not False)
            return nxt(eng, t, st)

        def post_(c, row):
            how = post(c, row)
            inc("waited", how == "wait")
            inc("refused", how == "error")
            return how

        def done_(c, row, failed=False):
            out = done(c, row, failed)
            inc("started_on_done", len(out[0]))
            inc("deferred", not out[1])
            inc("flushed", len(out[2]))
            return out

        def fail_qp(eng, qp, t, reason):
            inc("deferred_failed", qp.msg.deferred and not qp.msg.done)
            return fail(eng, qp, t, reason)

        def admits_(pool, q, wire, used):
            ok = admits(pool, q, wire, used)
            if not ok:
                inc("pool_full" if used + wire > pool.size else "threshold")
            return ok

        def estimator(qp):
            inc("heir_walks")
            return est(qp)

        def conn_sent(eng, st, t):
            inc("nv_sent", bool(st.qps) and bool(st.qps[0].nics[0].nvlink))
            return sent(eng, st, t)
        def priority(sw, t, port, pkt):
            inc("lanes_pooled", sw.shared is not None)
            return prio(sw, t, port, pkt)
        monkeypatch.setattr(Switch, "priority", priority)
        monkeypatch.setattr(PacketEngine, "_next_on_connection", next_on_connection)
        monkeypatch.setattr(PacketEngine, "fail_qp", fail_qp)
        monkeypatch.setattr(PacketEngine, "_conn_sent", conn_sent)
        monkeypatch.setattr(Connections, "post", post_)
        monkeypatch.setattr(Connections, "done", done_)
        monkeypatch.setattr(SharedBuffer, "admits", admits_)
        monkeypatch.setattr(Sender, "_estimator", staticmethod(estimator))

    def take(self) -> dict:
        out = dict(self.n)
        self.n.clear()
        return out


def _run(sc, kernel):
    if isinstance(sc, str):
        return fabricsim.run(sc, overrides=[f"simulation.kernel={kernel}"])
    return fabricsim.run({**sc, "simulation": {**sc.get("simulation", {}), "kernel": kernel}})


def _both_kernels_counted(sc, monkeypatch):
    """Run ``sc`` on heap then compiled: every table, the summary and the events equal, and the
    connections' lifecycle (Python's, on both kernels) ran alike. Returns heap's result and counts."""
    counts = Counts(monkeypatch)
    a = _run(sc, "heap")
    ca = counts.take()
    b = _run(sc, "compiled")
    cb = counts.take()
    _same_results(a, b)
    assert {k: ca.get(k, 0) for k in Counts.LIFECYCLE} == {k: cb.get(k, 0) for k in Counts.LIFECYCLE}
    return a, ca


@pytest.mark.parametrize("case", list(CASES))
def test_slice4_compiled_gives_the_heap_kernels_tables(case, tmp_path, monkeypatch):
    make, expect = CASES[case]
    sc = make(tmp_path)
    a, ca = _both_kernels_counted(sc, monkeypatch)
    ca["cnps"] = int(a.messages["cnps"].sum())
    ca["pauses"] = int(a.links["pfc_pause_events"].sum())
    for k in expect:
        assert sum(ca.get(x, 0) for x in k.split("|")) > 0, (k, ca)
    if case.startswith("pool-"):
        assert a.links["drops_buffer_full"].sum() > 0
    if case == "pool-time-limit-cut-sampling":
        assert a.summary["status"] == "time_limit" and len(a.link_timeseries)


def test_a_deferred_message_whose_queue_pair_gives_up_fails_as_on_heap(tmp_path, monkeypatch):
    """A message completed but deferred behind an earlier one on its connection still has queue pairs
    waiting for ACKs: when one gives up, the message fails (``PacketEngine.fail_qp``), on both kernels.
    Connections into 8 KiB buffers, retry limit 2: a deferred message fails this way."""
    sc = _conn(tmp_path, topology={**FABRIC, "buffer": {"mode": "per_port", "size": "8KiB"}},
               receiver={"rto_low": "3us", "rto_high": "3us", "retry_limit": 2, "reorder_window": "2us"},
               traffic=_conn_trace(tmp_path, 8, n=14, size=24000, seed=3), simulation={"seed": 3, "time_limit": "20ms"})
    _a, ca = _both_kernels_counted(sc, monkeypatch)
    assert ca["deferred_failed"] > 0


def _pool_state(eng):
    out = []
    for sw in eng.switches.values():
        pool = getattr(sw, "shared", None)
        if pool is not None:
            out.append((sw.id, pool.s, pool.r, sorted(pool.heap), [p.in_pool for p in pool.ports],
                        [p.busy_until for p in pool.ports]))
    return out


def _qp_state(eng):
    rows = {id(qp): (r, j) for r, st in enumerate(eng._rows) for j, qp in enumerate(st.qps)}
    return [[(qp.uid, qp.srtt, qp.rttvar, qp.rto_draws, None if qp.heir is None else rows.get(id(qp.heir), "?"))
             for qp in st.qps] for st in eng._rows]


@pytest.mark.parametrize("limit", ["20ms", "9us"])
def test_pools_and_estimators_are_written_back_as_heap_leaves_them(tmp_path, limit):
    """After a compiled run the switches' shared buffers hold heap's running sums, heap entries and
    ``in_pool`` flags, and every queue pair its estimator and ``heir`` (compressed as heap compresses
    it): at the end, and cut by the time limit with queues still full."""
    sc = _conn(tmp_path, topology={**FABRIC, "buffer": {"mode": "shared", "size": "64KiB"}},
               switch={"buffer": {"admission": "dynamic", "alpha": 1.0}}, receiver={"rto_mode": "adaptive"},
               simulation={"time_limit": limit})
    ea, _ = _engine(sc, "heap")
    eb, _ = _engine(sc, "compiled")
    assert type(eb.kernel).__name__ == "CompiledKernel"
    pa, pb = _pool_state(ea), _pool_state(eb)
    assert pa == pb and len(pa) == len(ea.switches)
    if limit == "9us":
        assert any(s for _i, s, *_ in pa)           # cut with bytes queued
    qa, qb = _qp_state(ea), _qp_state(eb)
    assert qa == qb
    assert any(h is not None for qs in qa for *_x, h in qs)    # heirs set


def test_the_compiled_shared_buffer_is_the_models_own():
    """``_pool_used`` / ``_pool_set`` (running sums in 1/L bytes, the lazy heap) against
    ``SharedBuffer.used`` / ``set_busy_until`` operation by operation, on a switch whose ports run at
    100, 300 and 400 Gbit/s (``L`` = 80, a weight with ``rn`` = 3), and ``pool_admits`` compiled against
    CPython's on random and edge inputs."""
    from fabricsim.engine.compiled import core
    from fabricsim.net.port import SharedBuffer, pool_admits
    sc = _pool(topology={**FABRIC, "buffer": {"mode": "shared", "size": "96KiB"},
                         "host_link": {"rate": "100Gbps", "delay": "500ns"},
                         "fabric_link": {"rate": "300Gbps", "delay": "500ns"}},
               simulation={"time_limit": "1us"})
    from fabricsim.analysis.recorder import Recorder
    from fabricsim.api import prepare
    from fabricsim.engine.interface import ENGINES
    _l, sim = prepare({**sc, "simulation": {**sc["simulation"], "kernel": "compiled"}})
    s = sim.scenario
    eng = ENGINES.get("packet")(sim, Recorder(s.outputs.latency_rel_error, s.outputs.timeseries_bin))
    X = eng.kernel.X
    rng = random.Random(5)
    checked = 0
    for i, sw in enumerate(eng.switches.values()):
        pool = sw.shared
        ports = pool.ports
        py = SharedBuffer(pool.size)
        for p in ports:
            py.add(p)
        busy = {p.index: 0 for p in ports}
        rates = {p.rate for p in ports}
        t = 0
        for _ in range(3000):
            t += rng.choice([0, 1, 7, 1000, 40_000, 400_000])
            u = py.used(t)
            assert core._pool_used(X, i, t) == u, (t, u)
            p = rng.choice(ports)
            bu = max(busy[p.index], t) + rng.randint(1, 300_000)
            py.set_busy_until(p, t, bu)
            core._pool_set(X, i, p.index, bu)
            p.busy_until = busy[p.index] = bu
            X.P[p.index, core.P_BUSY] = bu
            checked += 1
        assert int(X.S[i, core.S_PL]) % 80 == 0 or rates <= {400_000_000_000}
    assert checked
    admits = core.pool_admits
    for _ in range(100_000):
        size = rng.choice([1, 1500, 65536, 2**31, 2**51])
        used = rng.randint(-10, size + 10)
        q, wire = rng.randint(0, size), rng.choice([64, 1500, 4160, rng.randint(1, 10_000)])
        dyn, alpha, res = rng.random() < 0.8, rng.choice([0.25, 0.5, 1.0, 2.0, 1 / 3, rng.random() * 8]), \
            rng.choice([0, 4000, q + wire, q + wire - 1])
        assert admits(q, wire, used, size, dyn, alpha, res) == pool_admits(q, wire, used, size, dyn, alpha, res)
    # edges: exactly at the threshold, a free pool of 0, the pool exactly full
    for q, wire, used, size, alpha in ((4000, 2000, 4000, 10_000, 1.0), (4000, 2001, 4000, 10_000, 1.0),
                                       (0, 1, 10_000, 10_000, 1.0), (0, 1, 9_999, 10_000, 1.0),
                                       (3, 0, 1, 10, 1 / 3), (2, 1, 1, 10, 1 / 3)):
        assert admits(q, wire, used, size, True, alpha, 0) == pool_admits(q, wire, used, size, True, alpha, 0)


def test_shared_buffers_beyond_int64_fall_back_and_connections_do_not():
    """A shared buffer whose exact sums could leave int64 (a time limit of 2^62 ps / L / the input
    rate) falls back with the reason (here: a pool that could hold 2^52 bytes or more by the time limit);
    connections are no longer a reason."""
    from fabricsim.engine.compiled.coverage import uncovered
    sc = _pool(switch=_DYN, simulation={"time_limit": "30000s"})
    b = _run(sc, "compiled")
    info = b.summary["run"]["kernel"]
    assert info["ran"] == "heap" and "a shared switch buffer" in info["fallback"]
    _eng_ok = _engine(_pool(switch=_DYN), "compiled")[0]
    assert type(_eng_ok.kernel).__name__ == "CompiledKernel" and not uncovered(_eng_ok)


def test_compiled_arrays_and_codes_were_appended():
    """The slice's fields, agenda kind and hand-back code come after every earlier one (merges with
    the other slices' branches keep their numbers)."""
    from fabricsim.engine.compiled import core
    # (the queue pair's flo, the row of its uid's routing entries, came after heir when slices 2 and 4 met)
    assert core.QP_FIELDS[-2:] == ("heir", "flo") and core.Q_HEIR == len(core.QP_FIELDS) - 2
    assert core.Q_FLO == len(core.QP_FIELDS) - 1
    # (slice 6's quiet flag came after onsent)
    assert core.MSG_FIELDS[-2:] == ("onsent", "quiet") and core.M_ONSENT == len(core.MSG_FIELDS) - 2
    assert core.E_SENT == 10 and core.P_SENT == 5
    assert core.S_PHN == len(core.SWITCH_FIELDS) - 1 and core.P_PHI == len(core.PORT_FIELDS) - 1
    assert np.all(np.array([core.S_KMIN, core.S_KMAX, core.S_DEQ, core.S_NODE]) == np.arange(4))


@pytest.mark.parametrize("policy", [{"policy": "flowlet", "gap": "1us"}, {"policy": "pinned"}])
def test_a_connections_messages_share_their_flowlets_and_pins(policy, tmp_path):
    """flowlet and pinned key their entries by ``QueuePair.uid``, which a persistent connection's
    successive queue pairs share: a later message continues the earlier one's flowlets and pins.
    The compiled core keeps them in the first row registered with the uid (``Q_FLO``); found by
    ``check_compiled`` when the connection and routing slices met (33 of 300 cases differed)."""
    from collections import Counter
    sc = _conn(tmp_path, routing=policy, topology={**FABRIC, "buffer": {"mode": "per_port", "size": "256KiB"}})
    a, b = _run(sc, "heap"), _run(sc, "compiled")
    _same_results(a, b)
    ea, _ = _engine(sc, "heap")
    eb, _ = _engine(sc, "compiled")
    pol_a, pol_b = ea.routing, eb.routing
    state = "_table" if policy["policy"] == "flowlet" else "_pins"
    ta = {k: (v[0].index, v[1]) if isinstance(v, list) else v.index for k, v in getattr(pol_a, state).items()}
    tb = {k: (v[0].index, v[1]) if isinstance(v, list) else v.index for k, v in getattr(pol_b, state).items()}
    assert ta == tb and ta
    # the feature this is for: several registered queue pairs share one uid (so its entries are shared)
    uids = Counter(qp.uid for qp in eb.kernel.qps)
    assert max(uids.values()) > 1
    X = eb.kernel.X
    import fabricsim.engine.compiled.core as C
    shared = [q for q, qp in enumerate(eb.kernel.qps) if int(X.Q[q, C.Q_FLO]) != q]
    assert shared and all(int(X.Q[q, C.Q_FLH]) == -1 for q in shared)
