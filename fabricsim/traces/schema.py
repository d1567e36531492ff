"""Trace format v2: one row per point-to-point message (documented in docs/traces.md).

v2 adds three optional columns to v1 (``conn``, ``collective``, ``collective_bytes``); a v1 file
reads as v2 with their defaults.

A :class:`Trace` is a list of :class:`TraceRecord` plus, for each record, where it came from
(a 1-based line for CSV / JSON Lines, a 0-based row index for Parquet) so every error names the
file, the row and the column. :func:`coerce_row` turns one raw row (strings from CSV, JSON
values, Arrow values) into a record; :func:`check_trace` does the checks across rows (unique
ids, known dependencies, no cycles, GPU ids within a topology).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from ..errors import TraceError

FORMAT_VERSION = 2
#: versions a reader accepts (v1 files have none of the v2 columns, which take their defaults)
READABLE_VERSIONS = (1, 2)
#: key of the format version in Parquet schema metadata
PARQUET_VERSION_KEY = b"fabricsim.trace.format_version"

PHASES = ("dispatch", "combine", "other")
#: collective kinds (column ``collective``; "" = not given). They set the bus-bandwidth factor of
#: nccl-tests (:mod:`fabricsim.analysis.collectives`).
COLLECTIVES = ("", "allreduce", "reduce_scatter", "all_gather", "all_to_all", "sendrecv", "broadcast")

#: column -> (kind, default); default ``REQUIRED`` means the column must be present
REQUIRED = object()
COLUMNS: dict[str, tuple[str, object]] = {
    "id": ("int", REQUIRED),
    "src": ("int", REQUIRED),
    "dst": ("int", REQUIRED),
    "size_bytes": ("int", REQUIRED),
    "op": ("str", REQUIRED),
    "phase": ("phase", REQUIRED),
    "layer": ("int", -1),
    "microbatch": ("int", -1),
    "deps": ("deps", ()),
    "gap_ps": ("int", 0),
    "start_ps": ("int", 0),
    "conn": ("int", -1),
    "collective": ("collective", ""),
    "collective_bytes": ("int", 0),
}
#: the largest integer a trace column holds (Parquet int64)
INT64_MAX = 2**63 - 1
REQUIRED_COLUMNS = tuple(c for c, (_, d) in COLUMNS.items() if d is REQUIRED)


@dataclass(frozen=True, slots=True)
class TraceRecord:
    id: int
    src: int
    dst: int
    size_bytes: int
    op: str
    phase: str
    layer: int = -1
    microbatch: int = -1
    deps: tuple[int, ...] = ()
    gap_ps: int = 0
    start_ps: int = 0
    #: logical connection (NCCL channel / EP-kernel queue pairs) the message is sent on; messages of
    #: one connection reuse its queue pairs and 5-tuples; -1: a connection of its own
    conn: int = -1
    #: collective kind of ``op`` (one of COLLECTIVES; "" = not given)
    collective: str = ""
    #: the collective's buffer size per rank as nccl-tests counts it (0 = not given)
    collective_bytes: int = 0

    def as_dict(self) -> dict:
        return {c: (list(self.deps) if c == "deps" else getattr(self, c)) for c in COLUMNS}


@dataclass
class Trace:
    """Records in file order; ``where[i]`` locates record i: ("line", n) or ("row", n)."""

    records: list[TraceRecord]
    source: str = "<trace>"
    where: list[tuple[str, int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.records)

    def error(self, i: int | None, column: str | None, message: str) -> TraceError:
        kind, n = self.where[i] if i is not None and i < len(self.where) else (None, None)
        return TraceError(message, source=self.source, column=column,
                          line=n if kind == "line" else None, row=n if kind == "row" else None)

    def to_messages(self, qps: int = 1):
        """The records as engine :class:`~fabricsim.traffic.message.Message` objects."""
        from ..traffic.message import Message
        return [Message(r.id, r.src, r.dst, r.size_bytes, r.start_ps, qps, r.deps, r.gap_ps,
                        {"op": r.op, "phase": r.phase, "layer": r.layer, "microbatch": r.microbatch,
                         "collective": r.collective, "collective_bytes": r.collective_bytes}, r.conn)
                for r in self.records]


def check_columns(columns, source: str, where: tuple[str, int] | None = None) -> None:
    """Raise if a required column is missing from the header / schema."""
    have = set(columns)
    for c in REQUIRED_COLUMNS:
        if c not in have:
            kind, n = where or (None, None)
            raise TraceError(f"missing column (required: {', '.join(REQUIRED_COLUMNS)}; "
                             f"have: {', '.join(sorted(have)) or 'none'})", source=source, column=c,
                             line=n if kind == "line" else None, row=n if kind == "row" else None)


def _missing(v) -> bool:
    return v is None or (isinstance(v, str) and v.strip() == "") or (isinstance(v, float) and math.isnan(v))


def _to_int(v):
    """An integer from a CSV string, JSON number or Arrow value; ValueError if not one."""
    if isinstance(v, bool):
        raise ValueError
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if v.is_integer():
            return int(v)
        raise ValueError
    if isinstance(v, str):
        return int(v.strip())
    raise ValueError


def _to_deps(v):
    if isinstance(v, str):
        s = v.strip()
        if s.startswith("["):
            v = json.loads(s)
        else:
            return tuple(_to_int(x) for x in s.split(";") if x.strip())
    if isinstance(v, (list, tuple)):
        return tuple(_to_int(x) for x in v)
    raise ValueError


def coerce_row(raw: dict, err) -> TraceRecord:
    """One record from a raw row (missing keys / empty values take defaults).

    ``err(column, message)`` returns the TraceError to raise for this row.
    """
    vals = {}
    for col, (kind, default) in COLUMNS.items():
        v = raw.get(col)
        if _missing(v) and not (kind == "deps" and isinstance(v, (list, tuple))):
            if default is REQUIRED:
                raise err(col, "missing value (required)")
            vals[col] = default
            continue
        if kind == "int":
            try:
                vals[col] = _to_int(v)
            except (ValueError, TypeError):
                raise err(col, f"expected an integer, got {v!r}") from None
            if abs(vals[col]) > INT64_MAX:
                raise err(col, f"got {vals[col]} (allowed: at most {INT64_MAX}, a 64-bit integer)")
        elif kind == "deps":
            try:
                vals[col] = _to_deps(v)
            except (ValueError, TypeError):
                raise err(col, f"expected message ids (a JSON list or ids separated by ';'), got {v!r}") from None
        elif kind == "phase":
            s = str(v).strip()
            if s not in PHASES:
                raise err(col, f"got {v!r} (allowed: {', '.join(PHASES)})")
            vals[col] = s
        elif kind == "collective":
            s = str(v).strip()
            if s not in COLLECTIVES:
                raise err(col, f"got {v!r} (allowed: {', '.join(c for c in COLLECTIVES if c)}, or empty)")
            vals[col] = s
        else:
            vals[col] = str(v)
    for col in ("id", "src", "dst", "gap_ps", "start_ps", "collective_bytes"):
        if vals[col] < 0:
            raise err(col, f"got {vals[col]} (allowed: >= 0)")
    if vals["conn"] < -1:
        raise err("conn", f"got {vals['conn']} (allowed: >= 0, or -1 for a connection of its own)")
    if vals["size_bytes"] <= 0:
        raise err("size_bytes", f"got {vals['size_bytes']} (allowed: > 0)")
    if vals["src"] == vals["dst"]:
        raise err("dst", f"src and dst are both {vals['src']} (allowed: dst != src)")
    return TraceRecord(**vals)


def check_trace(trace: Trace, num_hosts: int | None = None) -> Trace:
    """Checks across rows: ids unique, deps known and acyclic, GPU ids in ``0..num_hosts-1``."""
    if not trace.records:
        raise TraceError("the trace has no messages", source=trace.source)
    index: dict[int, int] = {}
    for i, r in enumerate(trace.records):
        if r.id in index:
            first = trace.where[index[r.id]] if index[r.id] < len(trace.where) else ("row", index[r.id])
            raise trace.error(i, "id", f"duplicate message id {r.id} (first at {first[0]} {first[1]})")
        index[r.id] = i
        if num_hosts is not None:
            for col in ("src", "dst"):
                g = getattr(r, col)
                if g >= num_hosts:
                    raise trace.error(i, col, f"GPU {g} is not in the topology (allowed: 0..{num_hosts - 1})")
    for i, r in enumerate(trace.records):
        for d in r.deps:
            if d == r.id:
                raise trace.error(i, "deps", f"message {r.id} depends on itself")
            if d not in index:
                raise trace.error(i, "deps", f"message {r.id} depends on unknown message {d} "
                                             "(allowed: ids in the id column)")
    import networkx as nx
    g = nx.DiGraph()
    g.add_nodes_from(index)
    g.add_edges_from((d, r.id) for r in trace.records for d in r.deps)
    if not nx.is_directed_acyclic_graph(g):
        cyc = [e[0] for e in nx.find_cycle(g)]
        first = min(cyc, key=index.__getitem__)
        raise trace.error(index[first], "deps", "dependency cycle through messages "
                          f"{' -> '.join(map(str, cyc + cyc[:1]))} (allowed: deps that form no cycle)")
    return trace
