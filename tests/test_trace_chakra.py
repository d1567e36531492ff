"""Chakra ET import (fabricsim/traces/chakra.py): tiny ET files built with mlc-chakra's own classes.

The importer reads ET files with its own schema (fabricsim/traces/et_format.py) and protobuf alone;
these tests write the files with mlc-chakra's generated classes and encoder, an independent
implementation of the format. .ci/run installs mlc-chakra (``pip install --no-deps mlc-chakra
protobuf``) for this; the skip only guards local machines without it.
"""
from __future__ import annotations

import sys
import warnings

import pytest

pytest.importorskip("chakra")
from chakra.schema.protobuf import et_def_pb2 as pb  # noqa: E402
from chakra.src.third_party.utils.protolib import encodeMessage  # noqa: E402
from click.testing import CliRunner  # noqa: E402

import fabricsim  # noqa: E402
from fabricsim.cli import main  # noqa: E402
from fabricsim.errors import ConfigError  # noqa: E402
from fabricsim.traces import read_trace  # noqa: E402
from fabricsim.traces.chakra import ChakraWarning, import_chakra  # noqa: E402


def node(nid, ntype, name="", deps=(), ctrl=(), dur_us=0, **attrs):
    n = pb.Node(id=nid, name=name or f"n{nid}", type=ntype, duration_micros=dur_us)
    n.data_deps.extend(deps)
    n.ctrl_deps.extend(ctrl)
    for k, v in attrs.items():
        n.attr.append(pb.AttributeProto(name=k, string_val=v) if isinstance(v, str)
                      else pb.AttributeProto(name=k, int64_val=v))
    return n


def write_ets(d, per_rank, prefix="et"):
    d.mkdir(parents=True, exist_ok=True)
    for r, nodes in enumerate(per_rank):
        with open(d / f"{prefix}.{r}.et", "wb") as fh:
            encodeMessage(fh, pb.GlobalMetadata(version="0.0.4"))
            for n in nodes:
                encodeMessage(fh, n)
    return d


def coll(nid, ctype, size, deps=(), **kw):
    return node(nid, pb.COMM_COLL_NODE, deps=deps, comm_type=ctype, comm_size=size, **kw)


def test_send_recv_with_compute_gap(tmp_path):
    d = write_ets(tmp_path / "et", [
        [node(1, pb.COMP_NODE, dur_us=7),
         node(2, pb.COMM_SEND_NODE, deps=[1], comm_dst=1, comm_size=4096)],
        [node(1, pb.COMM_RECV_NODE, comm_src=0, comm_size=4096),
         node(2, pb.COMP_NODE, deps=[1], dur_us=3)],
    ])
    imp = import_chakra(d)
    (r,) = imp.trace.records
    assert (r.src, r.dst, r.size_bytes, r.deps) == (0, 1, 4096, ())
    assert r.start_ps == 7_000_000  # compute from the start of rank 0: no comm dep, so start_ps
    assert imp.ranks == 2 and imp.node_types == {"COMM_RECV_NODE": 1, "COMM_SEND_NODE": 1, "COMP_NODE": 2}
    # compute between two comm nodes becomes gap_ps on the dependent one
    d2 = write_ets(tmp_path / "et2", [
        [node(1, pb.COMM_SEND_NODE, comm_dst=1, comm_size=100),
         node(2, pb.COMP_NODE, deps=[1], dur_us=5), node(3, pb.COMP_NODE, deps=[1], dur_us=2),
         node(4, pb.COMM_SEND_NODE, deps=[2], ctrl=[3], comm_dst=1, comm_size=200)],
        [node(1, pb.COMM_RECV_NODE, comm_src=0), node(2, pb.COMM_RECV_NODE, comm_src=0)],
    ])
    a, b = import_chakra(d2).trace.records
    assert b.deps == (a.id,) and b.gap_ps == 5_000_000 and b.size_bytes == 200


def test_all_to_all_split_uniformly_with_warning(tmp_path):
    S = 3 * 1000 + 2
    d = write_ets(tmp_path / "a2a", [[coll(1, pb.ALL_TO_ALL, S)] for _ in range(4)])
    with pytest.warns(ChakraWarning, match="ALL_TO_ALL"):
        imp = import_chakra(d)
    recs = imp.trace.records
    assert len(recs) == 12 and {(r.src, r.dst) for r in recs} == {(s, t) for s in range(4) for t in range(4) if s != t}
    for s in range(4):
        assert sorted(r.size_bytes for r in recs if r.src == s) == [1000, 1001, 1001]
    assert imp.warnings and "uniformly" in imp.warnings[0]
    # exact S/3 when divisible
    d2 = write_ets(tmp_path / "a2b", [[coll(1, pb.ALL_TO_ALL, 3000)] for _ in range(4)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert {r.size_bytes for r in import_chakra(d2).trace.records} == {1000}


def test_all_reduce_ring(tmp_path):
    n, S = 4, 4 * 2**16
    d = write_ets(tmp_path / "ar", [[coll(5, pb.ALL_REDUCE, S)] for _ in range(n)])
    imp = import_chakra(d)
    recs = imp.trace.records
    assert len(recs) == 2 * (n - 1) * n and imp.collectives == {"ALL_REDUCE": 1}
    for r in range(n):
        assert sum(m.size_bytes for m in recs if m.src == r) == 2 * (n - 1) * S // n
        assert {m.dst for m in recs if m.src == r} == {(r + 1) % n}
    assert not imp.warnings


def test_chain_of_collectives_keeps_order(tmp_path):
    n = 4
    d = write_ets(tmp_path / "chain", [
        [coll(1, pb.REDUCE_SCATTER, 4096), node(2, pb.COMP_NODE, deps=[1], dur_us=2),
         coll(3, pb.ALL_GATHER, 4096, deps=[2])] for _ in range(n)])
    imp = import_chakra(d)
    recs = imp.trace.records
    ops = sorted({r.op for r in recs}, key=lambda o: min(r.id for r in recs if r.op == o))
    assert [o.split(".")[0] for o in ops] == ["reduce_scatter", "all_gather"]
    first_ag = [r for r in recs if r.op == ops[1]][:n]
    rs_ids = {r.id for r in recs if r.op == ops[0]}
    for r in first_ag:
        assert r.deps and set(r.deps) <= rs_ids and r.gap_ps == 2_000_000
    # the dep is the last reduce-scatter message into the sending rank
    last_into = {}
    for r in recs:
        if r.op == ops[0]:
            last_into[r.dst] = r.id
    assert all(r.deps == (last_into[r.src],) for r in first_ag)


def test_replay_imported_trace(tmp_path):
    d = write_ets(tmp_path / "rp", [
        [node(1, pb.COMP_NODE, dur_us=1), coll(2, pb.ALL_REDUCE, 2**16, deps=[1]),
         node(3, pb.COMM_SEND_NODE, deps=[2], comm_dst=1 + r, comm_size=8192) if r < 3 else
         node(3, pb.COMM_RECV_NODE, deps=[2], comm_src=2)] +
        ([node(4, pb.COMM_RECV_NODE, comm_src=r - 1)] if 0 < r < 3 else [])
        for r in range(4)])
    out = tmp_path / "t.parquet"
    res = CliRunner().invoke(main, ["trace", "import-chakra", str(d), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "messages" in res.output and "4 ranks" in res.output
    t = read_trace(out)
    assert len(t) == 2 * 3 * 4 + 3
    scen = {"name": "chakra", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 2, "leaves": 2, "spines": 2,
                                           "host_link": {"rate": "400Gbps", "delay": "500ns"},
                                           "fabric_link": {"rate": "400Gbps", "delay": "500ns"}},
            "traffic": {"pattern": "trace", "path": str(out)}, "routing": {"policy": "ecmp"},
            "simulation": {"seed": 1, "time_limit": "20ms"}}
    r = fabricsim.run(scen)
    assert r.messages["completed"].all() and len(r.messages) == len(t)
    m = r.messages.set_index("message_id")
    for rec in t.records:
        for dep in rec.deps:
            assert m.loc[rec.id, "release_ps"] >= m.loc[dep, "end_ps"] + rec.gap_ps


def _fails(args):
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    return lines[0]


def test_malformed_input(tmp_path):
    out = str(tmp_path / "o.parquet")
    d = write_ets(tmp_path / "miss", [[coll(1, pb.ALL_REDUCE, 4096)] for _ in range(3)])
    (d / "et.1.et").unlink()
    assert "missing rank file for rank 1" in _fails(["trace", "import-chakra", str(d), "-o", out])
    d = write_ets(tmp_path / "unk", [[node(1, 99)], [node(1, pb.COMP_NODE)]])
    assert "unknown node type" in _fails(["trace", "import-chakra", str(d / "et."), "-o", out])
    d = write_ets(tmp_path / "nomatch", [[node(1, pb.COMM_SEND_NODE, comm_dst=1, comm_size=10)], []])
    assert "no matching COMM_RECV_NODE" in _fails(["trace", "import-chakra", str(d / "et.*.et"), "-o", out])
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "et.0.et").write_bytes(b"\x05\xff\xff\xff\xff\xff")
    _fails(["trace", "import-chakra", str(tmp_path / "junk"), "-o", out])
    assert "no Chakra ET files" in _fails(["trace", "import-chakra", str(tmp_path / "nothing"), "-o", out])


def test_missing_package_is_a_config_error(tmp_path, monkeypatch):
    d = write_ets(tmp_path / "x", [[coll(1, pb.ALL_REDUCE, 4096)] for _ in range(2)])
    monkeypatch.setitem(sys.modules, "google.protobuf.message", None)
    with pytest.raises(ConfigError, match="protobuf"):
        import_chakra(d)
    assert "pip install 'fabricsim[chakra]'" in _fails(
        ["trace", "import-chakra", str(d), "-o", str(tmp_path / "o.parquet")])


def test_own_schema_matches_mlc_chakra_field_for_field():
    # fabricsim's ET schema (et_format.py) against the classes Chakra generates from et_def.proto
    from fabricsim.traces.et_format import schema
    ours = schema()

    def _repeated(f):      # protobuf >= 6 says is_repeated; older ones only have label (3 = repeated)
        return f.is_repeated if hasattr(f, "is_repeated") else f.label == 3

    def fields(desc):
        return {f.name: (f.number, f.type, _repeated(f), f.message_type.name if f.message_type else None,
                         f.enum_type.name if f.enum_type else None,
                         f.containing_oneof.name if f.containing_oneof else None) for f in desc.fields}

    for name in ("GlobalMetadata", "Node", "AttributeProto"):
        mine, theirs = getattr(ours, name).DESCRIPTOR, getattr(pb, name).DESCRIPTOR
        assert fields(mine) == fields(theirs), name
        for f in theirs.fields:
            if f.message_type is not None:
                assert fields(mine.fields_by_name[f.name].message_type) == fields(f.message_type), f.name
    for enum in ("NodeType", "CollectiveCommType"):
        assert dict(getattr(ours, enum).items()) == dict(getattr(pb, enum).items())
