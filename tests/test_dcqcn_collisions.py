"""DCQCN on the smallest collision: 2 or 3 long flows from hosts under one leaf share the 400G
downlink of one receiver on another leaf, with the ``ethernet`` profile's PFC, ECN (dequeue,
150 KB / 1500 KB / pmax 0.2) and CNP priority.

What DCQCN should do (paper section 5; DOCA firmware arithmetic) and these tests pin:

* while the flows overlap the bottleneck stays busy (utilisation ~1) and each flow gets ~1/n;
* after flows leave, the survivor regains the capacity only as fast as the increase arithmetic
  allows. ConnectX defaults: after the cut, hyper increase needs two 300 us timer ticks; then each
  byte-counter event (every 32767 B sent) adds R_HAI = 50 Mb/s to Rt, so at rate R the target
  grows by R * 50e6 / (8 * 32767) per second (~0.19 R per ms: about 40 Gb/s per ms at 200 Gb/s,
  1.4 Gb/s per 300 us at 24 Gb/s). This is the published parameter set, not a model defect.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import fabricsim
from fabricsim.cc import CC, Flow

US = 1_000_000
G400 = 400_000_000_000


def _run(tmp_path, algo, sizes_mb, interval="20us", limit="10ms"):
    csv = tmp_path / "flows.csv"
    rows = ["src,dst,size_bytes"] + [f"{i},4,{mb * 1_000_000}" for i, mb in enumerate(sizes_mb)]
    csv.write_text("\n".join(rows) + "\n")
    sc = {"name": "collide", "profile": "ethernet",
          "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 1,
                       "host_link": {"rate": "400Gbps", "delay": "1us"},
                       "fabric_link": {"rate": "400Gbps", "delay": "1us"}},
          "traffic": {"pattern": "csv", "path": str(csv)},
          "congestion_control": {"algorithm": algo},
          "simulation": {"seed": 1, "time_limit": limit},
          "outputs": {"formats": ["parquet"], "link_sample_interval": interval}}
    r = fabricsim.run(sc, output_dir=tmp_path / "out")
    ts = r.link_timeseries.merge(r.links[["link_id", "src", "dst", "kind"]], on="link_id")
    util = {}
    for (s, d), g in ts.groupby(["src", "dst"]):
        util[(int(s), int(d))] = g.set_index("bin_start_ps").utilisation
    return r, pd.DataFrame(util).fillna(0.0)


def _sender_links(r, n):
    links = r.links
    return [tuple(x) for x in links[(links.src < n) & (links.kind == "host-leaf")][["src", "dst"]].values]


def _bottleneck(r):
    links = r.links
    row = links[(links.dst == 4) & (links.kind == "host-leaf")].iloc[0]
    return int(row.src), int(row.dst)


@pytest.mark.parametrize("n", [2, 3])
def test_cx_collision_fair_share_and_full_utilisation(tmp_path, n):
    sizes = [16] * n
    r, u = _run(tmp_path, "dcqcn_cx", sizes)
    assert r.messages.completed.all()
    assert r.messages.cnps.min() > 0                 # DCQCN did act
    first_end = int(r.messages.end_ps.min())
    steady = u[(u.index >= 100 * US) & (u.index + 20 * US <= first_end - 20 * US)]
    assert len(steady) >= 10
    assert steady[_bottleneck(r)].mean() > 0.97
    shares = [steady[k].mean() for k in _sender_links(r, n)]
    assert all(abs(s - 1 / n) < 0.12 / n * 2 for s in shares), shares
    # with 2 flows the pattern ends within 5 % of the fluid ideal (n x 16 MB through one 400G
    # link; 1.03-1.04 over seeds 1-10). With 3 the end is the last survivor's: where its rate was
    # cut late in the overlap it climbs back only as fast as the byte counter allows (the next
    # test): over seeds 1-600 the pattern took 1.03-2.10x the ideal (median 1.05, p99 1.62), the
    # same distribution as with a sequential ECN stream (docs/fidelity/switch.md): no bound that
    # is a property
    ideal = n * 16e6 * 8 / 400e9 * 1e12
    if n == 2:
        assert r.messages.end_ps.max() < 1.05 * ideal + 20 * US


def test_cx_survivor_recovery_follows_byte_counter_arithmetic(tmp_path):
    # 3 flows; after the two short ones leave the survivor sits near its last share and climbs at
    # R_HAI per 32767 B sent (hyper increase), i.e. dR/dt ~ R * 50e6 / (8 * 32767) per second
    r, u = _run(tmp_path, "dcqcn_cx", [8, 16, 48], interval="50us", limit="20ms")
    m = r.messages.sort_values("size_bytes")
    t_free = int(m.end_ps.iloc[1])
    surv = _sender_links(r, 3)[2]
    t_end = int(m.end_ps.iloc[2])
    a = u[(u.index >= t_free + 700 * US) & (u.index < t_free + 750 * US)][surv].mean()
    assert 0.3 < a < 0.8                               # far from line rate 0.7 ms after it is free
    # from then until it nears line rate (or its last 100 us), dR/dt = R x 50e6 / (8 x 32767):
    # the log of its utilisation per 50 us bin grows linearly at that slope
    x = u[(u.index >= t_free + 700 * US) & (u.index + 50 * US <= t_end - 100 * US)][surv]
    x = x[(x > 0) & (x < 0.95)]
    assert len(x) >= 3, (t_free, t_end)
    slope = np.polyfit(x.index.to_numpy() / US, np.log(x.to_numpy()), 1)[0]      # per us
    expected = 50e6 / (8 * 32767) * 1e-6
    assert expected * 0.5 < slope < expected * 1.6, (a, slope, expected, len(x))


def _cx(**params):
    class Ctx:
        def __init__(self):
            self.q = []
        def schedule(self, t, fn, arg):
            self.q.append((t, fn, arg))
    cls = CC.get("dcqcn_cx")
    ctx = Ctx()
    return cls(cls.Params.model_validate(params), ctx), ctx


def test_cx_hyper_increase_per_byte_event_at_low_rate():
    """Fake clock: at 24 Gb/s after the 2nd timer tick, 300 us of sending adds R_HAI per 32767 B
    (the 1.4 Gb/s per 300 us seen on the slowest flow of the 128-host permutation)."""
    import heapq, itertools
    cc, ctx = _cx()
    f = Flow(0, G400, 10 * US, 4096)
    cc.start(f, 0)
    s = f.state
    heap, seq = [], itertools.count()
    def drain(t_end):
        while ctx.q:
            t, fn, arg = ctx.q.pop()
            heapq.heappush(heap, (t, next(seq), fn, arg))
        while heap and heap[0][0] <= t_end:
            t, _, fn, arg = heapq.heappop(heap)
            fn(t, arg)
            while ctx.q:
                t2, fn2, arg2 = ctx.q.pop()
                heapq.heappush(heap, (t2, next(seq), fn2, arg2))
    cc.on_cnp(f, 0)                 # first CNP: alpha only
    cc.on_cnp(f, 1 * US)
    drain(4 * US)                   # cut at the 4 us boundary
    s.rc = s.rt = 24e9              # stand-in for a flow cut down to 24 Gb/s
    f.rate_bps = s.rc
    t = 4 * US
    step = 1 * US
    def send_until(t_end):
        nonlocal t
        while t < t_end:
            t += step
            drain(t)
            cc.on_send(f, t, int(f.rate_bps * step / 8e12))
    send_until(4 * US + 601 * US)   # two timer ticks: hyper increase from now on
    assert s.t_stage == 2
    rt0, b0 = s.rt, s.b_stage
    send_until(4 * US + 901 * US)
    events = s.b_stage - b0
    assert events == pytest.approx(24e9 * 300e-6 / 8 / 32767, rel=0.1)
    assert s.rt - rt0 == pytest.approx(events * 50e6 + 50e6, rel=0.1)   # + the timer tick at 900 us
