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
from dataclasses import dataclass

from ..errors import TraceError
from ..units import INT64_MAX as _INT64_MAX

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
INT64_MAX = _INT64_MAX
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


#: integer columns of a trace, and string columns (object arrays in a columnar trace)
INT_COLUMNS = tuple(c for c, (k, _) in COLUMNS.items() if k == "int")
STR_COLUMNS = tuple(c for c, (k, _) in COLUMNS.items() if k in ("str", "phase", "collective"))


class Trace:
    """Records in file order; ``where[i]`` locates record i: ("line", n) or ("row", n).

    A trace is held either as a list of :class:`TraceRecord` (``Trace(records, source, where)``)
    or as columns (``Trace.from_columns``: numpy arrays, deps in CSR form) — readers of large
    files and generators use columns, and ``records`` / ``where`` are then built on first use.
    ``columns()`` and ``to_table()`` give the columnar form either way.
    """

    def __init__(self, records: list | None = None, source: str = "<trace>", where: list | None = None):
        self._records = records if records is not None else []
        self.source = source
        self._where = where if where is not None else []
        self._cols = None       # (dict column -> array, dep_ptr, dep_ids)
        self._kind = "row"      # columnar: positions are rows ("row") or lines ("line")
        self._pos = None        # columnar: position of each record (None: its row index)

    @classmethod
    def from_columns(cls, columns: dict, dep_ptr, dep_ids, source: str = "<trace>", kind: str = "row",
                     positions=None) -> "Trace":
        """A columnar trace: ``columns`` maps every column of COLUMNS but ``deps`` to an array
        (int64 for integer columns, object arrays of str for the others); record i depends on
        ``dep_ids[dep_ptr[i]:dep_ptr[i + 1]]``; ``positions``: its line / row (default: i)."""
        import numpy as np
        t = cls(None, source, None)
        t._records = t._where = None
        t._cols = ({c: columns[c] for c in COLUMNS if c != "deps"}, np.asarray(dep_ptr, dtype=np.int64),
                   np.asarray(dep_ids, dtype=np.int64))
        t._kind, t._pos = kind, positions
        return t

    @property
    def columnar(self) -> bool:
        return self._records is None

    @property
    def records(self) -> list[TraceRecord]:
        if self._records is None:
            cols, ptr, dep = self._cols
            lists = [cols[c].tolist() for c in COLUMNS if c != "deps"]
            dl = dep.tolist()
            bounds = ptr.tolist()
            deps = [tuple(dl[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
            names = [c for c in COLUMNS if c != "deps"]
            k = names.index("microbatch") + 1   # deps come after microbatch in TraceRecord
            self._records = [TraceRecord(*row[:k], d, *row[k:]) for row, d in zip(zip(*lists), deps)]
        return self._records

    @records.setter
    def records(self, value):
        self._records, self._cols = value, None

    @property
    def where(self) -> list[tuple[str, int]]:
        if self._where is None:
            n = len(self)
            pos = range(n) if self._pos is None else self._pos.tolist()
            self._where = [(self._kind, int(p)) for p in pos]
        return self._where

    @where.setter
    def where(self, value):
        self._where = value

    def __len__(self) -> int:
        return len(self._records) if self._records is not None else len(self._cols[1]) - 1

    def __eq__(self, other):
        if not isinstance(other, Trace):
            return NotImplemented
        return self.source == other.source and self.records == other.records and self.where == other.where

    def __repr__(self) -> str:
        return f"<Trace {self.source}: {len(self)} records>"

    def _where_of(self, i: int):
        if self._records is None:
            if i >= len(self):
                return None
            return (self._kind, int(i if self._pos is None else self._pos[i]))
        return self._where[i] if i < len(self._where) else None

    def error(self, i: int | None, column: str | None, message: str) -> TraceError:
        kind, n = (self._where_of(i) or (None, None)) if i is not None else (None, None)
        return TraceError(message, source=self.source, column=column,
                          line=n if kind == "line" else None, row=n if kind == "row" else None)

    def columns(self):
        """``(columns, dep_ptr, dep_ids)``: every column but deps as an array (int64 / object),
        deps in CSR form (built from the records, once, for a record-backed trace)."""
        if self._cols is None or self._records is not None and self._cols[1].shape[0] != len(self._records) + 1:
            import numpy as np
            recs = self._records
            n = len(recs)
            cols = {}
            for c in COLUMNS:
                if c == "deps":
                    continue
                if c in INT_COLUMNS:
                    cols[c] = np.fromiter((getattr(r, c) for r in recs), dtype=np.int64, count=n)
                else:
                    a = np.empty(n, dtype=object)
                    a[:] = [getattr(r, c) for r in recs]
                    cols[c] = a
            lens = np.fromiter((len(r.deps) for r in recs), dtype=np.int64, count=n)
            ptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(lens, out=ptr[1:])
            dep = np.fromiter((d for r in recs for d in r.deps), dtype=np.int64, count=int(ptr[-1]))
            self._cols = (cols, ptr, dep)
        return self._cols

    def to_messages(self, qps: int = 1):
        """The records as engine :class:`~fabricsim.traffic.message.Message` objects."""
        from ..traffic.message import Message
        return [Message(r.id, r.src, r.dst, r.size_bytes, r.start_ps, qps, r.deps, r.gap_ps,
                        {"op": r.op, "phase": r.phase, "layer": r.layer, "microbatch": r.microbatch,
                         "collective": r.collective, "collective_bytes": r.collective_bytes}, r.conn)
                for r in self.records]

    def to_table(self, qps: int = 1):
        """The trace as a :class:`~fabricsim.flows.table.MessageTable` (the same messages as
        :meth:`to_messages`, built from columns: no per-message object)."""
        from ..flows.table import MessageTable
        cols, ptr, dep = self.columns()
        return MessageTable.from_arrays(
            id=cols["id"], src=cols["src"], dst=cols["dst"], size_bytes=cols["size_bytes"],
            start_ps=cols["start_ps"], qps=qps, gap_ps=cols["gap_ps"], conn=cols["conn"],
            dep_ptr=ptr, dep_ids=dep,
            tags={k: cols[k] for k in ("op", "phase", "layer", "microbatch", "collective", "collective_bytes")})


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


def _gather_ranges(ptr, rows):
    """Concatenated index ranges ``ptr[r]:ptr[r + 1]`` for ``rows`` (vectorised)."""
    import numpy as np
    starts, ends = ptr[rows], ptr[rows + 1]
    lens = ends - starts
    total = int(lens.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    offs = np.cumsum(lens) - lens
    return np.repeat(starts - offs, lens) + np.arange(total, dtype=np.int64)


def topological_remainder(n: int, ptr, dep_rows):
    """Kahn's algorithm over CSR, vectorised level by level: record i depends on rows
    ``dep_rows[ptr[i]:ptr[i + 1]]``. Returns a bool mask of the records left when every record
    whose dependencies are all removed has been removed (all False: the graph is acyclic)."""
    import numpy as np
    from ..flows.table import reverse_csr
    indeg = np.diff(ptr).astype(np.int64)
    rev_ptr, succ_of = reverse_csr(n, ptr, dep_rows)   # dependents of row r: succ_of[rev_ptr[r]:rev_ptr[r + 1]]
    left = np.ones(n, dtype=bool)
    frontier = np.flatnonzero(indeg == 0)
    while frontier.size:
        left[frontier] = False
        succ = succ_of[_gather_ranges(rev_ptr, frontier)]
        if not succ.size:
            break
        u, c = np.unique(succ, return_counts=True)
        indeg[u] -= c
        frontier = u[indeg[u] == 0]
    return left


def _earlier_deps_only(n: int, ptr, dep) -> bool:
    """True if every record ``i`` of a trace with ids ``0..n-1`` in row order depends only on
    ids ``0..i-1`` (every generated trace): then each dependency is known, none is the record
    itself and none closes a cycle. Two passes over the dependencies (a minimum and a maximum per
    record), no per-edge temporaries; False sends :func:`check_trace` to its exact checks."""
    import numpy as np
    if int(dep.min()) < 0:
        return False
    counts = np.diff(ptr)
    rows = np.flatnonzero(counts)
    last = np.maximum.reduceat(dep, ptr[rows])       # the largest dependency of each record
    return bool((last < rows).all())


def check_trace(trace: Trace, num_hosts: int | None = None) -> Trace:
    """Checks across rows: ids unique, deps known and acyclic, GPU ids in ``0..num_hosts-1``.

    Vectorised over the columns (a Kahn topological sort over the CSR dependencies for cycles);
    the first problem in file order is reported as the row-by-row check did."""
    import numpy as np
    n = len(trace)
    if n == 0:
        raise TraceError("the trace has no messages", source=trace.source)
    cols, ptr, dep = trace.columns()
    ids = cols["id"]
    dense = bool(ids[0] == 0 and ids[-1] == n - 1 and (n == 1 or np.all(ids[1:] > ids[:-1])))
    # ids 0..n-1 in order (every generated trace): the row of an id is the id itself
    order = np.arange(n, dtype=np.int64) if dense else np.argsort(ids, kind="stable")
    sid = ids if dense else ids[order]
    later = np.zeros(n, dtype=bool)
    later[1:] = sid[1:] == sid[:-1]
    dup_rows = order[later]
    first_dup = int(dup_rows.min()) if dup_rows.size else n
    first_gpu = n
    if num_hosts is not None:
        out = np.flatnonzero((cols["src"] >= num_hosts) | (cols["dst"] >= num_hosts))
        first_gpu = int(out[0]) if out.size else n
    i = min(first_dup, first_gpu)
    if i < n:
        rid = int(ids[i])
        if i == first_dup:
            j = int(order[np.searchsorted(sid, rid)])   # stable sort: the first occurrence
            first = trace._where_of(j) or ("row", j)
            raise trace.error(i, "id", f"duplicate message id {rid} (first at {first[0]} {first[1]})")
        for col in ("src", "dst"):
            g = int(cols[col][i])
            if g >= num_hosts:
                raise trace.error(i, col, f"GPU {g} is not in the topology (allowed: 0..{num_hosts - 1})")
    if len(dep) and dense and _earlier_deps_only(n, ptr, dep):
        return trace      # every dependency on an earlier row: known, not itself, and no cycle
    if len(dep):
        owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(ptr))
        pos = np.clip(dep, 0, n - 1) if dense else np.minimum(np.searchsorted(sid, dep), n - 1)
        known = sid[pos] == dep
        bad = np.flatnonzero((dep == ids[owner]) | ~known)
        if bad.size:
            e = int(bad[0])
            i, d, rid = int(owner[e]), int(dep[e]), int(ids[owner[e]])
            if d == rid:
                raise trace.error(i, "deps", f"message {rid} depends on itself")
            raise trace.error(i, "deps", f"message {rid} depends on unknown message {d} "
                                         "(allowed: ids in the id column)")
        rows = pos if dense else order[pos]
        # every dependency on an earlier row (a generated trace's order) cannot close a cycle;
        # otherwise Kahn's algorithm decides
        if not (rows < owner).all() and topological_remainder(n, ptr, rows).any():
            _raise_cycle(trace, ids, ptr, dep)
    return trace


def _raise_cycle(trace: Trace, ids, ptr, dep) -> None:
    """The cycle error as the row-by-row check reported it (networkx's first cycle; only on the
    error path)."""
    import networkx as nx
    import numpy as np
    index = {int(x): i for i, x in enumerate(ids.tolist())}
    owner = np.repeat(ids, np.diff(ptr))
    g = nx.DiGraph()
    g.add_nodes_from(index)
    g.add_edges_from(zip(dep.tolist(), owner.tolist()))
    cyc = [e[0] for e in nx.find_cycle(g)]
    first = min(cyc, key=index.__getitem__)
    raise trace.error(index[first], "deps", "dependency cycle through messages "
                      f"{' -> '.join(map(str, cyc + cyc[:1]))} (allowed: deps that form no cycle)")
