"""Read and write traces (format v2; v1 files are read too) as Parquet, CSV or JSON Lines, chosen by file extension.

``read_trace`` parses and checks (everything but GPU ids against a topology, which takes
``num_hosts``); every problem is a :class:`~fabricsim.errors.TraceError` naming file, row and column.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from ..errors import TraceError
from .schema import COLUMNS, FORMAT_VERSION, PARQUET_VERSION_KEY, READABLE_VERSIONS, Trace, check_columns, check_trace, coerce_row

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
    with open(path, newline="", encoding="utf-8") as fh:
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
        with open(path, encoding="utf-8") as fh:
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
    cols = {c: table.column(c).to_pylist() for c in COLUMNS if c in table.column_names}
    n = table.num_rows
    return _collect(((i, {c: v[i] for c, v in cols.items()}) for i in range(n)), src, "row")


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
        schema = arrow_schema()
        data = {c: [getattr(r, c) if c != "deps" else list(r.deps) for r in trace.records] for c in COLUMNS}
        table = pa.Table.from_pydict(data, schema=schema)
        pq.write_table(table, path)
    return path


def arrow_schema():
    import pyarrow as pa
    types = {"int": pa.int64(), "str": pa.string(), "phase": pa.string(), "collective": pa.string(),
             "deps": pa.list_(pa.int64())}
    return pa.schema([pa.field(c, types[k], nullable=False) for c, (k, _) in COLUMNS.items()],
                     metadata={PARQUET_VERSION_KEY: str(FORMAT_VERSION).encode()})
