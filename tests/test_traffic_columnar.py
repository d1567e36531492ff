"""Columnar traffic: pattern tables equal the list-of-Message results of the row-by-row code they
replaced (kept here as a tiny reference), the vectorised trace checks raise the same located
errors, and trace -> MessageTable equals trace -> list of Messages."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from fabricsim.config.traffic import AllToAllTraffic, IncastTraffic, PermutationTraffic, TraceTraffic
from fabricsim.engine.rng import RandomStreams
from fabricsim.errors import TraceError
from fabricsim.flows.message import Message
from fabricsim.flows.table import MessageTable
from fabricsim.topology import build_topology
from fabricsim.traces import Trace, TraceRecord, read_trace, write_trace
from fabricsim.traces.io import read_trace_table
from fabricsim.traces.schema import check_trace, topological_remainder
from fabricsim.traffic import generate
from fabricsim.traffic.patterns import _repair_permutation, _with_connection_qps


def topo(hosts_per_leaf=4, leaves=4):
    from fabricsim.config.topology import LeafSpineConfig as LS
    return build_topology(LS(kind="leaf_spine", hosts_per_leaf=hosts_per_leaf, leaves=leaves, spines=2))


# ----------------------------------------------------------------- reference (the replaced code)

def ref_permutation(cfg, t, streams):
    rng = streams.py("traffic.permutation")
    group = {h: t.edge_switch(h) for h in t.hosts}
    bad = (lambda i, j: group[i] == group[j]) if cfg.locality == "cross_leaf" else (lambda i, j: i == j)
    perm = list(t.hosts)
    rng.shuffle(perm)
    assert _repair_permutation(perm, bad, rng)      # (the repair itself is unchanged: shared)
    return [Message(i, h, perm[h], cfg.message_size, cfg.start, cfg.qps_per_message) for i, h in enumerate(t.hosts)]


def ref_all_to_all(cfg, t):
    H, out = t.num_hosts, []
    for s in t.hosts:
        for k in range(1, H):
            out.append(Message(len(out), s, (s + k) % H, cfg.message_size, cfg.start, cfg.qps_per_message))
    return out


def ref_incast(cfg, t, streams):
    others = [h for h in t.hosts if h != cfg.receiver]
    chosen = sorted(streams.py("traffic.incast").sample(others, cfg.senders))
    return [Message(i, s, cfg.receiver, cfg.message_size, cfg.start, cfg.qps_per_message) for i, s in enumerate(chosen)]


def same(table, msgs):
    assert isinstance(table, MessageTable)
    assert len(table) == len(msgs)
    assert list(table) == msgs
    assert [m.tags for m in table] == [m.tags for m in msgs]


@pytest.mark.parametrize("seed", [0, 1, 7, 12345])
@pytest.mark.parametrize("locality", ["any", "cross_leaf"])
def test_permutation_matches_reference(seed, locality):
    t = topo()
    cfg = PermutationTraffic(pattern="permutation", locality=locality, message_size="64KiB", qps_per_message=4)
    same(generate(cfg, t, RandomStreams(seed)), ref_permutation(cfg, t, RandomStreams(seed)))


def test_permutation_literal_seed_1():
    # written from the row-by-row code before the change
    t = topo()
    cfg = PermutationTraffic(pattern="permutation")
    got = generate(cfg, t, RandomStreams(1))
    assert got.dst.tolist() == [m.dst for m in ref_permutation(cfg, t, RandomStreams(1))]
    assert got.src.tolist() == list(range(16)) and got.id.tolist() == list(range(16))


@pytest.mark.parametrize("hosts_per_leaf,leaves", [(1, 2), (4, 4), (3, 5)])
def test_all_to_all_matches_reference(hosts_per_leaf, leaves):
    t = topo(hosts_per_leaf, leaves)
    cfg = AllToAllTraffic(pattern="all_to_all", message_size="1MiB", start="2us", qps_per_message=2)
    tab = generate(cfg, t, RandomStreams(3))
    same(tab, ref_all_to_all(cfg, t))
    # constant columns are stored once
    assert tab.size_bytes.strides == (0,) and tab.qps.strides == (0,)


@pytest.mark.parametrize("seed", [0, 5, 99])
def test_incast_matches_reference(seed):
    t = topo()
    cfg = IncastTraffic(pattern="incast", senders=7, receiver=3)
    same(generate(cfg, t, RandomStreams(seed)), ref_incast(cfg, t, RandomStreams(seed)))


# ----------------------------------------------------------------- table helpers

def test_with_connection_qps_columnar():
    msgs = [Message(0, 0, 1, 10, qps=3, conn=0), Message(1, 1, 0, 10, qps=3), Message(2, 0, 2, 10, qps=2, conn=4)]
    t = _with_connection_qps(msgs, 8)
    assert t.qps.tolist() == [8, 3, 8]
    assert _with_connection_qps(MessageTable.from_messages([msgs[1]]), 8).qps.tolist() == [3]


def test_concat_and_with_columns():
    a = MessageTable.from_columns(src=[0, 1], dst=[1, 0], size_bytes=5, deps=[(), (0,)], tags={"op": ["x", "y"]})
    b = MessageTable.from_columns(id=[7], src=[2], dst=[0], size_bytes=[9], deps=[(0, 1)])
    c = MessageTable.concat([a, b])
    assert [m.deps for m in c] == [(), (0,), (0, 1)] and c.id.tolist() == [0, 1, 7]
    assert c.tags["op"].tolist() == ["x", "y", None]
    d = c.with_columns(qps=4)
    assert d.qps.tolist() == [4, 4, 4] and d.src is c.src


# ----------------------------------------------------------------- traces

def recs():
    return [TraceRecord(0, 0, 1, 100, "a", "dispatch", 0, 0, (), 0, 0, conn=0, collective="all_to_all"),
            TraceRecord(1, 1, 2, 200, "a", "dispatch", 0, 1, (), 0, 5),
            TraceRecord(2, 2, 0, 300, "b", "combine", 1, -1, (0,), 10, 0, conn=3),
            TraceRecord(3, 3, 0, 400, "b", "combine", -1, -1, (1, 2), 20, 7, collective_bytes=64)]


@pytest.mark.parametrize("ext", ["parquet", "csv", "jsonl"])
def test_trace_table_equals_messages(tmp_path, ext):
    p = write_trace(Trace(recs(), "mem"), tmp_path / f"t.{ext}")
    msgs = read_trace(p).to_messages(3)
    tab = read_trace_table(p, num_hosts=4, qps=3)
    same(tab, msgs)
    assert read_trace(p).records == recs()


def test_trace_pattern_returns_table(tmp_path):
    p = write_trace(Trace(recs(), "mem"), tmp_path / "t.parquet")
    cfg = TraceTraffic(pattern="trace", path=str(p), qps_per_message=2, qps_per_connection=5)
    tab = generate(cfg, topo(), RandomStreams(0))
    assert isinstance(tab, MessageTable)
    assert tab.qps.tolist() == [5, 2, 5, 2]
    assert [m.deps for m in tab] == [(), (), (0,), (1, 2)]


def write_pq(tmp_path, rows, name="bad.parquet"):
    cols = {c: [r[i] for r in rows] for i, c in enumerate(["id", "src", "dst", "size_bytes", "op", "phase", "deps"])}
    p = tmp_path / name
    pq.write_table(pa.table({**{c: v for c, v in cols.items() if c != "deps"},
                             "deps": pa.array(cols["deps"], type=pa.list_(pa.int64()))}), p)
    return p


BAD = {
    "cycle": ([(0, 0, 1, 10, "a", "dispatch", [2]), (1, 1, 0, 10, "a", "combine", [0]),
               (2, 1, 3, 10, "a", "combine", [1])], "row 0: column deps: dependency cycle through messages"),
    "unknown_dep": ([(0, 0, 1, 10, "a", "dispatch", []), (1, 1, 0, 10, "a", "combine", [0, 9])],
                    "row 1: column deps: message 1 depends on unknown message 9 (allowed: ids in the id column)"),
    "self_dep": ([(0, 0, 1, 10, "a", "dispatch", [0])], "row 0: column deps: message 0 depends on itself"),
    "gpu": ([(0, 0, 1, 10, "a", "dispatch", []), (1, 1, 4, 10, "a", "dispatch", [])],
            "row 1: column dst: GPU 4 is not in the topology (allowed: 0..3)"),
    "negative_size": ([(0, 0, 1, 10, "a", "dispatch", []), (1, 0, 1, -4, "a", "dispatch", [])],
                      "row 1: column size_bytes: got -4 (allowed: > 0)"),
    "duplicate": ([(0, 0, 1, 10, "a", "dispatch", []), (0, 1, 0, 10, "a", "dispatch", [])],
                  "row 1: column id: duplicate message id 0 (first at row 0)"),
    "phase": ([(0, 0, 1, 10, "a", "dispatch", []), (1, 1, 0, 10, "a", "bogus", [])],
              "row 1: column phase: got 'bogus' (allowed: dispatch, combine, other)"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_vectorised_checks_same_errors(tmp_path, case):
    rows, want = BAD[case]
    p = write_pq(tmp_path, rows)
    with pytest.raises(TraceError) as e:
        read_trace(p, num_hosts=4)
    assert want in str(e.value), str(e.value)
    # the columnar path is taken for such files, and the row-by-row record path gives the same text
    t = Trace([TraceRecord(r[0], r[1], r[2], max(r[3], 1), r[4], "dispatch", deps=tuple(r[6])) for r in rows],
              str(p), [("row", i) for i in range(len(rows))])
    if case in ("cycle", "unknown_dep", "self_dep", "gpu", "duplicate"):
        with pytest.raises(TraceError) as e2:
            check_trace(t, num_hosts=4)
        assert str(e2.value) == str(e.value)


def test_cycle_message_names_the_cycle(tmp_path):
    p = write_pq(tmp_path, BAD["cycle"][0])
    with pytest.raises(TraceError, match=r"dependency cycle through messages 0 -> 1 -> 2 -> 0 \(allowed"):
        read_trace(p)


def test_kahn_remainder():
    # 0 <- 1 <- 2, 3 <-> 4 (cycle), 5 depends on 4
    ptr = np.array([0, 0, 1, 2, 3, 4, 5])
    dep = np.array([0, 1, 4, 3, 4])
    assert topological_remainder(6, ptr, dep).tolist() == [False, False, False, True, True, True]
    assert not topological_remainder(3, np.array([0, 0, 1, 2]), np.array([0, 1])).any()


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 7).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=12))),
    st.randoms(use_true_random=False))
def test_acyclicity_check_agrees_with_networkx(graph, rnd):
    # dependencies on earlier rows only (the shortcut) or in any direction (Kahn), ids shuffled
    # or in order: the trace is refused exactly when networkx finds a cycle
    import networkx as nx
    n, edges = graph
    deps = {i: sorted({a for a, b in edges if b == i and a != i}) for i in range(n)}
    ids = list(range(n))
    if rnd.random() < 0.5:
        rnd.shuffle(ids)
    recs_ = [TraceRecord(ids[i], 0, 1, 10, "a", "dispatch", deps=tuple(ids[a] for a in deps[i])) for i in range(n)]
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from((a, i) for i in range(n) for a in deps[i])
    t = Trace(recs_, "mem", [("row", i) for i in range(n)])
    if nx.is_directed_acyclic_graph(g):
        check_trace(t, num_hosts=4)
    else:
        with pytest.raises(TraceError, match="dependency cycle"):
            check_trace(t, num_hosts=4)


def test_iterating_a_message_table_gives_its_rows():
    """``iter(table)`` (read a chunk of 65,536 rows at a time) gives exactly ``table[i]`` for each
    row: ids, sizes, times, dependencies (empty, one, several, across a chunk's edge) and tags (a
    row without a tag has none in its dict; key order kept)."""
    import numpy as np

    from fabricsim.flows.table import MessageTable
    n = 70_000
    r = np.random.default_rng(3)
    lens = r.integers(0, 4, n)
    lens[0] = 0
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    ids = np.concatenate([r.integers(0, max(i, 1), k) for i, k in enumerate(lens)]).astype(np.int64)
    layer = np.array([None if i % 3 else i % 7 for i in range(n)], dtype=object)
    op = np.array(["x" if i % 5 == 0 else None for i in range(n)], dtype=object)
    t = MessageTable.from_arrays(dep_ptr=ptr, dep_ids=ids, tags={"layer": layer, "op": op},
                                 id=np.arange(n), src=r.integers(0, 64, n), dst=r.integers(0, 64, n),
                                 size_bytes=r.integers(0, 1 << 40, n), start_ps=r.integers(0, 10**12, n),
                                 qps=r.integers(1, 5, n), gap_ps=r.integers(0, 1000, n), conn=r.integers(-1, 3, n))
    rows = list(t)
    assert len(rows) == n
    for i in [*range(50), *range(65_530, 65_545), n - 1, *r.integers(0, n, 200).tolist()]:
        a, b = rows[i], t[i]
        assert a == b and a.deps == b.deps and list(a.tags) == list(b.tags)
        assert all(type(getattr(a, f)) is int for f in ("id", "src", "dst", "size_bytes", "start_ps", "qps",
                                                         "gap_ps", "conn"))
    assert sum(len(m.deps) for m in rows) == len(ids)
