"""The Chakra ET wire format read with protobuf alone (fabricsim/traces/et_format.py)."""
from __future__ import annotations

import io

import pytest

from fabricsim.traces.et_format import read_delimited, schema, write_delimited


def test_every_attribute_kind_round_trips():
    et = schema()
    node = et.Node(id=2**40, name="a2a", type=et.NodeType.COMM_COLL_NODE, duration_micros=5)
    node.data_deps.extend([1, 2**33])
    values = {"int64_val": -3, "uint64_val": 2**63, "double_val": 0.25, "bool_val": True, "string_val": "pg0",
              "bytes_val": b"\x00\x01", "sint32_val": -7, "fixed64_val": 9}
    for kind, v in values.items():
        node.attr.append(et.AttributeProto(name=kind, **{kind: v}))
    lst = et.AttributeProto(name="ranks")
    lst.int64_list.values.extend([0, 1, 2])
    node.attr.append(lst)
    buf = io.BytesIO()
    write_delimited(buf, et.GlobalMetadata(version="0.0.4"))
    write_delimited(buf, node)
    buf.seek(0)
    meta, back = et.GlobalMetadata(), et.Node()
    assert read_delimited(buf, meta) and meta.version == "0.0.4"
    assert read_delimited(buf, back) and back == node
    assert not read_delimited(buf, et.Node())          # end of stream
    got = {a.name: getattr(a, a.WhichOneof("value")) for a in back.attr}
    assert {k: got[k] for k in values} == values and list(got["ranks"].values) == [0, 1, 2]


def test_a_message_longer_than_127_bytes_has_a_two_byte_prefix():
    et = schema()
    node = et.Node(name="x" * 200)
    buf = io.BytesIO()
    write_delimited(buf, node)
    raw = buf.getvalue()
    size = len(node.SerializeToString())
    assert raw[0] == (size & 0x7F) | 0x80 and raw[1] == size >> 7 and len(raw) == size + 2


def test_truncated_streams_are_errors():
    et = schema()
    buf = io.BytesIO()
    write_delimited(buf, et.Node(id=1, name="n"))
    raw = buf.getvalue()
    with pytest.raises(ValueError, match="inside a message"):
        read_delimited(io.BytesIO(raw[:-1]), et.Node())
    with pytest.raises(ValueError, match="length prefix"):
        read_delimited(io.BytesIO(b"\x80"), et.Node())
