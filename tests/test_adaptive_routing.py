"""Switch adaptive routing as ASICs do it (fabricsim/routing/quality.py): uniform choice among the
ports of the best coarse grade, grades refreshed per period, next-switch congestion reports that
arrive late, counter-based draws; and the fabric-level consequences (a leaf avoids a congested
spine downlink it cannot see; per-packet AR at least as good as spraying on a saturated
permutation). The references are htsim's fat_tree_switch (quantised queue, 0.1 us refresh,
uniform among the best), CONGA's max(local, remote) and balls into bins."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import fabricsim
from fabricsim.engine.rng import RandomStreams
from fabricsim.net.port import Port
from fabricsim.routing import ROUTING

G = 10**9
PKT = 4178                      # wire bytes of a 4 KiB RoCE packet
PS_PER_BYTE = 20                # at 400 Gb/s
US = 10**6
QUICKSTART = Path(__file__).resolve().parents[1] / "scenarios" / "leaf_spine_32_raw.yaml"


class FakeSwitch:
    """The part of a switch the routing contract reads: id, engine, route/lookup."""

    def __init__(self, node, engine):
        self.id = node
        self.engine = engine
        self.route = {}

    def lookup(self, dst):
        return self.route[dst]


def fabric(n_up=8):
    """A leaf (node 100) with ``n_up`` uplinks to spines 200.., each spine one downlink to
    leaf 300 (destination host 7 behind it)."""
    engine = SimpleNamespace(ports=[], switches={})
    leaf = FakeSwitch(100, engine)
    engine.switches[100] = leaf
    ups, downs = [], []
    for k in range(n_up):
        up = Port(len(engine.ports), 100, 200 + k, "leaf-spine", 400 * G, 500_000, 0, None)
        engine.ports.append(up)
        spine = FakeSwitch(200 + k, engine)
        engine.switches[200 + k] = spine
        down = Port(len(engine.ports), 200 + k, 300, "leaf-spine", 400 * G, 500_000, 0, None)
        engine.ports.append(down)
        spine.route[7] = (down, (down,))
        ups.append(up)
        downs.append(down)
    return leaf, tuple(ups), downs


def policy(name="adaptive", seed=1, **params):
    cls = ROUTING.get(name)
    return cls(cls.Params(**params), RandomStreams(seed))


def packet(i, uid=1):
    return SimpleNamespace(qp=SimpleNamespace(uid=uid), seq=i, t_tx=1000 * i, kind=0, dst=7)


def backlog(port, now, nbytes):
    port.busy_until = now + nbytes * PS_PER_BYTE


def chi2_uniform(counts):
    counts = np.asarray(counts, dtype=float)
    e = counts.sum() / len(counts)
    return float(((counts - e) ** 2 / e).sum())


def test_uniform_among_ports_of_the_best_grade_even_when_all_are_busy():
    """htsim: every port equal to the best grade is collected and one drawn uniformly. Here all 8
    uplinks are busy (1..6 packets queued, all below 5 % of 2 MiB = grade 0) except two at
    grade >= 1: the six grade-0 ports are drawn uniformly, the two others never. (The exact
    least-backlog policy would take the one-packet port every time.)"""
    leaf, ups, _ = fabric()
    now = 10 * US
    for k, port in enumerate(ups[:6]):
        backlog(port, now, (k + 1) * PKT)
    backlog(ups[6], now, 30 * PKT)            # 125 KB: grade 1
    backlog(ups[7], now, 120 * PKT)           # 501 KB: grade 3
    pol = policy(remote=False)
    picks = [pol.choose(leaf, ups, packet(i), now).index for i in range(6000)]
    counts = [picks.count(p.index) for p in ups]
    assert counts[6] == counts[7] == 0
    assert chi2_uniform(counts[:6]) < 20.5     # 5 degrees of freedom: p = 0.001 if uniform


def test_a_grade_is_not_re_evaluated_within_its_refresh_period():
    """A port that fills up stays in the best set until the next refresh period (htsim's
    _update_period, 0.1 us), then drops out."""
    leaf, ups, _ = fabric(2)
    pol = policy(remote=False)
    t0 = 1000 * 100_000                       # start of a 100 ns period
    assert {pol.choose(leaf, ups, packet(i), t0).index for i in range(64)} == {0, 2}
    backlog(ups[1], t0 + 10_000, 200 * PKT)   # 10 ns later: 836 KB queued on the second uplink
    stale = {pol.choose(leaf, ups, packet(i), t0 + 60_000).index for i in range(64, 128)}
    assert stale == {0, 2}
    fresh = {pol.choose(leaf, ups, packet(i), t0 + 100_000).index for i in range(128, 192)}
    assert fresh == {0}


def test_remote_report_steers_the_leaf_after_period_plus_delay():
    """The spine behind the second uplink has a full downlink; the leaf's own ports are idle.
    The spine measures in period k = 5 (1 us periods), its report arrives at
    (k+1) x 1 us + 1 us = 7 us: before that the leaf still spreads over both uplinks, after it
    the congested path's grade max(local 0, remote) excludes it (CONGA's max)."""
    leaf, ups, downs = fabric(2)
    pol = policy()
    t1 = 5 * US
    downs[1].busy_until = t1 + 100 * US       # 5 MB queued: top grade for as long as the test runs
    seen_before = set()
    for i, t in enumerate(range(t1, 7 * US, 100_000)):      # every 100 ns from 5 us to 6.9 us
        seen_before |= {pol.choose(leaf, ups, packet(32 * i + j), t).index for j in range(32)}
    assert seen_before == {0, 2}
    after = {pol.choose(leaf, ups, packet(10_000 + j), 7 * US + 50_000).index for j in range(64)}
    assert after == {0}
    # without remote reports the leaf cannot see it
    blind = policy(remote=False)
    assert {blind.choose(leaf, ups, packet(j), 8 * US).index for j in range(64)} == {0, 2}


def test_choice_is_a_function_of_the_packet_not_of_the_draws_before_it():
    """Counter-based hashing: the same packet in the same state takes the same port, however many
    other packets were routed before it (a sequential stream would shift)."""
    leaf, ups, _ = fabric()
    now = 3 * US
    a = policy()
    direct = [a.choose(leaf, ups, packet(i, uid=9), now) for i in range(20)]
    b = policy()
    for i in range(777):
        b.choose(leaf, ups, packet(i, uid=5), now)
    later = [b.choose(leaf, ups, packet(i, uid=9), now) for i in range(20)]
    assert [p.index for p in direct] == [p.index for p in later]
    assert len({p.index for p in direct}) > 3     # and the draws do spread


def test_consecutive_packets_of_a_flow_draw_independently():
    """Balls into bins: with 8 tied ports, a packet repeats its flow's previous port with
    probability 1/8 if the draws are independent (a weak hash of consecutive PSNs is not)."""
    leaf, ups, _ = fabric()
    pol = policy(remote=False)
    same = pairs = 0
    now = 5 * US
    for uid in range(20):
        prev = None
        for seq in range(200):
            now += 84_000                       # one 4178 B packet time at 400G; ports stay idle
            pkt = SimpleNamespace(qp=SimpleNamespace(uid=uid), seq=seq, t_tx=now - 2 * US, kind=0, dst=7)
            port = pol.choose(leaf, ups, pkt, now)
            if prev is not None:
                pairs += 1
                same += port is prev
            prev = port
    assert abs(same / pairs - 1 / 8) < 0.02      # ~4 standard deviations over 3980 pairs


def test_grade_parameters_validate():
    cls = ROUTING.get("adaptive").Params
    with pytest.raises(ValueError):
        cls(queue_thresholds=[0.2, 0.1])
    assert cls(refresh="1us").refresh == US


# ---------------------------------------------------------------------------------------------
# fabric level


def _hot_run(tmp_path, routing):
    """leaf0 (hosts 0-3) and leaf1 (hosts 4-7) over spines s0-s3; host 8 hangs off s3 and sends
    2 MiB to host 4, so s3's downlink to leaf1 is busy at line rate with traffic leaf0 cannot see.
    Hosts 0-2 send 2 MiB each to hosts 5-7: ideally all over s0-s2. Returns the completion-time
    ratio and the data bytes leaf0 sent to s3."""
    nodes = ([{"name": f"h{i}", "type": "host"} for i in range(9)]
             + [{"name": f"leaf{i}", "type": "switch", "tier": 1} for i in range(2)]
             + [{"name": f"s{i}", "type": "switch", "tier": 2} for i in range(4)])
    links = [{"a": f"h{i}", "b": f"leaf{i // 4}", "rate": "400Gbps", "delay": "500ns"} for i in range(8)]
    links.append({"a": "h8", "b": "s3", "rate": "400Gbps", "delay": "500ns"})
    links += [{"a": f"leaf{a}", "b": f"s{s}", "rate": "400Gbps", "delay": "500ns"}
              for a in range(2) for s in range(4)]
    size = 2 * 2**20
    rows = ["id,src,dst,size_bytes,start_ps,deps,gap_ps", f"0,8,4,{size},0,,0"]
    rows += [f"{i + 1},{i},{5 + i},{size},0,,0" for i in range(3)]
    path = tmp_path / "hot.csv"
    path.write_text("\n".join(rows) + "\n")
    sc = {"name": "hot", "topology": {"kind": "explicit", "nodes": nodes, "links": links,
                                      "buffer": {"size": "unbounded"}},
          "traffic": {"pattern": "csv", "path": str(path)}, "routing": routing}
    res = fabricsim.run(sc)
    L = res.links
    to_s3 = int(L[(L.src_name == "leaf0") & (L.dst_name == "s3")].tx_data_bytes.iloc[0])
    return res.summary["effective_bandwidth"]["completion_time_ratio"], to_s3


@pytest.mark.parametrize("policy_name", ["adaptive", "flowlet"])
def test_remote_reports_steer_leaf_traffic_off_a_congested_spine_downlink(tmp_path, policy_name):
    extra = {"gap": "1ns"} if policy_name == "flowlet" else {}    # flowlet: re-placed every packet
    blind_ratio, blind_bytes = _hot_run(tmp_path, {"policy": policy_name, "remote": False, **extra})
    ratio, to_s3 = _hot_run(tmp_path, {"policy": policy_name, **extra})
    # local grades alone spread leaf0's 6 MiB evenly, a quarter over s3, whose downlink is full
    assert blind_bytes > 0.2 * 3 * 512 * PKT
    assert to_s3 < blind_bytes / 2
    assert ratio > blind_ratio + 0.15


def test_graded_adaptive_at_least_matches_spray_on_a_saturated_permutation():
    """Quickstart fabric (32 hosts, 8 over 8 spines), 4 MiB cross-leaf permutation: per-packet
    switch AR is at or above host spraying (htsim: 0.88 vs 0.84 of ideal at 128 hosts), which the
    earlier exact policy was not (0.84 vs 0.91 on seed 1)."""
    for seed in (1, 2):
        r = {}
        for pol in ("adaptive", "spray"):
            res = fabricsim.run(QUICKSTART, overrides=[f"routing.policy={pol}"], seed=seed)
            r[pol] = res.summary["effective_bandwidth"]["completion_time_ratio"]
        assert r["adaptive"] >= r["spray"]
        assert r["adaptive"] >= 0.9
