"""Generic collectives (fabricsim/traces/collectives.py, ``fabricsim trace collective``): bytes per
rank, ring successors, dependency chains, acyclicity, composition, replay against the bandwidth
bound, CLI."""
from __future__ import annotations

from collections import Counter

import networkx as nx
import pytest

import fabricsim
from fabricsim.cli import main
from fabricsim.errors import ConfigError
from fabricsim.traces import read_trace, write_trace
from fabricsim.traces.collectives import (all_to_all, chunk_sizes, compose, last_messages, parse_ranks,
                                          ring_all_gather, ring_all_reduce, ring_reduce_scatter, send_recv,
                                          sequence)

RANKS = [3, 0, 5, 1, 7]  # ring order need not be sorted


def sent(recs):
    c = Counter()
    for r in recs:
        c[r.src] += r.size_bytes
    return c


@pytest.mark.parametrize("size", [1000, 1003, 7 * 2**20 + 4])
def test_ring_bytes_per_rank(size):
    n = len(RANKS)
    sizes = chunk_sizes(size, n)
    assert sum(sizes) == size and max(sizes) - min(sizes) <= (1 if size % n else 0)
    ar, rs, ag = ring_all_reduce(RANKS, size), ring_reduce_scatter(RANKS, size), ring_all_gather(RANKS, size)
    assert len(ar) == 2 * (n - 1) * n and len(rs) == len(ag) == (n - 1) * n
    # totals are exact: 2(n-1)/n x S per rank on average, (n-1)/n x S for each half
    assert sum(r.size_bytes for r in ar) == 2 * (n - 1) * size
    assert sum(r.size_bytes for r in rs) == sum(r.size_bytes for r in ag) == (n - 1) * size
    for i, rank in enumerate(RANKS):
        # rank i sends every chunk but one in each half: S minus that chunk, exactly
        assert sent(rs)[rank] == size - sizes[(i + 1) % n]
        assert sent(ag)[rank] == size - sizes[(i + 2) % n]
        assert sent(ar)[rank] == 2 * size - sizes[(i + 1) % n] - sizes[(i + 2) % n]
        if size % n == 0:
            assert sent(ar)[rank] == 2 * (n - 1) * size // n and sent(rs)[rank] == (n - 1) * size // n


def test_ring_successors_and_dependency_chain():
    n = len(RANKS)
    succ = {RANKS[i]: RANKS[(i + 1) % n] for i in range(n)}
    recs = ring_all_reduce(RANKS, 10_000, start_id=100, deps=[7, 8], gap_ps=5000)
    by_id = {r.id: r for r in recs}
    assert sorted(by_id) == list(range(100, 100 + len(recs)))
    assert all(r.dst == succ[r.src] and r.phase == "other" and r.op == "allreduce" for r in recs)
    for k in range(2 * (n - 1)):
        step = recs[k * n:(k + 1) * n]
        assert sorted(r.src for r in step) == sorted(RANKS)
        for r in step:
            if k == 0:
                assert r.deps == (7, 8) and r.gap_ps == 0
            else:
                (d,) = r.deps
                into = by_id[d]
                # step k from rank i depends on step k-1 into rank i
                assert into.dst == r.src and (d - 100) // n == k - 1 and r.gap_ps == 5000
    # it forwards what it just received: in reduce-scatter the chunk sizes line up
    for r in recs[n:(n - 1) * n]:
        assert r.size_bytes == by_id[r.deps[0]].size_bytes
    g = nx.DiGraph((d, r.id) for r in recs for d in r.deps if d in by_id)
    assert nx.is_directed_acyclic_graph(g)
    assert nx.dag_longest_path_length(g) == 2 * (n - 1) - 1


def test_send_recv_all_to_all_and_errors():
    (m,) = send_recv([2, 6], 4096, start_id=9, deps=[1], gap_ps=7)
    assert (m.id, m.src, m.dst, m.size_bytes, m.deps, m.gap_ps) == (9, 2, 6, 4096, (1,), 7)
    a = all_to_all([0, 1, 2, 3], 1002)
    assert len(a) == 12 and all(not r.deps for r in a)
    assert sum(r.size_bytes for r in a) == 4 * 1002 - sum(chunk_sizes(1002, 4))
    for bad in (dict(ranks=[1], size=10), dict(ranks=[1, 1], size=10), dict(ranks=[0, 1], size=0),
                dict(ranks=[0, 1, 2], size=2)):
        with pytest.raises(ConfigError):
            ring_all_reduce(bad["ranks"], bad["size"])
    with pytest.raises(ConfigError):
        send_recv([0, 1, 2], 10)
    assert parse_ranks("0-3,8, 10-11") == [0, 1, 2, 3, 8, 10, 11]
    for bad in ("", "3-1", "a", "0,0", "-1", "1-"):
        with pytest.raises(ConfigError) as e:
            parse_ranks(bad)
        assert e.value.field == "--ranks"


def test_compose_and_repeat():
    rep = sequence("allreduce", [0, 1, 2, 3], 4000, repeat=3)
    ops = Counter(r.op for r in rep)
    assert ops == {"allreduce.0": 24, "allreduce.1": 24, "allreduce.2": 24}
    first = [r for r in rep if r.op == "allreduce.1"][:4]
    prev = last_messages([r for r in rep if r.op == "allreduce.0"])
    by_id = {r.id: r for r in rep}
    for r in first:
        (d,) = r.deps
        assert d == prev[r.src][0] and by_id[d].dst == r.src and by_id[d].op == "allreduce.0"
    # two parts with clashing ids are renumbered; deps inside each part follow
    a = ring_all_reduce([0, 1, 2], 300)
    b = send_recv([0, 4], 50, deps=[a[-1].id])  # refers to a's last message
    c = ring_all_gather([4, 5, 6], 30)  # ids 0..5 clash with a
    t = compose([a, b, c])
    ids = [r.id for r in t.records]
    assert ids == list(range(len(a) + 1 + len(c)))
    assert t.records[len(a)].deps == (len(a) - 1,)
    assert t.records[-1].deps == (len(a) + 1 + 1,)  # step 1 from rank 6 waits for step 0 from rank 5
    # already unique ids are kept
    t2 = compose([a, ring_all_gather([4, 5], 20, start_id=1000)])
    assert [r.id for r in t2.records][-2:] == [1000, 1001]


def _scenario(path, rate="400Gbps"):
    return {"name": "coll", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 4,
                                         "host_link": {"rate": rate, "delay": "500ns"},
                                         "fabric_link": {"rate": rate, "delay": "500ns"}},
            "traffic": {"pattern": "trace", "path": str(path)}, "routing": {"policy": "ecmp"},
            "simulation": {"seed": 1, "time_limit": "20ms"}}


def test_ring_all_reduce_replay_near_bandwidth_bound(tmp_path):
    n, size = 8, 8 * 2**20 + 5
    p = write_trace(compose([ring_all_reduce(list(range(n)), size)]), tmp_path / "ar.parquet")
    res = fabricsim.run(_scenario(p))
    assert res.messages["completed"].all()
    row = res.collectives.set_index("op").loc["allreduce"]
    bound_ps = 2 * (n - 1) / n * size * 8 / 400e9 * 1e12
    assert row["size_bytes"] == 2 * (n - 1) * size
    assert bound_ps <= row["time_ps"] <= 1.3 * bound_ps, (row["time_ps"], bound_ps)
    # steps run in order: every message is released no earlier than its dependency ends
    m = res.messages.set_index("message_id")
    for r in read_trace(p).records:
        for d in r.deps:
            assert m.loc[r.id, "release_ps"] >= m.loc[d, "end_ps"]


def test_repeat_with_gap_replays_in_order(tmp_path):
    recs = sequence("reduce_scatter", [0, 2, 4, 6], 64 * 1024, repeat=2, gap_ps=2_000_000)
    p = write_trace(compose([recs]), tmp_path / "rs.csv")
    res = fabricsim.run(_scenario(p))
    c = res.collectives.set_index("op")
    assert c["completed"].all() and set(c.index) == {"reduce_scatter.0", "reduce_scatter.1"}
    assert c.loc["reduce_scatter.1", "first_release_ps"] >= c.loc["reduce_scatter.0", "first_release_ps"] + 2 * 2_000_000
    m = res.messages.set_index("message_id")
    for r in recs:
        for d in r.deps:
            assert m.loc[r.id, "release_ps"] >= m.loc[d, "end_ps"] + r.gap_ps


def collective_cli(runner, out, *args):
    """``fabricsim trace collective -o OUT --kind allreduce ARGS``; returns the trace it wrote."""
    res = runner.invoke(main, ["trace", "collective", "-o", str(out), "--kind", "allreduce", *args])
    assert res.exit_code == 0, res.output
    return read_trace(out)


def test_cli_happy_path_and_bad_ranks(tmp_path, runner):
    t = collective_cli(runner, tmp_path / "ar.parquet", "--ranks", "0-3,6,7", "--size", "64MiB", "--gap", "2us",
                       "--repeat", "2")
    assert len(t) == 2 * 2 * 5 * 6 and sum(r.size_bytes for r in t.records) == 2 * 2 * 5 * 64 * 2**20
    assert {r.op for r in t.records} == {"allreduce.0", "allreduce.1"}
    assert max(r.gap_ps for r in t.records) == 2_000_000
    res = runner.invoke(main, ["trace", "collective", "-o", str(tmp_path / "s.csv"), "--kind", "sendrecv",
                               "--ranks", "1,5", "--size", "1MiB"])
    assert res.exit_code == 0, res.output
    assert len(read_trace(tmp_path / "s.csv")) == 1
    for args, opt in ((["--ranks", "0-x"], "--ranks"), (["--ranks", "5-2"], "--ranks"),
                      (["--ranks", "0-3", "--size", "lots"], "--size"), (["--ranks", "0-3", "--kind", "ring"], "--kind"),
                      (["--ranks", "0-3", "--repeat", "0"], "--repeat"), (["--ranks", "0-3", "--gap", "5"], "--gap"),
                      (["--ranks", "0-3", "--channels", "0"], "--channels"),
                      (["--ranks", "0-3", "--conn-base", "-2"], "--conn-base"),
                      (["--ranks", "0-3", "--algorithm", "tree", "--tree-chunk", "1"], "--tree-chunk")):
        base = {"--kind": "allreduce", "--size": "1MiB"}
        argv = ["trace", "collective", "-o", str(tmp_path / "bad.parquet")] + args
        for k, v in base.items():
            if k not in args:
                argv += [k, v]
        bad = runner.invoke(main, argv)
        assert bad.exit_code == 2, (args, bad.output)
        assert bad.stderr.strip().splitlines() == [bad.stderr.strip()] and opt in bad.stderr
    assert not (tmp_path / "bad.parquet").exists()


# ----------------------------------------------------------------------------- channels, connections

@pytest.mark.parametrize("channels", [1, 3])
def test_channels_split_the_buffer_and_each_runs_its_own_ring_on_its_own_connection(channels):
    n, size = len(RANKS), 3 * 5 * 1000 + 7
    recs = ring_all_reduce(RANKS, size, start_id=1000, deps=[42], channels=channels, conn_base=5)
    assert len(recs) == 2 * (n - 1) * n * channels
    assert sum(r.size_bytes for r in recs) == 2 * (n - 1) * size         # exact over channels and chunks
    assert {r.conn for r in recs} == set(range(5, 5 + channels))
    assert all(r.collective == "allreduce" and r.collective_bytes == size for r in recs)
    by_id = {r.id: r for r in recs}
    for c in range(channels):
        mine = [r for r in recs if r.conn == 5 + c]
        part = chunk_sizes(size, channels)[c]
        assert sum(r.size_bytes for r in mine) == 2 * (n - 1) * part
        for r in mine:                                  # dependencies never cross channels
            assert all(by_id[d].conn == r.conn for d in r.deps if d in by_id)
            assert r.deps == (42,) or len(r.deps) == 1
    # fresh queue pairs on request, and the generator's default
    assert {r.conn for r in ring_all_reduce(RANKS, size, channels=channels)} == {-1}
    assert {r.conn for r in ring_all_reduce(RANKS, size, channels=channels, conn_base=-1)} == {-1}


def test_sequence_reuses_the_channel_connections_and_waits_for_every_channel():
    rep = sequence("allreduce", [0, 1, 2, 3], 8000, repeat=2, channels=2)
    assert {r.conn for r in rep} == {0, 1}
    for conn in (0, 1):                   # the same connections for both repeats and every pair
        pairs = {(r.src, r.dst) for r in rep if r.conn == conn}
        assert pairs == {(0, 1), (1, 2), (2, 3), (3, 0)}
    by_id = {r.id: r for r in rep}
    first = [r for r in rep if r.op == "allreduce.1" and not any(by_id[d].op == "allreduce.1" for d in r.deps)]
    assert len(first) == 8
    for r in first:                       # each channel's first step waits for both channels' last step into it
        assert sorted(by_id[d].conn for d in r.deps) == [0, 1]
        assert all(by_id[d].dst == r.src and by_id[d].op == "allreduce.0" for d in r.deps)
    assert {r.conn for r in sequence("allreduce", [0, 1, 2], 900, conn_base=-1)} == {-1}


def test_all_to_all_is_staggered_and_sendrecv_splits_over_channels():
    ranks = [4, 5, 6, 7]
    recs = all_to_all(ranks, 4000, channels=2, conn_base=0)
    for i, src in enumerate(ranks):
        order = [r.dst for r in recs if r.src == src and r.conn == 0]
        assert order == [ranks[(i + k) % 4] for k in range(1, 4)]
    assert sum(r.size_bytes for r in recs) == 4 * 3 * 1000
    assert all(r.collective == "all_to_all" and r.collective_bytes == 4000 for r in recs)
    # a follow-up all-to-all waits for every message into the rank
    ends = last_messages(recs)
    assert all(len(ends[r]) == 3 * 2 for r in ranks)
    sr = send_recv([1, 2], 1001, channels=2, conn_base=3)
    assert [(r.size_bytes, r.conn, r.collective, r.collective_bytes) for r in sr] == \
        [(501, 3, "sendrecv", 1001), (500, 4, "sendrecv", 1001)]
    for bad in (dict(channels=0), dict(channels=65), dict(conn_base=-2)):
        with pytest.raises(ConfigError):
            ring_all_reduce(RANKS, 10_000, **bad)
    with pytest.raises(ConfigError):
        ring_all_reduce([0, 1, 2], 5, channels=2)      # 5 B cannot fill 3 x 2 chunks


def test_compose_keeps_connections_and_collective_columns_when_renumbering():
    a = ring_all_reduce([0, 1, 2], 300, channels=2, conn_base=0)
    b = ring_all_gather([4, 5, 6], 30, conn_base=7)        # ids clash with a
    t = compose([a, b], connections="shared")              # separate connections: see below
    assert [r.id for r in t.records] == list(range(len(a) + len(b)))
    for old, new in zip(a + b, t.records):
        assert (new.conn, new.collective, new.collective_bytes, new.size_bytes, new.src) == \
            (old.conn, old.collective, old.collective_bytes, old.size_bytes, old.src)


def test_cli_channels_and_connection_base(tmp_path, runner):
    out = tmp_path / "ar.csv"
    t = collective_cli(runner, out, "--ranks", "0-3", "--size", "1MiB", "--channels", "2", "--repeat", "2")
    assert {r.conn for r in t.records} == {0, 1} and {r.collective for r in t.records} == {"allreduce"}
    assert {r.collective_bytes for r in t.records} == {2**20}
    t = collective_cli(runner, out, "--ranks", "0-3", "--size", "1MiB", "--conn-base", "-1")
    assert {r.conn for r in t.records} == {-1}


@pytest.mark.parametrize("n", [2, 5, 8])
def test_double_binary_tree_all_reduce_reduces_up_and_broadcasts_down(n, tmp_path):
    from fabricsim.traces.collectives import double_btree, tree_all_reduce
    ranks = list(range(10, 10 + n))
    for t in (0, 1):
        tree = double_btree(n, t)
        assert sum(u == -1 for u, _ch in tree.values()) == 1
        assert all(tree[c][0] == r for r, (_u, ch) in tree.items() for c in ch)
        assert all(len(ch) <= 2 for _u, ch in tree.values())
    if n % 2 == 0 and n > 2:              # the two trees' inner nodes differ (NCCL's point)
        inner = [{r for r, (_u, ch) in double_btree(n, t).items() if ch} for t in (0, 1)]
        assert inner[0] != inner[1]
    size = 3 * 1000 + 1
    recs = tree_all_reduce(ranks, size, channels=2, conn_base=0, chunk_bytes=500, start_id=100, deps=[7])
    by_id = {r.id: r for r in recs}
    # every tree edge carries the channel's part once up and once down, in chunks <= 500 B
    assert sum(r.size_bytes for r in recs) == 2 * (n - 1) * size and max(r.size_bytes for r in recs) <= 500
    assert all(r.collective == "allreduce" and r.collective_bytes == size for r in recs)
    for r in recs:
        for d in r.deps:
            if d in by_id:                # a message forwards what came into its sender, same channel and chunk
                assert by_id[d].dst == r.src and by_id[d].conn == r.conn and by_id[d].size_bytes == r.size_bytes
            else:
                assert d == 7
    g = nx.DiGraph((d, r.id) for r in recs for d in r.deps if d in by_id)
    assert nx.is_directed_acyclic_graph(g)
    # replayed on persistent connections, every message completes in dependency order
    p = write_trace(compose([sequence("allreduce", list(range(n)), 64 * 1024, algorithm="tree", channels=2,
                                      chunk_bytes=16 * 1024)]), tmp_path / "tree.parquet")
    res = fabricsim.run(_scenario(p))
    assert res.messages["completed"].all()
    m = res.messages.set_index("message_id")
    for r in read_trace(p).records:
        for d in r.deps:
            assert m.loc[r.id, "release_ps"] >= m.loc[d, "end_ps"]
    with pytest.raises(ConfigError):
        sequence("all_gather", [0, 1, 2], 900, algorithm="tree")


def test_compose_keeps_communicators_on_connections_of_their_own():
    """An EP all-to-all (conn 0 on every message) and a DP all-reduce on 2 channels (conn 0, 1)
    composed together: by default the all-reduce's connections are shifted past the MoE's, so no
    (conn, src, dst) is shared; ``connections="shared"`` keeps them (and then they collide)."""
    from fabricsim.traces.moe import MoeTraceConfig, generate_moe_trace
    moe = generate_moe_trace(MoeTraceConfig(model="custom", hidden_size=64, experts=8, top_k=2, ep_size=8,
                                            tokens_per_gpu=8, seed=1)).trace.records
    ar = sequence("allreduce", list(range(8)), 64 * 1024, channels=2)
    assert {r.conn for r in moe} == {0} and {r.conn for r in ar} == {0, 1}

    def keys(recs):
        return {(r.conn, r.src, r.dst) for r in recs}
    sep = compose([moe, ar]).records
    assert {r.conn for r in sep[len(moe):]} == {1, 2} and not keys(sep[:len(moe)]) & keys(sep[len(moe):])
    shared = compose([moe, ar], connections="shared").records
    assert keys(shared[:len(moe)]) & keys(shared[len(moe):])
    with pytest.raises(ConfigError):
        compose([moe], connections="mixed")
