"""Message traces (format v1, docs/traces.md): schema and checks, Parquet / CSV / JSON Lines I/O,
summary statistics. Replayed by the ``trace`` traffic pattern."""
from .io import FORMATS, read_trace, trace_format, write_trace
from .schema import COLUMNS, FORMAT_VERSION, PHASES, Trace, TraceRecord, check_trace
from .stats import inspect_trace

__all__ = ["COLUMNS", "FORMATS", "FORMAT_VERSION", "PHASES", "Trace", "TraceRecord", "check_trace",
           "inspect_trace", "read_trace", "trace_format", "write_trace"]
