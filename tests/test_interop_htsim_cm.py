"""htsim connection matrices (fabricsim.interop.htsim_cm): import, export, round trip, bad input."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

import fabricsim
from fabricsim.errors import TraceError
from fabricsim.interop.cli import interop
from fabricsim.interop.htsim_cm import format_cm, read_cm, write_cm
from fabricsim.traces import read_trace, write_trace
from fabricsim.traces.collectives import compose, sequence
from fabricsim.traces.schema import Trace, TraceRecord

# htsim's documented format (sim/datacenter/connection_matrix.cpp load(); gen_allreduce.py writes
# the same shape): a header, connections with ids, a two-step chain and a barrier
HAND = """\
# hand-written, htsim format
Nodes 16
Connections 5
Triggers 2
Failures 1
0->5 id 1 start 0 size 2000000 send_done_trigger 1
3->5 id 2 start 1500000 size 2000000 recv_done_trigger 1 prio 3
5->9 id 3 trigger 1 size 4000000 send_done_trigger 2
9->12 id 4 trigger 2 size 1000
12->15 start 2.7 size 7
trigger id 1 barrier count 2
trigger id 2 oneshot
failure switch_type TOR switch_id 0 link_id 1
"""


def _cm(tmp_path, text, name="m.cm"):
    p = tmp_path / name
    p.write_text(text)
    return p


def _key(trace: Trace):
    return [(r.id, r.src, r.dst, r.size_bytes, r.start_ps, tuple(sorted(r.deps))) for r in trace.records]


def test_hand_written_matrix_in_htsim_format(tmp_path):
    got = read_cm(_cm(tmp_path, HAND))
    assert got.nodes == 16 and got.triggers == 2
    # ids: htsim flow id - 1; the 5th connection has no id: its 1-based position 5 -> 4
    # start: picoseconds as written (1500000 ps = 1.5 us), 2.7 truncated as htsim's integer simtime
    assert _key(got.trace) == [
        (0, 0, 5, 2000000, 0, ()),
        (1, 3, 5, 2000000, 1500000, ()),
        (2, 5, 9, 4000000, 0, (0, 1)),      # barrier count 2: both activators
        (3, 9, 12, 1000, 0, (2,)),          # oneshot: its one activator
        (4, 12, 15, 7, 2, ()),
    ]
    assert got.send_done_deps == 2 and got.recv_done_deps == 1
    assert got.ignored == {"prio": 1, "failure": 1}
    assert {r.op for r in got.trace.records} == {"m"} and {r.phase for r in got.trace.records} == {"other"}
    # the lines are those of the file
    assert got.trace.where[0] == ("line", 6) and got.trace.where[4] == ("line", 10)


def test_htsim_sample_without_ids_or_triggers(tmp_path):
    # sim/datacenter/connection_matrices/bidir.cm, verbatim
    got = read_cm(_cm(tmp_path, "Nodes 16\nConnections 2\n0->13 start 0 size 2000000\n13->0 start 0 size 2000000\n"))
    assert _key(got.trace) == [(0, 0, 13, 2000000, 0, ()), (1, 13, 0, 2000000, 0, ())]


def _collectives_trace():
    recs = sequence("allreduce", [0, 1, 2, 3], 64 * 1024, repeat=2)
    recs += sequence("all_to_all", [4, 5, 6, 7], 16 * 1024, repeat=2, start_id=len(recs))
    recs.append(TraceRecord(len(recs), 8, 9, 123, "x", "other", start_ps=(1 << 24) + 1))
    return compose([recs])


@pytest.mark.parametrize("done", ["send", "recv"])
def test_round_trip_export_then_import_gives_the_same_table(tmp_path, done):
    trace = _collectives_trace()
    info = write_cm(trace, tmp_path / "t.cm", nodes=16, done=done)
    text = (tmp_path / "t.cm").read_text()
    assert f"{done}_done_trigger" in text and ("recv" if done == "send" else "send") + "_done_trigger" not in text
    assert info.connections == len(trace) and info.nodes == 16
    assert info.inexact_starts == 1          # 2**24 + 1 ps: htsim's stof rounds it
    back = read_cm(tmp_path / "t.cm").trace
    assert _key(back) == _key(trace)


def test_round_trip_import_then_export_keeps_the_matrix(tmp_path):
    first = read_cm(_cm(tmp_path, HAND.replace(" 2.7 ", " 2 ")))
    text, _ = format_cm(first.trace, nodes=16)
    again = read_cm(_cm(tmp_path, text, "again.cm"))
    assert _key(again.trace) == _key(first.trace)
    # the 2-activator set became a barrier, the 1-activator set a oneshot
    assert "trigger id 1 barrier count 2" in text and "trigger id 2 oneshot" in text
    assert text.splitlines()[:3] == ["Nodes 16", "Connections 5", "Triggers 2"]


def test_export_format_of_a_chain():
    recs = [TraceRecord(0, 0, 1, 100, "a", "other", start_ps=5000),
            TraceRecord(1, 1, 2, 200, "a", "other", deps=(0,))]
    text, info = format_cm(Trace(recs), nodes=4)
    assert text == ("Nodes 4\nConnections 2\nTriggers 1\n"
                    "0->1 id 1 start 5000 size 100 send_done_trigger 1\n"
                    "1->2 id 2 trigger 1 size 200\n"
                    "trigger id 1 oneshot\n")
    assert info.inexact_starts == 0


def test_imported_matrix_replays_as_a_trace(tmp_path):
    got = read_cm(_cm(tmp_path, HAND))
    write_trace(got.trace, tmp_path / "t.csv")
    res = fabricsim.run({"name": "cm", "topology": {"hosts_per_leaf": 4, "leaves": 4, "spines": 2},
                         "traffic": {"pattern": "trace", "path": str(tmp_path / "t.csv")}})
    m = res.messages.set_index("message_id")
    assert res.summary["messages"]["completed"] == 5
    assert m.loc[2, "release_ps"] >= max(m.loc[0, "end_ps"], m.loc[1, "end_ps"])
    assert m.loc[1, "release_ps"] == 1500000


def test_multishot(tmp_path):
    one = "Nodes 4\nConnections 2\nTriggers 1\n0->1 id 1 start 0 size 10 send_done_trigger 7\n1->2 id 2 trigger 7 size 10\ntrigger id 7 multishot\n"
    assert _key(read_cm(_cm(tmp_path, one)).trace)[1][5] == (0,)
    two = ("Nodes 4\nConnections 4\nTriggers 1\n0->1 id 1 start 0 size 10 send_done_trigger 7\n"
           "0->2 id 2 start 0 size 10 send_done_trigger 7\n1->2 id 3 trigger 7 size 10\n2->3 id 4 trigger 7 size 10\n"
           "trigger id 7 multishot\n")
    with pytest.raises(TraceError, match=r"line 8: column type: multishot trigger 7 starts its 2 connections"):
        read_cm(_cm(tmp_path, two))
    got = read_cm(_cm(tmp_path, two), multishot="in-order")
    assert [k[5] for k in _key(got.trace)] == [(), (), (0,), (1,)]


BAD = [
    # (text, expected "line N: column F: ..." fragment)
    ("Nodes 4\nConnections 1\n0->x start 0 size 10\n", r"m\.cm: line 3: column dst: expected an integer, got 'x'"),
    ("Nodes 4\nConnections 1\n0->4 start 0 size 10\n", r"line 3: column dst: node 4 is not in the matrix \(allowed: 0\.\.3, Nodes 4\)"),
    ("Nodes 4\nConnections 1\n7->1 start 0 size 10\n", r"line 3: column src: node 7 is not in the matrix"),
    ("Nodes 4\nConnections 1\n0->1 start 0 size -5\n", r"line 3: column size: got -5 \(allowed: > 0\)"),
    ("Nodes 4\nConnections 1\n0->1 start 0 size 3000000000\n", r"line 3: column size: got 3000000000 \(allowed: at most 2147483647"),
    ("Nodes 4\nConnections 1\n0->1 start -1 size 10\n", r"line 3: column start: got -1 \(allowed: >= 0 picoseconds\)"),
    # found in review: an OverflowError traceback, and a hang on a huge exponent
    ("Nodes 4\nConnections 1\n0->1 start 1e19 size 10\n", r"line 3: column start: got 1e19 \(allowed: at most 9223372036854775807"),
    ("Nodes 4\nConnections 1\n0->1 start 1e99999999 size 10\n", r"line 3: column start: got 1e99999999 \(allowed: at most"),
    ("Nodes 4\nConnections 1\n0->1 start 0 size 10 speed 3\n", r"line 3: column speed: unknown token 'speed'"),
    ("Nodes 4\nConnections 1\n0->1 start 0\n", r"line 3: column size: missing"),
    ("Nodes 4\nConnections 1\n0->1 size 10\n", r"line 3: column start: no start method"),
    ("Nodes 4\nConnections 1\n0->1 start 0 size\n", r"line 3: column size: 'size' has no value"),
    ("Nodes 4\nConnections 2\n0->1 start 0 size 10\n", r"line 2: column Connections: the header says 2, the file has 1 connection line"),
    ("Connections 1\n0->1 start 0 size 10\n", r"line 2: column Nodes: no 'Nodes N' header"),
    ("Nodes 4\nConnections 1\nfoo 1\n", r"line 3: unknown line starting 'foo'"),
    ("Nodes 4\nConnections 1\n0->1 id 1 trigger 3 size 10\n", r"line 3: column trigger: trigger 3 is not defined"),
    ("Nodes 4\nConnections 1\nTriggers 1\n0->1 trigger 1 size 10\ntrigger id 1 oneshot\n",
     r"line 4: column id: a triggered connection needs 'id F'"),
    ("Nodes 4\nConnections 1\nTriggers 1\n0->1 id 1 start 0 trigger 1 size 10\ntrigger id 1 oneshot\n",
     r"line 4: column trigger: both 'start' and 'trigger' given"),
    ("Nodes 4\nConnections 3\nTriggers 1\n0->1 id 1 start 0 size 10 send_done_trigger 1\n"
     "0->2 id 2 start 0 size 10 send_done_trigger 1\n1->2 id 3 trigger 1 size 10\ntrigger id 1 oneshot\n",
     r"line 7: column type: oneshot trigger 1 is activated by 2 connections \(line 4, line 5\)"),
    ("Nodes 4\nConnections 2\nTriggers 1\n0->1 id 1 start 0 size 10 send_done_trigger 1\n"
     "1->2 id 2 trigger 1 size 10\ntrigger id 1 barrier count 2\n",
     r"line 6: column count: barrier trigger 1 waits for 2 activations but only 1"),
    ("Nodes 4\nConnections 1\nTriggers 1\n0->1 id 1 trigger 1 size 10\ntrigger id 1 oneshot\n",
     r"line 5: column id: trigger 1 is never activated"),
    ("Nodes 4\nConnections 2\n0->1 id 1 start 0 size 10\n1->2 id 1 start 0 size 10\n",
     r"line 4: column id: duplicate message id 0 \(first at line 3\)"),
]


@pytest.mark.parametrize("text,match", BAD)
def test_bad_input_names_file_line_and_field(tmp_path, text, match):
    with pytest.raises(TraceError, match=match) as ei:
        read_cm(_cm(tmp_path, text))
    assert ei.value.exit_code == 2
    assert "\n" not in str(ei.value)


def test_cli_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path):
    p = _cm(tmp_path, "Nodes 4\nConnections 1\n0->1 start 0 size -5\n")
    r = CliRunner().invoke(interop, ["cm-import", str(p), str(tmp_path / "out.csv")])
    assert r.exit_code == 2
    assert r.output.strip().count("\n") == 0
    assert r.output.startswith(f"error: {p}: line 3: column size: got -5 (allowed: > 0)")
    assert not (tmp_path / "out.csv").exists()


def test_cli_import_and_export(tmp_path):
    p = _cm(tmp_path, HAND)
    r = CliRunner().invoke(interop, ["cm-import", str(p), str(tmp_path / "t.parquet")])
    assert r.exit_code == 0, r.output
    assert "5 messages on 16 nodes, 2 triggers" in r.output and "prio x1" in r.output
    assert _key(read_trace(tmp_path / "t.parquet")) == _key(read_cm(p).trace)
    r = CliRunner().invoke(interop, ["cm-export", str(tmp_path / "t.parquet"), str(tmp_path / "back.cm"),
                                     "--nodes", "16", "--done", "recv"])
    assert r.exit_code == 0, r.output
    assert _key(read_cm(tmp_path / "back.cm").trace) == _key(read_cm(p).trace)


def test_cli_export_of_a_scenario_uses_its_hosts_and_messages(tmp_path):
    sc = tmp_path / "s.yaml"
    sc.write_text("name: s\ntopology: {hosts_per_leaf: 2, leaves: 3, spines: 2}\n"
                  "traffic: {pattern: permutation, message_size: 64KiB}\n")
    r = CliRunner().invoke(interop, ["cm-export", str(sc), str(tmp_path / "s.cm")])
    assert r.exit_code == 0, r.output
    got = read_cm(tmp_path / "s.cm")
    assert got.nodes == 6 and len(got.trace) == 6
    assert {r.size_bytes for r in got.trace.records} == {65536}
    r = CliRunner().invoke(interop, ["cm-export", str(sc), str(tmp_path / "x.cm"), "--topology", str(sc)])
    assert r.exit_code == 2 and "--topology applies to a trace input" in r.output
    tr = tmp_path / "t.csv"
    write_trace(read_cm(tmp_path / "s.cm").trace, tr)
    big = tmp_path / "big.yaml"
    big.write_text(sc.read_text().replace("leaves: 3", "leaves: 5"))
    r = CliRunner().invoke(interop, ["cm-export", str(tr), str(tmp_path / "y.cm"), "--topology", str(big)])
    assert r.exit_code == 0, r.output
    assert read_cm(tmp_path / "y.cm").nodes == 10       # the topology's GPUs, not the largest id + 1


def test_export_refusals(tmp_path):
    # message 0 is a dependency of two different sets: one connection activates one trigger
    recs = [TraceRecord(0, 0, 1, 10, "a", "other"), TraceRecord(1, 1, 2, 10, "a", "other"),
            TraceRecord(2, 2, 3, 10, "a", "other", deps=(0,)), TraceRecord(3, 3, 0, 10, "a", "other", deps=(0, 1))]
    with pytest.raises(TraceError, match=r"column deps: message 0: is a dependency of two different dependency sets"):
        format_cm(Trace(recs, "t.csv"), nodes=4)
    gap = [TraceRecord(0, 0, 1, 10, "a", "other"), TraceRecord(1, 1, 2, 10, "a", "other", deps=(0,), gap_ps=7)]
    with pytest.raises(TraceError, match=r"t.csv: column gap_ps: message 1: gap_ps 7 on a message with dependencies"):
        format_cm(Trace(gap, "t.csv"), nodes=4)
    text, info = format_cm(Trace(gap, "t.csv"), nodes=4, approximate=True)
    assert info.dropped_gap_ps == 1 and "trigger 1" in text
    with pytest.raises(TraceError, match=r"column dst: message 1: GPU 2 is not in the matrix \(allowed: 0\.\.1"):
        format_cm(Trace(gap, "t.csv"), nodes=2)
    r = CliRunner().invoke(interop, ["cm-export", str(write_trace(Trace(recs), tmp_path / "t.csv")),
                                     str(tmp_path / "t.cm")])
    assert r.exit_code == 2 and r.output.startswith("error: ") and not (tmp_path / "t.cm").exists()


# the output of htsim's sim/datacenter/connection_matrices/gen_allreduce.py g4.cm 4 4 4 1000 1 1
# (verbatim): 4 chains of 7 transfers, each step waiting (oneshot trigger) for the previous one
GEN_ALLREDUCE = """\
    Nodes 4
    Connections 28
    Triggers 24
    0->1 id 1 start 0 size 1000 send_done_trigger 1
    1->2 id 2 trigger 1 size 1000 send_done_trigger 2
    2->3 id 3 trigger 2 size 1000 send_done_trigger 3
    3->0 id 4 trigger 3 size 1000 send_done_trigger 4
    0->1 id 5 trigger 4 size 1000 send_done_trigger 5
    1->2 id 6 trigger 5 size 1000 send_done_trigger 6
    2->3 id 7 trigger 6 size 1000
    1->2 id 8 start 0 size 1000 send_done_trigger 7
    2->3 id 9 trigger 7 size 1000 send_done_trigger 8
    3->0 id 10 trigger 8 size 1000 send_done_trigger 9
    0->1 id 11 trigger 9 size 1000 send_done_trigger 10
    1->2 id 12 trigger 10 size 1000 send_done_trigger 11
    2->3 id 13 trigger 11 size 1000 send_done_trigger 12
    3->0 id 14 trigger 12 size 1000
    2->3 id 15 start 0 size 1000 send_done_trigger 13
    3->0 id 16 trigger 13 size 1000 send_done_trigger 14
    0->1 id 17 trigger 14 size 1000 send_done_trigger 15
    1->2 id 18 trigger 15 size 1000 send_done_trigger 16
    2->3 id 19 trigger 16 size 1000 send_done_trigger 17
    3->0 id 20 trigger 17 size 1000 send_done_trigger 18
    0->1 id 21 trigger 18 size 1000
    3->0 id 22 start 0 size 1000 send_done_trigger 19
    0->1 id 23 trigger 19 size 1000 send_done_trigger 20
    1->2 id 24 trigger 20 size 1000 send_done_trigger 21
    2->3 id 25 trigger 21 size 1000 send_done_trigger 22
    3->0 id 26 trigger 22 size 1000 send_done_trigger 23
    0->1 id 27 trigger 23 size 1000 send_done_trigger 24
    1->2 id 28 trigger 24 size 1000
    trigger id 1 oneshot
    trigger id 2 oneshot
    trigger id 3 oneshot
    trigger id 4 oneshot
    trigger id 5 oneshot
    trigger id 6 oneshot
    trigger id 7 oneshot
    trigger id 8 oneshot
    trigger id 9 oneshot
    trigger id 10 oneshot
    trigger id 11 oneshot
    trigger id 12 oneshot
    trigger id 13 oneshot
    trigger id 14 oneshot
    trigger id 15 oneshot
    trigger id 16 oneshot
    trigger id 17 oneshot
    trigger id 18 oneshot
    trigger id 19 oneshot
    trigger id 20 oneshot
    trigger id 21 oneshot
    trigger id 22 oneshot
    trigger id 23 oneshot
    trigger id 24 oneshot
"""


def test_htsim_gen_allreduce_output(tmp_path):
    got = read_cm(_cm(tmp_path, "\n".join(x[4:] for x in GEN_ALLREDUCE.splitlines()) + "\n"))
    assert got.nodes == 4 and got.triggers == 24 and got.send_done_deps == 24
    recs = got.trace.records
    assert [r.id for r in recs] == list(range(28))
    for chain in range(4):
        ids = list(range(7 * chain, 7 * chain + 7))
        assert recs[ids[0]].deps == () and recs[ids[0]].start_ps == 0
        assert [recs[i].deps for i in ids[1:]] == [(i - 1,) for i in ids[1:]]
        assert all(recs[i].dst == recs[i + 1].src for i in ids[:-1])    # around the ring
    text, info = format_cm(got.trace, nodes=4)
    assert info.triggers == 24
    assert _key(read_cm(_cm(tmp_path, text, "again.cm")).trace) == _key(got.trace)
