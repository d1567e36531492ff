"""The flow-level meaning of routing (engine/spread.py): shares per link, the vectorised placement
against the per-queue-pair one, and ECMP's vectorised index against the scalar one."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fabricsim.api import prepare
from fabricsim.engine.spread import SpreadBuilder
from fabricsim.flows.identity import FLOWS_SALT_STREAM, ConnectionTable
from fabricsim.flows.links import LinkTable
from fabricsim.planes import SPLITS
from fabricsim.routing import ROUTING
from fabricsim.routing.ecmp import ecmp_index, ecmp_index_array

CLUSTER = {"kind": "cluster", "domain": "hgx8", "nodes": 4, "rails": 4, "spines": 2,
           "nic": {"ports": 2, "rate": "400Gbps"}}
LEAF_SPINE = {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 4, "spines": 4, "links_per_spine": 2}
NVL72 = {"kind": "cluster", "domain": "nvl72", "racks": 2, "nic": {"ports": 2, "rate": "400Gbps"}}


def builder(topology, routing, split="per_packet"):
    _l, sim = prepare({"topology": topology, "routing": routing, "nic": {"plane_split": split},
                       "simulation": {"engine": "flow"}})
    sc = sim.scenario
    policy = ROUTING.get(sc.routing.name)(sc.routing.params, sim.streams)
    sb = SpreadBuilder(LinkTable(sim.topology), sim.paths, policy, SPLITS.get(sc.nic.name)(sc.nic.params, sim.streams))
    return sim, sb


def pairs(sim, n=200, seed=0):
    rng = np.random.default_rng(seed)
    H = sim.topology.num_hosts
    src = rng.integers(0, H, n)
    dst = (src + rng.integers(1, H, n)) % H
    table = ConnectionTable(sim.streams.u64(FLOWS_SALT_STREAM))
    uid, h = [], []
    for s, d in zip(src.tolist(), dst.tolist()):
        (u, _sp, hh, _b), = table.open(s, d, 1000, 1)
        uid.append(u)
        h.append(hh)
    return src, dst, np.array(uid), np.array(h, dtype=np.uint64)


def assert_rows_equal_row(sb, src, dst, uid, h):
    """The vectorised placement (``rows``) gives every queue pair the link shares of ``row``."""
    counts, segs, ws = sb.rows(src, dst, uid, h)
    ptr = np.concatenate([[0], np.cumsum(counts)])
    for k in range(len(src)):
        fast = sb.usage(list(zip(segs[ptr[k]:ptr[k + 1]].tolist(), ws[ptr[k]:ptr[k + 1]].tolist())))
        slow = sb.usage(sb.row(int(src[k]), int(dst[k]), int(uid[k]), int(h[k])))
        assert fast.keys() == slow.keys()
        assert all(abs(fast[x] - slow[x]) < 1e-12 for x in fast)


@pytest.mark.parametrize("topology", [CLUSTER, LEAF_SPINE], ids=["cluster", "leaf_spine"])
@pytest.mark.parametrize("split", ["per_packet", "per_flow"])
def test_vectorised_ecmp_placement_equals_the_per_queue_pair_walk(topology, split):
    sim, sb = builder(topology, "ecmp", split)
    src, dst, uid, h = pairs(sim)
    assert_rows_equal_row(sb, src, dst, uid, h)


@pytest.mark.parametrize("routing", ["ecmp", "spray", "adaptive"])
def test_every_queue_pair_crosses_one_unit_of_share_per_hop_and_reaches_its_destination(routing):
    sim, sb = builder(CLUSTER, routing)
    L = sb.links
    src, dst, uid, h = pairs(sim, 60)
    for k in range(len(src)):
        use = sb.usage(sb.row(int(src[k]), int(dst[k]), int(uid[k]), int(h[k])))
        out_src = sum(c for link, c in use.items() if L.src[link] == src[k])
        into_dst = sum(c for link, c in use.items() if L.dst[link] == dst[k])
        assert out_src == pytest.approx(1.0) and into_dst == pytest.approx(1.0)
        # flow is conserved at every switch it crosses
        nodes = {int(L.src[x]) for x in use} | {int(L.dst[x]) for x in use}
        for node in nodes - {int(src[k]), int(dst[k])}:
            inflow = sum(c for x, c in use.items() if L.dst[x] == node)
            outflow = sum(c for x, c in use.items() if L.src[x] == node)
            assert inflow == pytest.approx(outflow)


def test_spray_splits_evenly_and_ecmp_takes_one_port_per_switch():
    sim, sb = builder(LEAF_SPINE, "spray")
    L = sb.links
    use = sb.usage(sb.row(0, 15, 0, 12345))
    ups = sorted(c for x, c in use.items() if L.src[x] == int(L.dst[L.between(0, L.dst[0])[0]]) and c)
    assert len(ups) == 8 and all(c == pytest.approx(1 / 8) for c in ups)      # 4 spines x 2 links
    sim, sb = builder(LEAF_SPINE, "ecmp")
    use = sb.usage(sb.row(0, 15, 0, 12345))
    assert sorted(use.values()) == [1.0] * 4          # host-leaf, leaf-spine, spine-leaf, leaf-host


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(0, 10**6), st.integers(1, 300))
def test_ecmp_index_array_equals_ecmp_index(h, salt, switch, n):
    got = ecmp_index_array(np.array([h], dtype=np.uint64), salt, np.array([switch], dtype=np.uint64),
                           np.array([n], dtype=np.uint64))
    assert int(got[0]) == ecmp_index(h, salt, switch, n)


@pytest.mark.parametrize("topology", [CLUSTER, LEAF_SPINE], ids=["cluster", "leaf_spine"])
@pytest.mark.parametrize("split", ["per_packet", "per_flow"])
def test_vectorised_ecmp_placement_shares_the_last_hop_segments(topology, split):
    # the vectorised walk stops at the destination's attachment switches and takes the same shared
    # last-hop segment as the per-queue-pair row: the same segments, not only the same link shares
    sim, sb = builder(topology, "ecmp", split)
    src, dst, uid, h = pairs(sim, seed=3)
    counts, segs, ws = sb.rows(src, dst, uid, h)
    ptr = np.concatenate([[0], np.cumsum(counts)])
    n_links = len(sb.links)
    shared = 0
    for k in range(len(src)):
        fast = sorted(zip(segs[ptr[k]:ptr[k + 1]].tolist(), ws[ptr[k]:ptr[k + 1]].tolist()))
        slow = sorted(sb.row(int(src[k]), int(dst[k]), int(uid[k]), int(h[k])))
        assert [s for s, _w in fast] == [s for s, _w in slow]
        np.testing.assert_allclose([w for _s, w in fast], [w for _s, w in slow], rtol=1e-12)
        shared += sum(1 for s, _w in fast if s >= n_links) - 1       # beyond the first hop's
    assert shared == len(src)          # every queue pair's last hop is one shared segment


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(1, 9)), min_size=1, max_size=30))
def test_every_plane_split_pins_as_its_ports_choice(qps):
    """``PlaneSplit.pinned`` (vectorised, for the flow engine's placement) agrees with ``ports``
    (per queue pair, the packet engine's), queue pair by queue pair, for every registered split."""
    from types import SimpleNamespace
    hashes = np.array([h for h, _n in qps], dtype=np.uint64)
    n = np.array([k for _h, k in qps], dtype=np.int64)
    for name in SPLITS.names():
        split = SPLITS.get(name)(None, None)
        pick = split.pinned(hashes, n)
        if pick is NotImplemented:          # no vectorised form: the placement asks ports() itself
            continue
        for j, (h, k) in enumerate(qps):
            eligible = [100 + x for x in range(k)]
            want = split.ports(SimpleNamespace(uid=j, hash=h), eligible)
            assert want == (eligible if pick is None else [eligible[int(pick[j])]]), name


@pytest.mark.parametrize("topology", [CLUSTER, LEAF_SPINE], ids=["cluster", "leaf_spine"])
def test_a_split_with_only_ports_is_placed_queue_pair_by_queue_pair(topology):
    # a plane split written against the base class with ports() only (any subset of the eligible
    # ports, here the first two of every three by hash): the vectorised placement asks it per
    # queue pair and gives each the same link shares as the per-queue-pair row
    from fabricsim.planes.base import PlaneSplit

    class EveryOther(PlaneSplit):
        def ports(self, qp, eligible):
            return eligible[qp.hash % 2::2] or eligible

        def parallel(self, qps, eligible):
            return max(1, eligible // 2)

    sim, _sb = builder(topology, "ecmp")
    sc = sim.scenario
    policy = ROUTING.get(sc.routing.name)(sc.routing.params, sim.streams)
    sb = SpreadBuilder(LinkTable(sim.topology), sim.paths, policy, EveryOther())
    src, dst, uid, h = pairs(sim, seed=5)
    assert_rows_equal_row(sb, src, dst, uid, h)


@pytest.mark.parametrize("topology", [CLUSTER, LEAF_SPINE], ids=["cluster", "leaf_spine"])
@pytest.mark.parametrize("split", ["per_packet", "per_flow"])
@pytest.mark.parametrize("routing", ["spray", "adaptive"])
def test_vectorised_shared_placement_equals_the_per_queue_pair_rows(topology, split, routing):
    # spray / adaptive: rows() looks the three segments up per distinct key of the batch; every
    # queue pair gets the link shares row() gives it, and both share the same segments
    sim, sb = builder(topology, routing, split)
    src, dst, uid, h = pairs(sim, n=300)
    before = sb.segments
    assert_rows_equal_row(sb, src, dst, uid, h)
    assert sb.segments > before
    after = sb.segments
    sb.rows(src, dst, uid, h)                       # known keys: no new segment
    assert sb.segments == after


def _parallel_links_topology():
    """Four hosts, two leaves, two spines; gpu1 has two links from leaf0."""
    nodes = [{"name": f"gpu{i}", "type": "host"} for i in range(4)] + \
        [{"name": f"leaf{i}", "type": "switch", "tier": 1} for i in range(2)] + \
        [{"name": f"spine{i}", "type": "switch", "tier": 2} for i in range(2)]
    link = lambda a, b: {"a": a, "b": b, "rate": "400Gbps", "delay": "500ns"}   # noqa: E731
    links = [link("gpu0", "leaf0"), link("gpu1", "leaf0"), link("gpu1", "leaf0"), link("gpu2", "leaf1"),
             link("gpu3", "leaf1")] + [link(f"leaf{i}", f"spine{j}") for i in range(2) for j in range(2)]
    return {"kind": "explicit", "nodes": nodes, "links": links}


@pytest.mark.parametrize("topology", [CLUSTER, LEAF_SPINE, NVL72, _parallel_links_topology()],
                         ids=["cluster", "leaf_spine", "nvl72", "parallel_links"])
@pytest.mark.parametrize("routing", ["spray", "adaptive"])
def test_batched_last_hops_number_and_fill_segments_as_last_hop_one_by_one(topology, routing):
    # rows() makes the new shared last hops of a batch at once (single-link exits read from the
    # link table); a builder whose last hops all go through _last_hop, one distinct (exits,
    # destination) at a time in first-use order, must give the same segment numbers, links and
    # coefficients exactly, batch after batch
    sim, fast = builder(topology, routing)
    _sim, slow = builder(topology, routing)

    def one_by_one(d, e, exits_of):
        out = []
        for d_, ei in zip(d.tolist(), e.tolist()):
            got = slow._down.get((d_, exits_of[ei]))
            out.append(got if got is not None else slow._last_hop(d_, exits_of[ei], None))
        return out

    slow._new_downs = one_by_one
    src, dst, uid, h = pairs(sim, n=400, seed=3)
    for a, b in ((0, 150), (100, 400), (0, 400)):
        got = fast.rows(src[a:b], dst[a:b], uid[a:b], h[a:b])
        want = slow.rows(src[a:b], dst[a:b], uid[a:b], h[a:b])
        for x, y in zip(got, want):
            assert np.array_equal(x, y)
    assert fast.segments == slow.segments
    for x, y in zip(fast.seg_links, slow.seg_links):
        assert np.array_equal(x, y)
    for x, y in zip(fast.seg_coef, slow.seg_coef):
        assert np.array_equal(np.asarray(x), np.asarray(y))


def _dict_walk(sb, starts, dst):
    """The switch-to-switch spread one switch at a time with dicts (as first written): the
    reference the level-by-level walk must equal exactly."""
    attach = sb.paths.attachments(dst)
    acc, exits, frontier = {}, {}, dict(starts)
    while frontier:
        nxt = {}
        for node, w in frontier.items():
            if node in attach:
                exits[node] = exits.get(node, 0.0) + w
                continue
            ports = sb.links.ports_towards(node, sb.paths.next_hops(node, dst))
            for p, x in zip(ports.tolist(), sb._weights(node, ports, dst, None).tolist()):
                if x:
                    acc[p] = acc.get(p, 0.0) + w * x
                    b = int(sb.links.dst[p])
                    nxt[b] = nxt.get(b, 0.0) + w * x
        frontier = nxt
    return acc, exits


@pytest.mark.parametrize("routing", ["spray", "adaptive"])
def test_level_walk_equals_the_switch_by_switch_walk_exactly(routing):
    topo = {"kind": "cluster", "domain": "nvl72", "racks": 4, "nic": {"ports": 4, "rate": "200Gbps"}}
    sim, sb = builder(topo, {"policy": routing})
    src, dst, _uid, _h = pairs(sim, n=60, seed=3)
    for s, d in zip(src.tolist(), dst.tolist()):
        _seg, starts = sb._up_segment(s, sb._first_ports(s, d))
        assert sb._walk(dict(starts), d, None) == _dict_walk(sb, dict(starts), d)


def test_level_walk_sums_in_order_of_first_arrival():
    # switches reached from several others are summed in the order they are first reached (as
    # the switch-by-switch walk does), not in id order: here the cores are reached c2, c0, c1 and
    # the adaptive shares (100, 200, 700 Gbps: 0.1, 0.2, 0.7) summed in another order differ in
    # the last bit
    rates = {"s0": "100Gbps", "s1": "200Gbps", "s2": "700Gbps"}
    core_of = {"s0": "c2", "s1": "c0", "s2": "c1"}
    nodes = ([{"name": "h0", "type": "host"}, {"name": "h1", "type": "host"}]
             + [{"name": f"leaf{i}", "type": "switch", "tier": 1} for i in range(2)]
             + [{"name": f"s{i}", "type": "switch", "tier": 2} for i in range(3)]
             + [{"name": f"c{i}", "type": "switch", "tier": 3} for i in range(3)])
    links = [{"a": "h0", "b": "leaf0", "rate": "1000Gbps"}, {"a": "h1", "b": "leaf1", "rate": "1000Gbps"}]
    links += [{"a": "leaf0", "b": s, "rate": r} for s, r in rates.items()]
    links += [{"a": s, "b": c, "rate": "1000Gbps"} for s, c in core_of.items()]
    links += [{"a": f"c{i}", "b": "leaf1", "rate": "1000Gbps"} for i in range(3)]
    sim, sb = builder({"kind": "explicit", "nodes": nodes, "links": links}, {"policy": "adaptive"})
    _seg, starts = sb._up_segment(0, sb._first_ports(0, 1))
    got = sb._walk(dict(starts), 1, None)
    assert got == _dict_walk(sb, dict(starts), 1)
    (leaf1, w), = got[1].items()
    assert w == 0.1 + 0.2 + 0.7 != 0.2 + 0.7 + 0.1            # (what the other order would give)


def test_parallel_links_into_a_host_are_placed_as_the_per_queue_pair_walk():
    # gpu1 has two links from leaf0: its last hop is a choice (no shared last-hop segment), which
    # the vectorised placement must find for it alone
    sim, sb = builder(_parallel_links_topology(), "ecmp")
    src, dst, uid, h = pairs(sim, n=100)
    assert_rows_equal_row(sb, src, dst, uid, h)
    assert sb._multi_into.tolist() == [False, True, False, False]



@pytest.mark.parametrize("routing", ["ecmp", "adaptive"])
def test_placement_in_batches_uses_what_earlier_batches_found(routing):
    # rows() in batches that meet pairs, first-hop sets and last hops seen before (the sorted key
    # memos of eligible sets, direct last hops and candidates) gives each queue pair the segments
    # of the per-queue-pair row, and the eligible ids of the scalar lookup
    # (the link shares of a separate builder's per-queue-pair rows: its segments are its own)
    sim, sb = builder(NVL72, routing)
    _sim, one_by_one = builder(NVL72, routing)
    src, dst, uid, h = pairs(sim, n=600, seed=5)
    for a, b in ((0, 250), (150, 450), (0, 600)):
        counts, segs, ws = sb.rows(src[a:b], dst[a:b], uid[a:b], h[a:b])
        ptr = np.concatenate([[0], np.cumsum(counts)])
        for k in range(b - a):
            fast = sorted(zip(segs[ptr[k]:ptr[k + 1]].tolist(), ws[ptr[k]:ptr[k + 1]].tolist()))
            q = a + k
            slow = sorted(sb.row(int(src[q]), int(dst[q]), int(uid[q]), int(h[q])))
            assert [s for s, _w in fast] == [s for s, _w in slow]
            np.testing.assert_allclose([w for _s, w in fast], [w for _s, w in slow], rtol=1e-12)
            alone = one_by_one.usage(one_by_one.row(int(src[q]), int(dst[q]), int(uid[q]), int(h[q])))
            got = sb.usage(fast)
            assert got.keys() == alone.keys()
            assert all(abs(got[x] - alone[x]) < 1e-12 for x in got)
    eids = sb._eligible_ids(src, dst)
    assert eids.tolist() == [sb._eligible_id(int(s), int(d)) for s, d in zip(src, dst)]
    if routing == "ecmp":                # pairs inside a rack took the direct last hop (NVLink)
        assert sb._direct_seg.keys.size > 0


def test_key_memo_looks_up_batches():
    from fabricsim.engine.spread import _KeyMemo
    m = _KeyMemo()
    vals, known = m.lookup(np.array([5, 1]))
    assert not known.any()
    m.add(np.array([5, 1]), np.array([50, 10]))
    m.add(np.array([3]), np.array([30]))
    vals, known = m.lookup(np.array([1, 2, 3, 5, 9]))
    assert known.tolist() == [True, False, True, True, False]
    assert vals[known].tolist() == [10, 30, 50]


def test_walks_are_kept_by_the_attachments_they_can_reach():
    # GPUs 72 and 144 (racks 1 and 2, rail 0) hang off other NVLink switches but the same leaf
    # in every plane: from GPU 1 (rail 1) the switch-to-switch spread to both is one segment,
    # their last hops two; from GPU 2 (rail 2) the walk's second level (every plane's spines,
    # evenly loaded) is the one already stepped through. Every walk equals the dict walk.
    topo = {"kind": "cluster", "domain": "nvl72", "racks": 4, "nic": {"ports": 4, "rate": "200Gbps"}}
    sim, sb = builder(topo, {"policy": "adaptive"})
    paths = sim.paths
    assert paths.attachments(72) != paths.attachments(144)
    leaves = [s for s in paths.attachments(72) if sim.topology.graph.nodes[s]["domain"] == "ethernet"]
    assert all(paths.attachments_near(s, 72) == paths.attachments_near(s, 144) == {s} for s in leaves)
    steps = []
    real = sb._step
    sb._step = lambda *a: steps.append(a[0]) or real(*a)
    src, dst = np.array([1, 1]), np.array([72, 144])
    counts, segs, _w = sb.rows(src, dst, np.array([0, 1]), np.zeros(2, np.uint64))
    assert counts.tolist() == [3, 3]
    assert segs[1] == segs[4] and segs[2] != segs[5]            # one mid segment, two last hops
    assert len(steps) == 3                                       # leaves, spines, attachments
    steps.clear()
    sb.rows(np.array([2]), np.array([72]), np.array([2]), np.zeros(1, np.uint64))
    assert len(steps) == 1                                       # its own leaves; the rest kept
    # (73 and 145: rail 1, other leaves; a level key blind to the destination fails here)
    for s, d in ((1, 72), (1, 144), (2, 72), (2, 216), (2, 73), (2, 145), (0, 73)):
        _seg, starts = sb._up_segment(s, sb._first_ports(s, d))
        assert sb._walk(dict(starts), d, None) == _dict_walk(sb, dict(starts), d)


def test_attachments_near_a_host_or_in_a_component_without_any():
    # a host: all of the destination's attachments; an NVLink switch chip of another rack: none
    # (chips link to GPUs only: each is a component of its own), one of the destination's rack:
    # itself; over several switches, the union of theirs
    topo = {"kind": "cluster", "domain": "nvl72", "racks": 2, "nic": {"ports": 4, "rate": "200Gbps"}}
    sim, _sb = builder(topo, {"policy": "adaptive"})
    paths, g = sim.paths, sim.topology.graph
    assert paths.attachments_near(5, 72) == paths.attachments(72)
    nvl0 = [s for s in paths.attachments(0) if g.nodes[s]["domain"] == "nvlink"]
    nvl1 = [s for s in paths.attachments(72) if g.nodes[s]["domain"] == "nvlink"]
    assert paths.attachments_near(nvl0[0], 72) == frozenset()
    assert paths.attachments_near(nvl1[0], 72) == frozenset(nvl1[:1])
    assert paths.next_hops(nvl0[0], 72) == []
    eth0 = sorted(s for s in paths.attachments(0) if g.nodes[s]["domain"] == "ethernet")
    assert paths.attachments_reachable(eth0 + nvl0, 72) == frozenset().union(
        *(paths.attachments_near(s, 72) for s in eth0)) == paths.attachments(72) - frozenset(nvl1)
    assert paths.attachments_reachable([], 72) == frozenset()
