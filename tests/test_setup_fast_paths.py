"""The set-up fast paths outside the engines' event loops (trace checks, dependency CSRs, the link
table, connection numbers): each is compared with the slower computation it replaces, written out
independently here, and the bad-trace errors stay those of the exact checks."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from fabricsim.errors import TraceError
from fabricsim.flows.links import LinkTable
from fabricsim.flows.replay import _connection_numbers
from fabricsim.flows.table import MessageTable, reverse_csr
from fabricsim.traces import Trace, TraceRecord, read_trace
from fabricsim.traces import schema
from fabricsim.traces.schema import check_trace


def _csr(lists):
    ptr = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum([len(x) for x in lists], out=ptr[1:])
    return ptr, np.array([x for d in lists for x in d], dtype=np.int64)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.lists(
    st.lists(st.integers(0, n - 1), max_size=5), min_size=n, max_size=n))))
def test_reverse_csr_is_the_stable_argsort_transpose(case):
    n, lists = case
    ptr, cols = _csr(lists)
    rptr, rows = reverse_csr(n, ptr, cols)
    # the definition: rows listing j, ascending, once per listing
    want = [[i for i in range(n) for x in lists[i] if x == j] for j in range(n)]
    assert [rows[rptr[j]:rptr[j + 1]].tolist() for j in range(n)] == want
    assert rptr.dtype == rows.dtype == np.int64


@pytest.mark.parametrize("ids", [[0, 1, 2, 3], [5, 1, 9, 3], [0, 1, 3, 2]])
def test_row_of_dense_and_sparse_ids(ids):
    t = MessageTable.from_columns(id=ids, src=[0] * 4, dst=[1] * 4, size_bytes=10,
                                  deps=[(), (ids[0],), (ids[0], ids[1]), (ids[2],)])
    row = {x: r for r, x in enumerate(ids)}
    q = [ids[3], ids[0], ids[2], ids[2]]
    assert t.row_of(q).tolist() == [row[x] for x in q]
    assert t.dep_rows().tolist() == [row[x] for x in t.dep_ids.tolist()]
    assert [t.dependents_of(r).tolist() for r in range(4)] == [[1, 2], [2], [3], []]
    for bad in (-1, 4, 10**9):
        if bad in ids:
            continue
        with pytest.raises(KeyError, match=f"message id {bad} is not in the table"):
            t.row_of([ids[0], bad])
    out = t.row_of(np.asarray(ids[:1]))
    out[0] = 99                       # a copy: the table's own ids are untouched
    assert t.id.tolist() == ids


def _dense_trace(deps):
    recs = [TraceRecord(i, 0, 1, 10, "a", "dispatch", deps=tuple(d)) for i, d in enumerate(deps)]
    return Trace(recs, "mem", [("row", i) for i in range(len(recs))])


def _outcome(trace):
    try:
        check_trace(trace, num_hosts=4)
    except TraceError as e:
        return str(e)
    return "ok"


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 7).flatmap(lambda n: st.lists(
    st.lists(st.integers(-2, n + 1), max_size=4), min_size=n, max_size=n)))
def test_dense_shortcut_gives_the_exact_checks_outcome(deps):
    # ids 0..n-1 with dependencies anywhere (earlier, later, itself, negative, unknown): the
    # shortcut for "every dependency on an earlier row" may only accept what the exact checks
    # accept, and every refusal is the exact checks' message
    fast = _outcome(_dense_trace(deps))
    saved = schema._earlier_deps_only
    schema._earlier_deps_only = lambda n, ptr, dep: False
    try:
        exact = _outcome(_dense_trace(deps))
    finally:
        schema._earlier_deps_only = saved
    assert fast == exact


@pytest.mark.parametrize("deps, want", [
    ([[], [0], [0, 1], [3]], "message 3 depends on itself"),
    ([[], [0], [-1], []], "message 2 depends on unknown message -1"),
    ([[], [0], [4], []], "message 2 depends on unknown message 4"),
    ([[2], [0], [1], []], "dependency cycle through messages"),
])
def test_dense_trace_errors(tmp_path, deps, want):
    n = len(deps)
    p = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": list(range(n)), "src": [0] * n, "dst": [1] * n, "size_bytes": [10] * n,
                             "op": ["a"] * n, "phase": ["dispatch"] * n,
                             "deps": pa.array(deps, type=pa.list_(pa.int64()))}), p)
    with pytest.raises(TraceError, match=want) as e:
        read_trace(p)
    assert str(e.value).startswith(str(p)) and "column deps" in str(e.value)


def test_forward_dependency_without_cycle_is_accepted():
    # a dependency on a later row is no error (the shortcut does not apply, Kahn decides)
    assert _outcome(_dense_trace([[2], [], [1]])) == "ok"


def test_parquet_strings_read_as_the_values(tmp_path):
    p = tmp_path / "s.parquet"
    pq.write_table(pa.table({"id": [0, 1, 2], "src": [0, 1, 0], "dst": [1, 0, 1], "size_bytes": [10] * 3,
                             "op": ["x", " y", "x"], "phase": ["dispatch", " combine ", "other"],
                             "collective": ["", "all_to_all", ""]}), p)
    t = read_trace(p)
    cols, _ptr, _dep = t.columns()
    assert cols["op"].tolist() == ["x", " y", "x"] and cols["op"].dtype == object
    assert cols["phase"].tolist() == ["dispatch", "combine", "other"]
    assert cols["collective"].tolist() == ["", "all_to_all", ""]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 3), st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=20),
       st.booleans())
def test_connection_numbers_follow_the_sorted_triples(rows, huge):
    conn = [c * (2**61 if huge and c > 0 else 1) for c, _s, _d in rows]
    t = MessageTable.from_columns(src=[s for _c, s, _d in rows], dst=[d for _c, _s, d in rows], size_bytes=1,
                                  conn=conn)
    keys = sorted({(c, s, d) for c, (_c, s, d) in zip(conn, rows) if c >= 0})
    want = [keys.index((c, s, d)) if c >= 0 else -1 for c, (_c, s, d) in zip(conn, rows)]
    assert _connection_numbers(t).tolist() == want


@pytest.mark.parametrize("preset", ["gb300_2048_4x200g"])
def test_link_table_follows_topology_links(preset):
    from fabricsim.topology import load_topology_file
    from pathlib import Path
    topo = load_topology_file(Path(__file__).resolve().parents[1] / "topologies" / f"{preset}.yaml")
    t = LinkTable(topo)
    want = [(a, b, d["rate_bps"], d["delay_ps"], d["kind"]) for u, v, _k, d in topo.links()
            for a, b in ((u, v), (v, u))]
    assert list(zip(t.src.tolist(), t.dst.tolist(), t.rate_bps.tolist(), t.delay_ps.tolist(), t.kind.tolist())) == want
    g = topo.graph
    lat = [g.nodes[b].get("switch_latency_ps", 0) if g.nodes[b]["type"] == "switch" else 0 for *_x, b in
           [(a, b) for a, b, *_r in want]]
    assert t.peer_latency_ps.tolist() == lat
    between: dict = {}
    for i, (a, b, *_r) in enumerate(want):
        between.setdefault((a, b), []).append(i)
    for (a, b), ids in list(between.items())[::97]:
        assert t.between(a, b).tolist() == ids
    assert t.between(0, 0).tolist() == [] and t.between(-1, 3).tolist() == [] and t.between(10**7, 1).tolist() == []


def _brute_fastest_hops(g, a, b):
    """Per hop, the largest rate and smallest latency (delay + the next switch's forwarding) of any
    link on any shortest host-to-host path that does not pass through another host."""
    import networkx as nx
    sw = g.subgraph([n for n, d in g.nodes(data=True) if d["type"] == "switch" or n in (a, b)])
    out = None
    for path in nx.all_shortest_paths(nx.Graph(sw), a, b):
        hops = []
        for x, y in zip(path, path[1:]):
            fwd = g.nodes[y].get("switch_latency_ps", 0) if g.nodes[y]["type"] == "switch" else 0
            es = g.get_edge_data(x, y).values()
            hops.append((max(e["rate_bps"] for e in es), min(e["delay_ps"] + fwd for e in es)))
        out = hops if out is None else [(max(r, r2), min(l, l2)) for (r, l), (r2, l2) in zip(out, hops)]
    return out


def test_fastest_hops_memos_match_every_shortest_path():
    # a fabric with parallel links of unequal rates and latencies, every pair asked in turn: the
    # memos per (level, next level) and per (level, attachments) give each pair its own figures
    from fabricsim.api import prepare
    _, sim = prepare({"name": "t", "topology": {"hosts_per_leaf": 3, "leaves": 3, "spines": 2, "links_per_spine": 2},
                      "traffic": {"pattern": "permutation", "message_size": "4KiB"}})
    g = sim.topology.graph
    for i, (u, v, k, d) in enumerate(sorted(g.edges(keys=True, data=True))):
        d["rate_bps"] = d["rate_bps"] // (1 + i % 3)
        d["delay_ps"] = d["delay_ps"] + 7 * (i % 5)
    from fabricsim.analysis.ideal import IdealModel
    model = IdealModel(sim)
    hosts = sim.topology.hosts
    for a in hosts[::3]:
        for b in hosts:
            if a != b:
                assert model.fastest_hops(a, b) == _brute_fastest_hops(g, a, b), (a, b)


@pytest.mark.parametrize("values, default, want", [
    (["", "", "all_to_all", "allreduce"], "", "all_to_all"),
    ([None, float("nan"), 0, "", 5, 3], 0, 5),
    (["", ""], "x", "x"),
    ([0, 0.0, 7.0, 7], -1, 7.0),
])
def test_first_given_value(values, default, want):
    from fabricsim.analysis.collectives import _first
    import pandas as pd
    got = _first(pd.Series(values, dtype=object), default)
    assert got == want and type(got) is type(want)
