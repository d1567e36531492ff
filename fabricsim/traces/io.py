"""Read and write traces (format v2; v1 files are read too) as Parquet, CSV or JSON Lines, chosen by file extension.

``read_trace`` parses and checks (everything but GPU ids against a topology, which takes
``num_hosts``); every problem is a :class:`~fabricsim.errors.TraceError` naming file, row and column.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from ..errors import TraceError
from .schema import (COLLECTIVES, COLUMNS, FORMAT_VERSION, INT64_MAX, INT_COLUMNS, PARQUET_VERSION_KEY, PHASES,
                     READABLE_VERSIONS, REQUIRED, Trace, check_columns, check_trace, coerce_row)

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}


def trace_format(path) -> str:
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise TraceError(f"unknown trace file extension {Path(path).suffix!r} "
                         f"(allowed: {', '.join(FORMATS)})", source=str(path))
    return fmt


def read_trace(path, num_hosts: int | None = None) -> Trace:
    """Read and check a trace file. ``num_hosts`` also checks GPU ids against a topology."""
    path = Path(path)
    fmt = trace_format(path)
    if not path.is_file():
        raise TraceError("trace file not found", source=str(path))
    trace = {"parquet": _read_parquet, "csv": _read_csv, "jsonl": _read_jsonl}[fmt](path)
    return check_trace(trace, num_hosts)


def read_trace_table(path, num_hosts: int | None = None, qps: int = 1):
    """Read and check a trace file into a :class:`~fabricsim.flows.table.MessageTable` (the
    messages :meth:`Trace.to_messages` gives, as columns; Parquet is read column by column)."""
    return read_trace(path, num_hosts).to_table(qps)


def _collect(rows, source: str, kind: str) -> Trace:
    """rows: iterable of (position, raw dict)."""
    records, where = [], []
    for n, raw in rows:
        def err(col, msg, n=n):
            return TraceError(msg, source=source, column=col, line=n if kind == "line" else None,
                              row=n if kind == "row" else None)
        records.append(coerce_row(raw, err))
        where.append((kind, n))
    return Trace(records, source, where)


def csv_rows(reader, make_error):
    """Iterate a ``csv.DictReader``; a CSV syntax or encoding error becomes
    ``make_error(message, line)`` (raised), so each caller keeps its own error type."""
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except (csv.Error, UnicodeDecodeError) as exc:
            raise make_error(f"not valid CSV: {exc}", reader.line_num or None) from None
        yield row


def _read_csv(path: Path) -> Trace:
    src = str(path)
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        try:
            cols = reader.fieldnames or []
        except (csv.Error, UnicodeDecodeError) as exc:
            raise TraceError(f"not valid CSV: {exc}", source=src, line=1) from None
        check_columns([c.strip() for c in cols], src, ("line", 1))

        def rows():
            for row in csv_rows(reader, lambda msg, line: TraceError(msg, source=src, line=line)):
                if None in row:
                    raise TraceError("more values than columns", source=src, line=reader.line_num)
                yield reader.line_num, {k.strip(): v for k, v in row.items() if k is not None}
        return _collect(rows(), src, "line")


def _read_jsonl(path: Path) -> Trace:
    src = str(path)

    def rows():
        with open(path, encoding="utf-8-sig") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise TraceError(f"not valid JSON: {exc.msg}", source=src, line=n) from None
                if not isinstance(obj, dict):
                    raise TraceError("each line must be a JSON object", source=src, line=n)
                check_columns(obj.keys(), src, ("line", n))
                yield n, obj
    try:
        return _collect(rows(), src, "line")
    except UnicodeDecodeError as exc:
        raise TraceError(f"not valid UTF-8: {exc}", source=src) from None


def _read_parquet(path: Path) -> Trace:
    import pyarrow as pa
    import pyarrow.parquet as pq
    src = str(path)
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as exc:
        raise TraceError(f"not a readable Parquet file: {exc}", source=src) from None
    meta = table.schema.metadata or {}
    ver = meta.get(PARQUET_VERSION_KEY)
    if ver is not None and ver.decode() not in {str(v) for v in READABLE_VERSIONS}:
        raise TraceError(f"trace format version {ver.decode()} (allowed: "
                         f"{', '.join(map(str, READABLE_VERSIONS))})", source=src)
    check_columns(table.column_names, src)
    fast = _parquet_columns(table, src)
    if fast is not None:
        return fast
    # a column of another type (strings for integers, nulls, ...): row by row, for the error
    cols = {c: table.column(c).to_pylist() for c in COLUMNS if c in table.column_names}
    n = table.num_rows
    return _collect(((i, {c: v[i] for c, v in cols.items()}) for i in range(n)), src, "row")


def _parquet_columns(table, src: str) -> Trace | None:
    """A columnar Trace straight from an Arrow table whose columns have the schema's types (ints,
    strings, a list of ints for deps, no nulls); ``None`` if a column does not (the caller reads
    row by row). Per-row value checks are vectorised; the first failing row is coerced on its own
    so the error is the row-by-row one."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    n = table.num_rows
    have = set(table.column_names)
    cols: dict = {}
    arrs: dict = {}
    ptr = np.zeros(n + 1, dtype=np.int64)
    dep = np.zeros(0, dtype=np.int64)
    for c, (kind, default) in COLUMNS.items():
        if c not in have:
            if kind == "int":
                cols[c] = np.full(n, default, dtype=np.int64)
            elif kind != "deps":
                a = np.empty(n, dtype=object)
                a[:] = default
                cols[c] = a
            continue
        col = table.column(c)
        arr = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        if arr.null_count:
            return None
        t = arr.type
        if kind == "int":
            if not pa.types.is_integer(t):
                return None
            if pa.types.is_uint64(t) and n and pc.max(arr).as_py() > INT64_MAX:
                return None
            cols[c] = arr.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        elif kind == "deps":
            if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_integer(t.value_type):
                return None
            values = arr.values
            off = arr.offsets.to_numpy().astype(np.int64)
            if values.null_count and pc.sum(pc.is_null(values.slice(off[0], off[-1] - off[0]))).as_py():
                return None
            ptr = off - off[0]
            dep = values.slice(off[0], off[-1] - off[0]).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            if pa.types.is_uint64(t.value_type) and dep.size and (dep < 0).any():
                return None
        else:
            if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
                return None
            arrs[c] = arr
            cols[c] = _strings(arr)
    # per-row checks (coerce_row's), vectorised: first row with a problem, in file order
    bad = np.zeros(n, dtype=bool)
    for c in ("id", "src", "dst", "gap_ps", "start_ps", "collective_bytes"):
        bad |= cols[c] < 0
    bad |= (cols["conn"] < -1) | (cols["size_bytes"] <= 0) | (cols["src"] == cols["dst"])
    for c in ("op", "phase", "collective"):
        if c not in arrs:
            continue
        stripped = pc.utf8_trim_whitespace(arrs[c])
        if c == "op":
            bad |= pc.equal(stripped, "").to_numpy(zero_copy_only=False)
        else:
            allowed = PHASES if c == "phase" else COLLECTIVES
            if COLUMNS[c][1] is REQUIRED:
                bad |= pc.equal(stripped, "").to_numpy(zero_copy_only=False)
            bad |= ~pc.is_in(stripped, value_set=pa.array(list(allowed))).to_numpy(zero_copy_only=False)
            cols[c] = _strings(stripped)
    rows = np.flatnonzero(bad)
    if rows.size:
        i = int(rows[0])
        raw = {c: v[0] for c, v in table.slice(i, 1).to_pydict().items() if c in COLUMNS}
        coerce_row(raw, lambda col, msg: TraceError(msg, source=src, column=col, row=i))
        raise AssertionError(f"row {i} failed a vectorised check but not coerce_row")  # pragma: no cover
    for c in INT_COLUMNS:
        cols[c] = np.ascontiguousarray(cols[c], dtype=np.int64)
    return Trace.from_columns(cols, ptr, dep, src, "row")


def _strings(arr):
    """An Arrow string array as a numpy object array of str, one Python string per distinct
    value (a trace column holds a few: op names, phases), not one per row."""
    import numpy as np
    import pyarrow.compute as pc
    d = pc.dictionary_encode(arr)
    values = np.empty(len(d.dictionary), dtype=object)
    values[:] = d.dictionary.to_pylist()
    return values[d.indices.to_numpy(zero_copy_only=False)]


def write_trace(trace: Trace, path) -> Path:
    """Write ``trace`` in the format of ``path``'s extension. Returns the path."""
    path = Path(path)
    fmt = trace_format(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        with open(path, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(COLUMNS)
            for r in trace.records:
                d = r.as_dict()
                d["deps"] = ";".join(map(str, r.deps))
                w.writerow(d[c] for c in COLUMNS)
    elif fmt == "jsonl":
        with open(path, "w", encoding="utf-8") as fh:
            for r in trace.records:
                fh.write(json.dumps(r.as_dict(), separators=(",", ":")) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(arrow_table(trace), path)
    return path


def arrow_table(trace: Trace):
    """``trace`` as an Arrow table of :func:`arrow_schema`, built from its columns."""
    import numpy as np
    import pyarrow as pa
    schema = arrow_schema()
    if not trace.columnar:
        data = {c: [getattr(r, c) if c != "deps" else list(r.deps) for r in trace.records] for c in COLUMNS}
        return pa.Table.from_pydict(data, schema=schema)
    cols, ptr, dep = trace.columns()
    arrays = []
    for f in schema:
        if f.name == "deps":
            off = pa.array(ptr.astype(np.int32) if ptr[-1] < 2**31 else ptr, type=pa.int32() if ptr[-1] < 2**31 else pa.int64())
            arrays.append(pa.ListArray.from_arrays(off, pa.array(dep, type=pa.int64())).cast(f.type))
        else:
            arrays.append(pa.array(cols[f.name], type=f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def arrow_schema():
    import pyarrow as pa
    types = {"int": pa.int64(), "str": pa.string(), "phase": pa.string(), "collective": pa.string(),
             "deps": pa.list_(pa.int64())}
    return pa.schema([pa.field(c, types[k], nullable=False) for c, (k, _) in COLUMNS.items()],
                     metadata={PARQUET_VERSION_KEY: str(FORMAT_VERSION).encode()})
