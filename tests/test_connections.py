"""Persistent connections (docs/traces.md "Connections"): messages with ``conn >= 0`` reuse their
connection's queue pairs (same uids, same 5-tuples, hence the same ECMP paths), run one at a time
per connection, and the ECMP fluid placement numbers queue pairs exactly as the engine does."""
from __future__ import annotations

import pandas as pd
import pytest

import fabricsim
from fabricsim.analysis.maxmin import ecmp_placement
from fabricsim.analysis.recorder import Recorder
from fabricsim.api import prepare
from fabricsim.cli import main
from fabricsim.engine import ENGINES
from fabricsim.net.packet import DATA, ConnectionTable, queue_pair_tuple, split_bytes
from fabricsim.traces import write_trace
from fabricsim.traces.collectives import compose, sequence

# 2 leaves x 4 hosts, 4 spines; the ring alternates leaves, so every ring hop crosses a spine
RING = [0, 4, 1, 5, 2, 6, 3, 7]


def leaf_spine(traffic, routing="ecmp", seed=1, hosts_per_leaf=4, leaves=2, spines=4):
    return {"name": "conn", "topology": {"kind": "leaf_spine", "hosts_per_leaf": hosts_per_leaf, "leaves": leaves,
                                         "spines": spines, "buffer": {"size": "unbounded"}},
            "traffic": traffic, "routing": {"policy": routing}, "simulation": {"seed": seed, "time_limit": "20ms"}}


def traced_run(sc):
    """Run the packet engine with every routing choice recorded: returns (engine, outcome,
    {message id: {(switch id, port index), ...}} for data packets, {message id: (first, last) send
    ps of its data packets})."""
    _loaded, sim = prepare(sc)
    s = sim.scenario
    eng = ENGINES.get("packet")(sim, Recorder(s.outputs.latency_rel_error, s.outputs.timeseries_bin))
    paths: dict = {}
    first: dict = {}
    for sw in eng.switches.values():
        inner = sw.choose

        def choose(switch, ports, pkt, now, inner=inner):
            port = inner(switch, ports, pkt, now)
            if pkt.kind == DATA:
                mid = pkt.qp.msg.msg.id
                paths.setdefault(mid, set()).add((switch.id, port.index))
                a, b = first.get(mid, (pkt.t_tx, pkt.t_tx))
                first[mid] = (min(a, pkt.t_tx), max(b, pkt.t_tx))
            return port
        sw.choose = choose
    out = eng.run()
    assert out.status == "complete" and out.counters["conservation"]["holds"]
    return eng, out, paths, first


def ring_trace(tmp_path, conn_base, channels=1, size=256 * 1024, repeat=1, name="ar"):
    recs = sequence("allreduce", RING, size, repeat=repeat, channels=channels, conn_base=conn_base)
    return write_trace(compose([recs]), tmp_path / f"{name}.parquet"), recs


def test_connection_table_numbers_fresh_queue_pairs_as_before_and_reuses_connections():
    salt = 12345
    t = ConnectionTable(salt)
    # conn = -1: one fresh uid per non-empty part, in order (the numbering runs had before connections)
    got = [q for size in (10, 3, 7) for q in t.open(2, 5, size, 4)]
    assert [q[0] for q in got] == list(range(len(got))) == list(range(4 + 3 + 4))
    assert all(q[1:3] == queue_pair_tuple(salt, 2, 5, q[0]) for q in got)
    assert [q[3] for q in got[:4]] == split_bytes(10, 4)
    # conn >= 0: the first message opens all its queue pairs, later ones reuse them (same 5-tuples)
    a = t.open(2, 5, 2, 4, conn=0)
    assert len(a) == 2 and t.next_uid == 11 + 4            # 4 opened, 2 used by a 2-byte message
    b = t.open(2, 5, 4000, 1, conn=0)                        # its own qps do not matter any more
    assert [q[:3] for q in b[:2]] == [q[:3] for q in a] and len(b) == 4 and t.next_uid == 15
    assert [q[0] for q in t.open(5, 2, 10, 4, conn=0)] == [15, 16, 17, 18]   # the reverse direction is its own


def test_ring_on_persistent_connections_keeps_every_connection_on_one_path(tmp_path):
    """The ECMP choice at the source leaf, observed per data packet in the packet engine: with
    persistent connections every ring step of a connection takes the same spine; with fresh queue
    pairs per message (conn = -1) the spines change from step to step."""
    uplinks = {}
    for conn_base in (0, -1):
        path, recs = ring_trace(tmp_path, conn_base, repeat=2, name=f"ar{conn_base}")
        eng, _out, paths, _first = traced_run(leaf_spine({"pattern": "trace", "path": str(path)}))
        by_pair: dict = {}
        for r in recs:
            assert len(paths[r.id]) == 1                 # ECMP: one port per message at its one choice
            by_pair.setdefault((r.src, r.dst), set()).update(paths[r.id])
        uplinks[conn_base] = by_pair
        hashes = {}
        for st in eng.states.values():
            hashes.setdefault((st.msg.src, st.msg.dst), set()).update(q.hash for q in st.qps)
        if conn_base == 0:
            assert all(len(h) == 1 for h in hashes.values())      # one queue pair per connection
            assert eng.connections.next_uid == len(RING)
        else:
            assert eng.connections.next_uid == len(recs)
    steps = 2 * 2 * (len(RING) - 1)                      # every pair carries one message per step
    assert all(len(v) == 1 for v in uplinks[0].values()), uplinks[0]
    moved = sum(len(v) > 1 for v in uplinks[-1].values())
    assert moved >= len(RING) // 2, uplinks[-1]          # with 4 spines and 28 steps, nearly all move
    assert len(uplinks[0]) == len(RING) and steps == 28


def test_a_connection_runs_its_messages_one_at_a_time_in_posting_order(tmp_path):
    """Three messages 0 -> 4 posted together: on one connection each starts sending once the
    previous one has sent its last packet (as a queue pair works through its work requests), before
    that one has completed; its release time stays the posting time (the wait is in its completion
    time); on fresh queue pairs they run side by side."""
    path = tmp_path / "m.csv"
    ends = {}
    for conn in (3, -1):
        path.write_text(f"src,dst,size_bytes,conn\n0,4,65536,{conn}\n0,4,65536,{conn}\n0,4,65536,{conn}\n"
                        f"1,5,65536,{conn}\n")
        eng, _out, _paths, sent = traced_run(leaf_spine({"pattern": "csv", "path": str(path),
                                                         "qps_per_connection": 2}))
        st = eng.states
        assert all(st[i].release == 0 for i in range(4)) and all(st[i].done for i in range(4))
        ends[conn] = (sent, {i: st[i].end for i in range(4)})
        if conn >= 0:
            assert {len(st[i].qps) for i in range(4)} == {2}            # qps_per_connection
            assert [q.uid for q in st[0].qps] == [q.uid for q in st[2].qps]
    sent, end = ends[3]
    for a, b in ((0, 1), (1, 2)):
        assert sent[b][0] > sent[a][1]                  # after a's last packet left ...
        assert sent[b][0] < end[a]                      # ... not after a completed (pipelined)
    assert sent[3][0] < sent[0][1]                      # another connection is not held up
    sent, end = ends[-1]
    assert sent[1][0] < sent[0][1] and sent[2][0] < sent[0][1]


def test_ecmp_placement_opens_queue_pairs_as_the_engine_does(tmp_path):
    """The fluid reference's ECMP placement (analysis/maxmin.py) puts every queue pair on the spine
    the packet engine's packets take, connections included (several messages on one)."""
    rows = ["src,dst,size_bytes,conn"]
    for s in range(4):
        rows += [f"{s},{4 + (s + k // 2) % 4},{20000 + 100 * k},0" for k in range(4)]   # 2 messages per connection
    path = tmp_path / "m.csv"
    path.write_text("\n".join(rows) + "\n")
    sc = leaf_spine({"pattern": "csv", "path": str(path), "qps_per_connection": 3})
    _loaded, sim = prepare(sc)
    placed = ecmp_placement(sim)
    eng, _out, paths, _first = traced_run(sc)
    leaf_of = {h: sim.topology.edge_switch(h) for h in sim.topology.hosts}
    port = {(p.owner, p.peer): p.index for p in eng.ports}
    by_msg: dict = {}
    for m, _size, links in placed:
        a, b, _k = links[1]                              # leaf -> spine
        assert a == leaf_of[m.src]
        by_msg.setdefault(m.id, set()).add((a, port[(a, b)]))
    assert by_msg == {mid: {c for c in p if c[0] == leaf_of[eng.states[mid].msg.src]} for mid, p in paths.items()}
    assert len({q.uid for st in eng.states.values() for q in st.qps}) == 3 * 8      # 8 connections x 3 queue pairs


def test_nvlink_messages_on_a_connection_share_queue_pairs_and_run_in_order(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("src,dst,size_bytes,conn\n0,1,300000,0\n0,1,300000,0\n0,2,300000,-1\n")
    eng, _out, _paths, _first = traced_run({"name": "nv", "topology": {"kind": "hgx_node"},
                                            "traffic": {"pattern": "csv", "path": str(path)},
                                            "routing": {"policy": "spray"}, "simulation": {"seed": 2}})
    a, b = eng.states[0], eng.states[1]
    assert a.qps[0].nics[0].nvlink
    assert [q.uid for q in a.qps] == [q.uid for q in b.qps]
    assert b.end > a.end and b.delivered == b.size


def test_bad_connection_settings_exit_2_with_one_line(tmp_path, runner):
    m = tmp_path / "m.csv"
    m.write_text("src,dst,size_bytes,conn\n0,1,1000,-2\n")
    sc = tmp_path / "s.yaml"
    for traffic, field in ((f"{{pattern: csv, path: {m}}}", "conn"),
                           (f"{{pattern: csv, path: {m}, qps_per_connection: 0}}", "qps_per_connection"),
                           (f"{{pattern: trace, path: {m}, qps_per_connection: 4097}}", "qps_per_connection")):
        sc.write_text("name: bad\ntopology: {kind: leaf_spine, hosts_per_leaf: 2, leaves: 2, spines: 2}\n"
                      f"traffic: {traffic}\n")
        res = runner.invoke(main, ["run", str(sc), "-o", str(tmp_path / "out")])
        assert res.exit_code == 2, res.output
        err = res.stderr.strip()
        assert err.splitlines() == [err] and field in err, err


@pytest.mark.parametrize("conn", [0, -1])
def test_pxn_scale_out_leg_uses_the_relays_connection(tmp_path, conn):
    """With PXN a message's relay -> destination pieces open the queue pairs of connection
    (conn, relay, dst): with conn >= 0 every piece of every message shares them."""
    rows = ["src,dst,size_bytes,conn"] + [f"0,{36 + 1},{2**19},{conn}"] * 2
    path = tmp_path / "m.csv"
    path.write_text("\n".join(rows) + "\n")
    eng, _out, _paths, _first = traced_run({"name": "pxn", "topology": {"kind": "cluster", "domain": "nvl36",
                                                                        "racks": 2, "nic": {"ports": 2,
                                                                                            "rate": "400Gbps"}},
                                            "traffic": {"pattern": "csv", "path": str(path)},
                                            "routing": {"policy": "ecmp"},
                                            "nic": {"plane_split": "per_packet", "pxn": True,
                                                    "pxn_chunk": "128KiB"}})
    scale_out = [p for p in eng.pieces if p.final]
    assert len(scale_out) == 8
    uids = {q.uid for p in scale_out for q in p.qps}
    assert len(uids) == (1 if conn >= 0 else 8)
    assert eng.states[1].end > eng.states[0].end


def test_more_queue_pairs_per_connection_raise_ecmp_all_reduce_bus_bandwidth(tmp_path):
    """Ring all-reduce (8 ranks alternating 2 leaves, 2 spines x 2 links: 4 uplinks per leaf, 4
    flows up per leaf) on persistent connections: 16 queue pairs per connection spread each flow
    over the uplinks, 1 queue pair keeps ECMP's collisions for every step. nccl-tests bus bandwidth
    ``S / t x 2 (n - 1) / n``, mean over 3 seeds (benchmarks/bench_connections.py has the figure)."""
    ranks = [leaf * 4 + h for h in range(4) for leaf in range(2)]
    size = 2 * 2**20
    path = write_trace(compose([sequence("allreduce", ranks, size)]), tmp_path / "ar.parquet")

    def busbw(qps, seed, policy="ecmp"):
        sc = leaf_spine({"pattern": "trace", "path": str(path), "qps_per_connection": qps}, routing=policy,
                        seed=seed, spines=2)
        sc["topology"]["links_per_spine"] = 2
        m = fabricsim.run(sc).messages
        assert m["completed"].all()
        t_ps = m["end_ps"].max() - m["release_ps"].min()
        return size * 8 / (t_ps * 1e-12) * 2 * (len(ranks) - 1) / len(ranks)

    seeds = (1, 2, 3)
    one = sum(busbw(1, s) for s in seeds) / len(seeds)
    many = sum(busbw(16, s) for s in seeds) / len(seeds)
    assert many > 1.1 * one, (one, many)


def test_a_connection_completes_its_messages_in_order_under_losses(tmp_path):
    """Seven senders into one host, four messages each on one connection, shallow lossy buffers and
    go-back-N: losses make later messages' bytes arrive before earlier ones have recovered, yet, as a
    queue pair completes its work requests in order, every connection's messages end in posting
    order (a message whose bytes were all in first completes with its predecessor)."""
    rows = ["id,src,dst,size_bytes,conn"] + [f"{(s - 1) * 4 + k},{s},0,131072,0" for s in range(1, 8) for k in range(4)]
    path = tmp_path / "m.csv"
    path.write_text("\n".join(rows) + "\n")
    sc = leaf_spine({"pattern": "csv", "path": str(path), "qps_per_connection": 2}, spines=2)
    sc["topology"]["buffer"] = {"mode": "per_port", "size": "64KiB"}
    sc["receiver"] = {"model": "go_back_n"}
    sc["congestion_control"] = {"algorithm": "none"}
    eng, out, _paths, sent = traced_run(sc)
    assert out.counters.get("dropped_packets", 0) > 0
    st = eng.states
    waited = 0
    for s in range(1, 8):
        ids = [(s - 1) * 4 + k for k in range(4)]
        ends = [st[i].end for i in ids]
        assert ends == sorted(ends), (s, ends)
        waited += sum(st[i].deferred for i in ids)
    assert waited > 0          # some message had all its bytes before its predecessor completed


def test_a_persistent_queue_pair_keeps_its_rtt_estimators(tmp_path):
    """Adaptive retransmission: a persistent queue pair keeps one RTT estimator for its messages:
    the first message's ACKs (which return after it completed and the second started) feed the
    estimate the second message's timer uses; a fresh queue pair's stays cold (srtt = 0) until its
    own ACKs."""
    rows = ["id,src,dst,size_bytes,conn,deps", "0,0,4,65536,{c},", "1,0,4,65536,{c},0"]
    seen = {}
    for conn in (0, -1):
        path = tmp_path / f"m{conn}.csv"
        path.write_text("\n".join(r.format(c=conn) for r in rows) + "\n")
        sc = leaf_spine({"pattern": "csv", "path": str(path)})
        sc["receiver"] = {"model": "ddp", "rto_mode": "adaptive"}
        _loaded, sim = prepare(sc)
        s = sim.scenario
        eng = ENGINES.get("packet")(sim, Recorder(s.outputs.latency_rel_error, s.outputs.timeseries_bin))
        inner = eng._start
        starts = {}

        def start(t, st, inner=inner):
            inner(t, st)
            starts[st.msg.id] = st
        eng._start = start
        assert eng.run().status == "complete"
        seen[conn] = [q.srtt for q in starts[1].qps]
    assert seen[0][0] > 0                               # warm: fed by the first message's ACKs
    assert seen[-1] == [0]                              # fresh queue pair: no sample of its own yet


@pytest.mark.parametrize("seed", [1, 3])
def test_a_connection_whose_queue_pair_gives_up_flushes_the_messages_behind_it(tmp_path, seed):
    """A reliable-connection queue pair that hits its retry limit goes to the error state: that
    message fails with ``retry_exceeded`` when it gives up, and every later message on the
    connection (started, all in but waiting to complete, or not yet started) fails with
    ``connection_error`` then; none of them completes. Messages before it are not affected."""
    rows = ["id,src,dst,size_bytes,conn"] + [f"{(s - 1) * 4 + k},{s},0,131072,0" for s in range(1, 8) for k in range(4)]
    path = tmp_path / "m.csv"
    path.write_text("\n".join(rows) + "\n")
    sc = leaf_spine({"pattern": "csv", "path": str(path), "qps_per_connection": 2}, spines=2, seed=seed)
    sc["topology"]["buffer"] = {"mode": "per_port", "size": "64KiB"}
    sc["receiver"] = {"model": "go_back_n", "retry_limit": 1}
    sc["congestion_control"] = {"algorithm": "none"}
    res = fabricsim.run(sc)
    m = res.messages.set_index("message_id")
    assert res.summary["conservation"]["holds"]
    failed_conns = 0
    for s in range(1, 8):
        ids = [(s - 1) * 4 + k for k in range(4)]
        reasons = [m.loc[i, "incomplete_reason"] or "" for i in ids]
        if "retry_exceeded" not in reasons:
            assert all(m.loc[i, "completed"] for i in ids)
            continue
        failed_conns += 1
        first = reasons.index("retry_exceeded")
        assert all(m.loc[i, "completed"] for i in ids[:first])
        assert reasons[first + 1:] == ["connection_error"] * (3 - first)
        t_fail = m.loc[ids[first], "end_ps"]
        assert all(pd.isna(m.loc[i, "end_ps"]) or m.loc[i, "end_ps"] == t_fail for i in ids[first + 1:])
    assert failed_conns
