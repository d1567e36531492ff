"""The columnar analysis (build_result, IdealModel over columns, LowerBound on a MessageTable) gives
exactly the figures of the former per-message code, kept below as a reference (``OldLowerBound``,
``old_fct``, ``old_*``: the code of fabricsim/analysis before it was made columnar, verbatim but for
names), on varied small scenarios: dependencies with gaps, PXN relays, several planes and ports,
NVLink domains, collectives with ops, MoE traces, list and table inputs."""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import fabricsim
from fabricsim.analysis.bound import _NONE, Bound, LowerBound, _busiest_port_ps
from fabricsim.analysis.collectives import TAG_COLUMNS
from fabricsim.analysis.ideal import IdealModel, ser_ps
from fabricsim.api import prepare
from fabricsim.flows.table import MessageTable
from fabricsim.traces import write_trace
from fabricsim.traces.collectives import all_to_all, compose, last_messages, ring_all_reduce
from fabricsim.traces.moe import MoeTraceConfig, generate_moe_trace
from fabricsim.traces.schema import Trace, TraceRecord, check_trace


# --------------------------------------------------------------------------- the former code
def old_fct(model, msg):
    """IdealModel.fct before the memo: per message, on its own (src, dst)."""
    relay = model.paths.pxn_relay(msg.src, msg.dst) if model.pxn else None
    if relay is None:
        return model._train(msg.src, msg.dst, msg.size_bytes, msg.qps)
    return max(model._train(msg.src, relay, msg.size_bytes, 1),
               model._train(relay, msg.dst, msg.size_bytes, msg.qps))


class OldLowerBound:
    """fabricsim.analysis.bound.LowerBound before it was made columnar (per-message loop)."""

    def __init__(self, model: IdealModel, messages: Sequence):
        self.ids = np.array([m.id for m in messages], dtype=np.int64)
        self.index = {int(i): k for k, i in enumerate(self.ids)}
        self.start = np.array([m.start_ps for m in messages], dtype=np.int64)
        self.gap = np.array([m.gap_ps for m in messages], dtype=np.int64)
        self.dep_u, self.dep_v = self._dependency_edges(messages)
        groups: dict = {}               # (host, direction, eligible ports) -> group id
        rates: list[int] = []           # group id -> total rate of its ports (bit/s)
        pairs: dict = {}                # (a, b) -> hops and the two groups of a leg a -> b
        ends: dict = {}                 # (a, b, smallest packet) -> (sending tail, receiving head)

        def group(key, rate):
            gid = groups.get(key)
            if gid is None:
                gid = groups[key] = len(rates)
                rates.append(rate)
            return gid

        last_cache: dict = {}           # (switch, destination's attachments) -> last switches

        def receiver_links(s, b):
            """Links into host ``b`` that a packet handed to switch ``s`` may arrive by (every
            shortest path from ``s``); the switch part is shared by hosts of one attachment set."""
            key = (s, model.paths.attachments(b))
            last = last_cache.get(key)
            if last is None:
                seen, stack, found = {s}, [s], set()
                while stack:
                    x = stack.pop()
                    nh = model.paths.next_hops(x, b)
                    if nh == [b]:
                        found.add(x)
                        continue
                    for y in nh:
                        if y not in seen:
                            seen.add(y)
                            stack.append(y)
                last = last_cache[key] = found
            g = model.topo.graph
            return sum(len(g.get_edge_data(x, b)) for x in last)

        def pair(a, b):
            v = pairs.get((a, b))
            if v is None:
                out_ports, n_out, out_rate = model.ports(a, b)
                in_ports, n_in, in_rate = model.ports(b, a)
                g = model.topo.graph
                # receiver links reachable through each of the sender's eligible links, largest first
                reach = sorted((receiver_links(s, b) for s in out_ports for _ in g.get_edge_data(a, s)), reverse=True)

                def k_out(qps, n_out=n_out):
                    return model.split.parallel(qps, n_out)

                def k_in(qps, n_in=n_in, reach=reach):
                    # the receiver's links a message can arrive by: those its k sending links reach
                    # (a plane split limits the sender, not the receiver: a dual-homed receiver can
                    # take one queue pair over both its links)
                    return max(1, min(n_in, sum(reach[:k_out(qps)])))
                # the fastest single port of each side (hosts with ports of unequal rates)
                top_out = max(e["rate_bps"] for s in out_ports for e in g.get_edge_data(a, s).values())
                top_in = max(e["rate_bps"] for s in in_ports for e in g.get_edge_data(b, s).values())
                v = pairs[(a, b)] = (model.fastest_hops(a, b), group((a, "out", out_ports), out_rate),
                                     group((b, "in", in_ports), in_rate), (out_rate, top_out, k_out),
                                     (in_rate, top_in, k_in))
            return v

        def head_tail(a, b, hops, p):
            v = ends.get((a, b, p))
            if v is None:
                sers = [ser_ps(p, rate) if p else 0 for rate, _lat in hops]
                lats = [lat for _rate, lat in hops]
                v = ends[(a, b, p)] = (lats[0] + sum(sers[1:]) + sum(lats[1:]), sum(sers[:-1]) + sum(lats[:-1]))
            return v

        leg_msg, leg_group, leg_wire, leg_head, leg_tail = [], [], [], [], []
        min_fct = []
        for k, m in enumerate(messages):
            relay = model.paths.pxn_relay(m.src, m.dst) if model.pxn else None
            # a PXN leg moves several chunks at once, each its own queue pairs: any k of n ports
            route = ((m.src, m.dst, m.qps, True),) if relay is None else \
                ((m.src, relay, None, False), (relay, m.dst, None, False))
            phi = 0
            for a, b, qps, exact in route:
                hops, g_out, g_in, side_out, side_in = pair(a, b)
                if exact:
                    full, full_wire, partial = model.packets(a, b, m.size_bytes, m.qps)
                    counts: dict = {}
                    for size, cnt in ([(full_wire, full)] if full else []) + [(x, 1) for x in partial]:
                        counts[size] = counts.get(size, 0) + cnt
                    units = sorted(counts.items())
                    wire = sum(size * cnt for size, cnt in units)
                    sizes = [size for size, _cnt in units]
                else:
                    wire = _fewest_packets_wire(model, a, b, m.size_bytes)
                    units, sizes = [(wire, 1)], [0]
                p = sizes[0]                   # the smallest packet
                for c in sizes:
                    tail_out, head_in = head_tail(a, b, hops, c)
                    phi = max(phi, _busiest_port_ps(units, c, qps, side_out) + tail_out,
                              head_in + _busiest_port_ps(units, c, qps, side_in) + hops[-1][1])
                tail_out, head_in = head_tail(a, b, hops, p)
                leg_msg += (k, k)
                leg_group += (g_out, g_in)
                leg_wire += (wire, wire)
                leg_head += (0, head_in)
                leg_tail += (tail_out, hops[-1][1])
            min_fct.append(phi)
        #: per message, the shortest completion time any routing can give it alone (module docstring)
        self.shortest_fct_ps = np.array(min_fct, dtype=np.int64)
        self.group_rate = np.array(rates, dtype=np.float64)
        self.leg_msg = np.array(leg_msg, dtype=np.int64)
        self.leg_group = np.array(leg_group, dtype=np.int64)
        self.leg_wire = np.array(leg_wire, dtype=np.int64)
        self.leg_head = np.array(leg_head, dtype=np.int64)
        self.leg_tail = np.array(leg_tail, dtype=np.int64)

    def _dependency_edges(self, messages):
        """(u, v) message indices of every dependency ``u -> v`` on a message of the list."""
        counts = np.fromiter((len(m.deps) for m in messages), dtype=np.int64, count=len(messages))
        deps = np.fromiter(itertools.chain.from_iterable(m.deps for m in messages), dtype=np.int64,
                           count=int(counts.sum()))
        v = np.repeat(np.arange(len(messages), dtype=np.int64), counts)
        order = np.argsort(self.ids, kind="stable")
        pos = np.minimum(np.searchsorted(self.ids, deps, sorter=order), max(len(order) - 1, 0))
        u = order[pos] if len(order) else pos
        known = self.ids[u] == deps if len(order) else np.zeros(0, dtype=bool)
        return u[known], v[known]

    def of(self, t0_ps: int, message_ids=None) -> Bound:
        """The bound of the messages ``message_ids`` (all if None) released no earlier than
        ``t0_ps``; dependencies on messages outside the set count as satisfied at ``t0_ps``."""
        n = len(self.ids)
        if message_ids is None:
            sel = np.ones(n, dtype=bool)
        else:
            sel = np.zeros(n, dtype=bool)
            sel[[self.index[int(i)] for i in message_ids]] = True
        t0 = int(t0_ps)
        edges = self._edges(sel)
        es, ef, levels = self._forward(sel, t0, edges)
        q = self._tails(levels, edges)
        members = np.flatnonzero(sel)
        crit = int(ef[members].max()) - t0 if len(members) else 0
        port = self._port(sel, es, q) - t0 if len(members) else 0
        return Bound(t0, max(crit, port), crit, port, self.ids[members], es[members], ef[members])

    # ------------------------------------------------------------------ passes
    def _edges(self, sel):
        """(u, v, ptr): the dependency edges ``u -> v`` inside the selection, sorted by ``u``, and
        the offset of each node's first out-edge."""
        keep = sel[self.dep_u] & sel[self.dep_v]
        u, v = self.dep_u[keep], self.dep_v[keep]
        order = np.argsort(u, kind="stable")
        u, v = u[order], v[order]
        return u, v, np.searchsorted(u, np.arange(len(self.ids) + 1))

    @staticmethod
    def _out_edges(nodes, ptr):
        """Positions in (u, v) of the edges leaving ``nodes`` (CSR gather)."""
        lo, hi = ptr[nodes], ptr[nodes + 1]
        counts = hi - lo
        total = int(counts.sum())
        if not total:
            return np.empty(0, dtype=np.int64)
        offs = np.repeat(lo - np.cumsum(counts) + counts, counts)
        return offs + np.arange(total)

    def _forward(self, sel, t0, edges):
        """ES / EF of the selected messages, level by level (Kahn); the levels, for the tails."""
        n = len(self.ids)
        u, v, ptr = edges
        indeg = np.bincount(v, minlength=n)
        inmax = np.full(n, _NONE, dtype=np.int64)
        es = np.maximum(self.start, t0)
        ef = np.zeros(n, dtype=np.int64)
        frontier = np.flatnonzero(sel & (indeg == 0))
        levels = []
        while len(frontier):
            levels.append(frontier)
            dep = inmax[frontier] != _NONE
            fr = frontier[dep]
            es[fr] = np.maximum(es[fr], inmax[fr] + self.gap[fr])
            ef[frontier] = es[frontier] + self.shortest_fct_ps[frontier]
            pos = self._out_edges(frontier, ptr)
            if not len(pos):
                break
            uu, vv = u[pos], v[pos]
            np.maximum.at(inmax, vv, ef[uu])
            indeg -= np.bincount(vv, minlength=n)
            cand = np.unique(vv)
            frontier = cand[indeg[cand] == 0]
        return es, ef, levels

    def _tails(self, levels, edges):
        """q: the longest chain of dependents (gaps + FCTs) after each message, deepest level first."""
        u, v, ptr = edges
        q = np.zeros(len(self.ids), dtype=np.int64)
        for frontier in reversed(levels):
            pos = self._out_edges(frontier, ptr)
            if len(pos):
                uu, vv = u[pos], v[pos]
                np.maximum.at(q, uu, self.gap[vv] + self.shortest_fct_ps[vv] + q[vv])
        return q

    # the per-port-group formula is unchanged (the reference checks the restructuring around it)
    _port = LowerBound._port


def _fewest_packets_wire(model: IdealModel, src: int, dst: int, size: int) -> int:
    """Wire bytes of ``size`` payload bytes ``src -> dst`` cut into the fewest packets any chunking
    allows: one header per MTU (or per NVLink packet payload) of payload, rounded up."""
    unit, hdr, pp = model.framing(src, dst)
    per = unit if pp is None else pp
    return size + -(-size // per) * hdr


# --------------------------------------------------------------------------- scenarios
def dag_trace():
    """Dependencies with gaps and start times, two ops, over leaves."""
    rows = [(0, 0, 5, 70_000, (), 0, 0), (1, 1, 6, 9_000, (), 0, 2_000), (2, 2, 7, 300_000, (0,), 40_000, 0),
            (3, 5, 0, 64 * 1024, (0, 1), 7_000, 0), (4, 6, 2, 4_100, (2,), 0, 500_000),
            (10, 3, 4, 128 * 1024, (3, 4), 1_000, 0), (11, 4, 3, 1, (10,), 0, 0), (12, 7, 1, 33_333, (10, 2), 9, 0),
            (13, 0, 1, 65_536, (), 0, 0), (14, 1, 0, 4096 * 3 + 5, (13, 11), 123, 0)]
    return check_trace(Trace([TraceRecord(i, s_, d, n, f"op{i // 10}", "other", deps=tuple(deps), gap_ps=gap,
                                          start_ps=start) for i, s_, d, n, deps, gap, start in rows], "<test>"))


def collective_trace(ranks, size=192 * 1024):
    first = ring_all_reduce(ranks, size, op="ar")
    return compose([first, all_to_all(ranks, size // 2, op="a2a", start_id=len(first), deps=last_messages(first))])


def moe_trace(gpus, ep):
    cfg = MoeTraceConfig(model="gpt-oss-20b", ep_size=ep, gpus=gpus, gpus_per_node=8, tokens_per_gpu=24, layers=2,
                         seed=4)
    return generate_moe_trace(cfg).trace


CLUSTER2 = {"kind": "cluster", "domain": "hgx8", "nodes": 2, "nic": {"ports": 2, "rate": "400Gbps"}}
NVL36 = {"kind": "cluster", "domain": "nvl36", "racks": 2, "nic": {"ports": 2, "rate": "400Gbps"}}
LEAF_SPINE = {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 2}

CASES = {
    "dag_gaps_leaf_spine_qps2": (LEAF_SPINE, dag_trace, {"qps_per_message": 2}, {}, "spray"),
    "collective_pxn_hgx8": (CLUSTER2, lambda: collective_trace([0, 9, 2, 11, 4, 5]), {},
                            {"plane_split": "per_packet", "pxn": True, "pxn_chunk": "64KiB"}, "adaptive"),
    "collective_nvl36_per_flow": (NVL36, lambda: collective_trace([0, 37, 2, 39, 4, 5]), {"qps_per_message": 2},
                                  {"plane_split": "per_flow"}, "ecmp"),
    "moe_hgx8_pxn": (CLUSTER2, lambda: moe_trace(16, 16), {},
                     {"plane_split": "per_packet", "pxn": True}, "ecmp"),
    "moe_hgx8_failed_spine": ({**CLUSTER2, "failed": {"switches": ["p1.spine0"]}}, lambda: moe_trace(16, 16), {}, {},
                              "adaptive"),
}


def scenario(tmp_path, name, engine="packet"):
    topo, make, traffic, nic, routing = CASES[name]
    path = write_trace(make(), Path(tmp_path) / f"{name}.parquet")
    sc = {"name": name, "topology": topo, "traffic": {"pattern": "trace", "path": str(path), **traffic},
          "routing": {"policy": routing}, "simulation": {"seed": 5, "engine": engine, "time_limit": "50ms"}}
    if nic:
        sc["nic"] = nic
    return sc


def ops_of(messages):
    ops: dict = {}
    for m in messages:
        if m.tags.get("op") is not None:
            ops.setdefault(m.tags["op"], []).append(m)
    return ops


def same_bound(a, b):
    assert (a.t0_ps, a.duration_ps, a.critical_path_ps, a.port_ps) == (b.t0_ps, b.duration_ps, b.critical_path_ps,
                                                                         b.port_ps)
    assert np.array_equal(a.message_ids, b.message_ids)
    assert np.array_equal(a.earliest_start_ps, b.earliest_start_ps)
    assert np.array_equal(a.earliest_finish_ps, b.earliest_finish_ps)


# --------------------------------------------------------------------------- tests
@pytest.mark.parametrize("name", list(CASES))
def test_ideal_fct_and_bound_equal_the_former_code(tmp_path, name):
    _, sim = prepare(scenario(tmp_path, name))
    msgs = list(sim.messages)
    table = MessageTable.from_messages(sim.messages)
    ref = np.array([old_fct(IdealModel(sim), m) for m in msgs], dtype=np.int64)
    model = IdealModel(sim)
    assert np.array_equal(model.fct_rows(table), ref)
    assert [model.fct(m) for m in msgs] == ref.tolist()
    rows = np.arange(len(table))[::3]
    assert np.array_equal(model.fct_rows(table, rows), ref[rows])
    old = OldLowerBound(IdealModel(sim), msgs)
    for source in (table, msgs):
        new = LowerBound(IdealModel(sim), source)
        assert np.array_equal(new.shortest_fct_ps, old.shortest_fct_ps)
        t0 = min(m.start_ps for m in msgs)
        same_bound(new.of(t0), old.of(t0))
        same_bound(new.of(t0 + 12_345), old.of(t0 + 12_345))
        for op, ms in ops_of(msgs).items():
            ids = [m.id for m in ms]
            first = min(m.start_ps for m in ms)
            same_bound(new.of(first, ids), old.of(first, ids))
        half = [m.id for m in msgs[::2]]
        same_bound(new.of(t0, np.array(half)), old.of(t0, half))
    if model.pxn:
        assert any(model.paths.pxn_relay(m.src, m.dst) is not None for m in msgs)


def old_result_figures(sim, t0):
    """The former build_result's per-message figures: ideal FCT and tags by id, sender capacity,
    the longest base RTT, the pattern's and each op's bound."""
    model = IdealModel(sim)
    ideal = {m.id: old_fct(model, m) for m in sim.messages}
    tags = {m.id: m.tags for m in sim.messages}
    used: dict = {}
    for m in sim.messages:
        relay = model.paths.pxn_relay(m.src, m.dst) if model.pxn else None
        host = m.src if relay is None else relay
        used.setdefault(host, set()).update(model.ports(host, m.dst)[0])
    g = sim.topology.graph
    capacity = sum(d["rate_bps"] for h, sws in used.items() for s in sws for d in g.get_edge_data(h, s).values())
    window = max(model.base_rtt(a, b) for a, b in {(m.src, m.dst) for m in sim.messages})
    bound = OldLowerBound(model, sim.messages)
    return ideal, tags, capacity, window, bound


@pytest.mark.parametrize("name,engine", [(n, "packet") for n in CASES] + [("moe_hgx8_failed_spine", "flow"),
                                                                           ("dag_gaps_leaf_spine_qps2", "flow")])
def test_build_result_equals_the_former_code(tmp_path, name, engine):
    sc = scenario(tmp_path, name, engine)
    r = fabricsim.run(sc)
    _, sim = prepare(sc)
    s = r.summary
    t0 = s["pattern"]["first_release_ps"]
    ideal, tags, capacity, window, bound = old_result_figures(sim, t0)
    m = r.messages
    assert m["ideal_fct_ps"].astype("int64").tolist() == [ideal[i] for i in m["message_id"]]
    slow = m["fct_ps"].astype("Float64") / pd.array([ideal[i] for i in m["message_id"]], dtype="Int64").astype("Float64")
    pd.testing.assert_series_equal(m["slowdown"], slow, check_names=False)
    if any(tags.values()):
        for col in TAG_COLUMNS:
            assert m[col].tolist() == [tags[i].get(col) for i in m["message_id"]], col
            ref = pd.DataFrame({col: [tags[i].get(col) for i in m["message_id"]]})[col]
            assert m[col].dtype == ref.dtype, col
    assert s["effective_bandwidth"]["sender_capacity_bps"] == capacity
    if s["effective_bandwidth"]["goodput_while_all_active_min_window_ps"] is not None:
        assert s["effective_bandwidth"]["goodput_while_all_active_min_window_ps"] == window
    assert s["pattern"]["ideal_duration_ps"] == bound.of(t0).duration_ps
    c = r.collectives
    assert len(c)
    for op, first, got in zip(c["op"], c["first_release_ps"], c["ideal_time_ps"]):
        ids = m.loc[m["op"] == op, "message_id"]
        assert got == bound.of(int(first), ids).duration_ps, op


def test_ideal_model_is_cached_on_the_input(tmp_path):
    _, sim = prepare(scenario(tmp_path, "dag_gaps_leaf_spine_qps2"))
    assert sim.ideal_model() is sim.ideal_model()
    assert isinstance(sim.ideal_model(), IdealModel)


def test_dependencies_on_unknown_ids_are_left_out(tmp_path):
    """A list of messages depending on ids outside it (as an op's subset): dropped, as before."""
    from fabricsim.flows.message import Message
    _, sim = prepare(scenario(tmp_path, "dag_gaps_leaf_spine_qps2"))
    msgs = [Message(0, 0, 5, 70_000), Message(1, 5, 0, 9_000, deps=(0, 99), gap_ps=10),
            Message(7, 1, 6, 4096, deps=(1,), start_ps=3)]
    old, new = OldLowerBound(IdealModel(sim), msgs), LowerBound(IdealModel(sim), msgs)
    same_bound(new.of(0), old.of(0))
    same_bound(new.of(0, [1, 7]), old.of(0, [1, 7]))


@pytest.mark.parametrize("chunk", [1, 7, 100])
def test_the_passes_in_small_runs_of_edges_give_the_same_bound(tmp_path, monkeypatch, chunk):
    """The dependency passes gather at most ``CHUNK_EDGES`` edges at once; any cut is the same."""
    _, sim = prepare(scenario(tmp_path, "moe_hgx8_pxn"))
    msgs = list(sim.messages)
    old = OldLowerBound(IdealModel(sim), msgs)
    monkeypatch.setattr(LowerBound, "CHUNK_EDGES", chunk)
    new = LowerBound(IdealModel(sim), sim.messages)
    t0 = min(m.start_ps for m in msgs)
    same_bound(new.of(t0), old.of(t0))
    for op, ms in ops_of(msgs).items():
        ids = [m.id for m in ms]
        same_bound(new.of(min(m.start_ps for m in ms), ids), old.of(min(m.start_ps for m in ms), ids))
