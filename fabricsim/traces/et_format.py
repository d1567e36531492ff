"""The Chakra execution-trace (ET) wire format, read with ``protobuf`` alone.

An ET file (MLCommons Chakra, ``schema/protobuf/et_def.proto``, package ``ChakraProtoMsg``) is a
stream of protobuf messages, each preceded by its length as a varint: one ``GlobalMetadata``,
then ``Node`` messages. This module declares that schema from its field numbers (the ones
et_def.proto gives; nothing is copied from Chakra's generated code) into a private descriptor
pool, so importing a Chakra trace needs only the ``protobuf`` package (``pip install
fabricsim[chakra]``), not mlc-chakra and its dependencies. tests/test_trace_chakra.py checks
it against files written by mlc-chakra's own classes.

>>> et = schema()
>>> n = et.Node(id=7, name="send", type=et.NodeType.COMM_SEND_NODE)
>>> import io; buf = io.BytesIO(); write_delimited(buf, n); _ = buf.seek(0)
>>> m = et.Node(); read_delimited(buf, m), m.id, et.NodeType.Name(m.type)
(True, 7, 'COMM_SEND_NODE')
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

__all__ = ["schema", "read_delimited", "write_delimited", "EtSchema"]

_PACKAGE = "ChakraProtoMsg"

# (protobuf scalar type name, AttributeProto field number of the value; the list is the next number)
_ATTR_SCALARS = [("double", 3), ("float", 5), ("int32", 7), ("int64", 9), ("uint32", 11), ("uint64", 13),
                 ("sint32", 15), ("sint64", 17), ("fixed32", 19), ("fixed64", 21), ("sfixed32", 23),
                 ("sfixed64", 25), ("bool", 27), ("string", 29), ("bytes", 31)]
_NODE_TYPES = ["INVALID_NODE", "METADATA_NODE", "MEM_LOAD_NODE", "MEM_STORE_NODE", "COMP_NODE",
               "COMM_SEND_NODE", "COMM_RECV_NODE", "COMM_COLL_NODE"]
_COLLECTIVES = ["ALL_REDUCE", "REDUCE", "ALL_GATHER", "GATHER", "SCATTER", "BROADCAST", "ALL_TO_ALL",
                "REDUCE_SCATTER", "REDUCE_SCATTER_BLOCK", "BARRIER"]


@dataclass(frozen=True)
class EtSchema:
    """The message classes and enums of et_def.proto that the importer reads."""

    GlobalMetadata: type
    Node: type
    AttributeProto: type
    NodeType: object              # EnumTypeWrapper: .COMM_SEND_NODE, .Name(v), .items()
    CollectiveCommType: object


def _list_name(scalar: str) -> str:
    return scalar[0].upper() + scalar[1:] + "List"


@lru_cache(maxsize=1)
def schema() -> EtSchema:
    """Build (once per process) the ET message classes in a private descriptor pool."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf.internal import enum_type_wrapper

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="fabricsim_chakra_et_def.proto", package=_PACKAGE,
                                             syntax="proto3")

    def add_field(msg, name, number, ftype, label=F.LABEL_OPTIONAL, type_name=None, oneof=None):
        f = msg.field.add(name=name, number=number, type=ftype, label=label)
        if type_name:
            f.type_name = f".{_PACKAGE}.{type_name}"
        if oneof is not None:
            f.oneof_index = oneof
        return f

    def scalar_type(s):
        return getattr(F, f"TYPE_{s.upper()}")

    for s, _ in _ATTR_SCALARS:
        lst = fdp.message_type.add(name=_list_name(s))
        f = add_field(lst, "values", 1, scalar_type(s), label=F.LABEL_REPEATED)
        if s not in ("string", "bytes"):
            f.options.packed = True          # proto3 packs repeated scalars
    attr = fdp.message_type.add(name="AttributeProto")
    add_field(attr, "name", 1, F.TYPE_STRING)
    add_field(attr, "doc_string", 2, F.TYPE_STRING)
    attr.oneof_decl.add(name="value")
    for s, number in _ATTR_SCALARS:
        add_field(attr, f"{s}_val", number, scalar_type(s), oneof=0)
        add_field(attr, f"{s}_list", number + 1, F.TYPE_MESSAGE, type_name=_list_name(s), oneof=0)
    meta = fdp.message_type.add(name="GlobalMetadata")
    add_field(meta, "version", 1, F.TYPE_STRING)
    add_field(meta, "attr", 2, F.TYPE_MESSAGE, label=F.LABEL_REPEATED, type_name="AttributeProto")
    for enum_name, values in (("NodeType", _NODE_TYPES), ("CollectiveCommType", _COLLECTIVES)):
        e = fdp.enum_type.add(name=enum_name)
        for i, v in enumerate(values):
            e.value.add(name=v, number=i)
    io_info = fdp.message_type.add(name="IOInfo")
    for i, name in enumerate(("values", "shapes", "types"), start=1):
        add_field(io_info, name, i, F.TYPE_STRING)
    node = fdp.message_type.add(name="Node")
    add_field(node, "id", 1, F.TYPE_UINT64)
    add_field(node, "name", 2, F.TYPE_STRING)
    add_field(node, "type", 3, F.TYPE_ENUM, type_name="NodeType")
    for name, number in (("ctrl_deps", 4), ("data_deps", 5)):
        add_field(node, name, number, F.TYPE_UINT64, label=F.LABEL_REPEATED).options.packed = True
    add_field(node, "start_time_micros", 6, F.TYPE_UINT64)
    add_field(node, "duration_micros", 7, F.TYPE_UINT64)
    add_field(node, "inputs", 8, F.TYPE_MESSAGE, type_name="IOInfo")
    add_field(node, "outputs", 9, F.TYPE_MESSAGE, type_name="IOInfo")
    add_field(node, "attr", 10, F.TYPE_MESSAGE, label=F.LABEL_REPEATED, type_name="AttributeProto")

    pool = descriptor_pool.DescriptorPool()      # private: never clashes with mlc-chakra's classes
    fd = pool.Add(fdp)
    try:
        from google.protobuf.message_factory import GetMessageClass
    except ImportError:  # pragma: no cover - protobuf < 4.22
        from google.protobuf.message_factory import MessageFactory
        GetMessageClass = MessageFactory(pool).GetPrototype
    desc = pool.FindFileByName(fdp.name) if fd is None else fd
    cls = {name: GetMessageClass(desc.message_types_by_name[name])
           for name in ("GlobalMetadata", "Node", "AttributeProto")}
    enums = {name: enum_type_wrapper.EnumTypeWrapper(desc.enum_types_by_name[name])
             for name in ("NodeType", "CollectiveCommType")}
    return EtSchema(**cls, **enums)


def _read_varint(fh) -> int | None:
    """A base-128 varint from ``fh``; None at end of file before its first byte."""
    shift = value = 0
    while True:
        b = fh.read(1)
        if not b:
            if shift == 0:
                return None
            raise ValueError("file ends inside a length prefix")
        value |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return value
        shift += 7
        if shift > 63:
            raise ValueError("length prefix longer than 10 bytes")


def read_delimited(fh, message) -> bool:
    """Parse the next length-prefixed message of ``fh`` into ``message``; False at the end.

    A zero length also ends the stream (as Chakra's reader treats it). A truncated message
    raises ``ValueError``; bytes that are not protobuf raise protobuf's ``DecodeError``.
    """
    size = _read_varint(fh)
    if not size:
        return False
    buf = fh.read(size)
    if len(buf) != size:
        raise ValueError(f"file ends inside a message ({len(buf)} of {size} bytes)")
    message.ParseFromString(buf)
    return True


def write_delimited(fh, message) -> None:
    """Write ``message`` preceded by its length as a varint (the ET stream layout)."""
    data = message.SerializeToString()
    n, out = len(data), bytearray()
    while True:
        bits = n & 0x7F
        n >>= 7
        out.append(bits | (0x80 if n else 0))
        if not n:
            break
    fh.write(bytes(out))
    fh.write(data)
