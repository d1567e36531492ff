"""Collectives results as nccl-tests performance tables.

nccl-tests (NVIDIA/nccl-tests) prints, per size, ``size count type redop root time algbw busbw
#wrong`` for an out-of-place and an in-place run (``src/util.cu``: ``writeResultHeader``,
``writeBenchmarkLinePreamble``, ``writeBenchmarkLineBody``): ``size`` in bytes is
``max(sendBytes, recvBytes)``, the buffer size S of ``doc/PERFORMANCE.md``; ``count`` the
elements of the call's count argument (all of S for all-reduce, send/recv and broadcast; S / n
per rank for all-gather, reduce-scatter and all-to-all: ``*GetCollByteCount``); ``time`` in
microseconds; ``algbw = S / t`` and ``busbw = algbw x factor`` in GB/s (10^9 bytes/s), the
factor of PERFORMANCE.md: all-reduce 2 (n - 1) / n, reduce-scatter, all-gather and all-to-all
(n - 1) / n, broadcast, reduce and send/recv 1.

Mapping from a results folder's collectives table (:mod:`fabricsim.analysis.collectives`):
``size`` = ``collective_bytes`` (S), ``time`` = ``time_ps`` (first release to last completion),
``n`` = ``ranks``; the factor comes from :data:`fabricsim.analysis.collectives.KINDS`, the same
conventions the collectives table uses. fabricsim runs each collective once: its figures fill
the out-of-place columns, the in-place ones are left blank (nccl-tests' own "null body"), and
``#wrong`` is ``N/A`` (no data is checked). ``redop`` is ``sum`` for all-reduce and
reduce-scatter, ``none`` otherwise (as nccl-tests prints for the others); ``root`` -1 except a
broadcast's, its only rank that receives nothing. MoE dispatch / combine operations count as
all-to-alls; operations of unknown kind or that did not complete are left out.
"""
from __future__ import annotations

import math

import pandas as pd

from ..analysis.collectives import KINDS
from ..errors import ConfigError

#: nccl-tests data types -> bytes per element (src/common.cu test_typenames, wordSize)
TYPE_BYTES = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "half": 2, "float": 4,
              "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1}
#: fabricsim kind -> (nccl-tests binary, redop, count is per rank)
TESTS = {"allreduce": ("all_reduce_perf", "sum", False), "reduce_scatter": ("reduce_scatter_perf", "sum", True),
         "all_gather": ("all_gather_perf", "none", True), "all_to_all": ("alltoall_perf", "none", True),
         "sendrecv": ("sendrecv_perf", "none", False), "broadcast": ("broadcast_perf", "none", False)}
ROW_COLUMNS = ["op", "collective", "test", "ranks", "size", "count", "type", "redop", "root", "time_us",
               "algbw_GBps", "busbw_GBps"]


def bus_factor(kind: str, ranks: int) -> float:
    """``busbw / algbw`` of nccl-tests for ``kind`` on ``ranks`` ranks (doc/PERFORMANCE.md).

    >>> bus_factor("allreduce", 8), bus_factor("all_gather", 8), bus_factor("sendrecv", 8)
    (1.75, 0.875, 1.0)
    """
    if kind not in KINDS:
        raise ConfigError(f"unknown collective {kind!r} (allowed: {', '.join(KINDS)})", field="collective")
    return float(KINDS[kind].bus(ranks))


def _roots(messages: pd.DataFrame | None) -> dict:
    """op -> the rank of its messages that sends and never receives (a broadcast's root)."""
    if messages is None or "op" not in messages.columns:
        return {}
    out = {}
    for op, g in messages.groupby("op", sort=False):
        only = sorted(set(g["src"]) - set(g["dst"]))
        if len(only) == 1:
            out[op] = int(only[0])
    return out


def nccl_rows(collectives: pd.DataFrame, dtype: str = "float", messages: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per completed operation of known kind: :data:`ROW_COLUMNS` (module docstring)."""
    if dtype not in TYPE_BYTES:
        raise ConfigError(f"got {dtype!r} (allowed: {', '.join(TYPE_BYTES)})", field="dtype")
    width = TYPE_BYTES[dtype]
    roots = _roots(messages)
    rows = []
    for r in collectives.itertuples(index=False):
        kind = r.collective if isinstance(r.collective, str) else ""
        if kind not in TESTS or pd.isna(r.time_ps) or not r.time_ps or pd.isna(r.collective_bytes):
            continue
        test, redop, per_rank = TESTS[kind]
        n = int(r.ranks)
        size = int(round(float(r.collective_bytes)))
        t_ps = int(r.time_ps)
        alg = size * 1e3 / t_ps                      # bytes / ps -> GB/s: x 1e12 / 1e9
        rows.append({"op": r.op, "collective": kind, "test": test, "ranks": n, "size": size,
                     "count": size // (n * width) if per_rank else size // width, "type": dtype, "redop": redop,
                     "root": roots.get(r.op, -1) if kind == "broadcast" else -1, "time_us": t_ps / 1e6,
                     "algbw_GBps": alg, "busbw_GBps": alg * bus_factor(kind, n)})
    return pd.DataFrame(rows, columns=ROW_COLUMNS)


def _float_str(value: float, width: int) -> str:
    """nccl-tests ``getFloatStr``: 2, 1 or 0 decimals, whichever fits ``width``, else exponent."""
    for fmt in (f"%{width}.2f", f"%{width}.1f", f"%{width}.0f"):
        s = fmt % value
        if len(s) <= width:
            return s
    return (f"%{width}.1e" if width >= 7 else f"%{width}.0e") % value


def format_nccl_tables(rows: pd.DataFrame, title: str = "fabricsim") -> str:
    """nccl-tests text tables, one per (test, ranks), in nccl-tests' column layout."""
    if rows.empty:
        return ""
    out = []
    for (test, n), g in rows.groupby(["test", "ranks"], sort=False):
        out.append(f"# {title}: {test} equivalent, {n} ranks, simulated once (out-of-place columns; no in-place run)")
        out.append("#")
        out.append("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
                   % ("", "", "", "", ""))
        out.append("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s"
                   % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                      "busbw", "#wrong"))
        out.append("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s"
                   % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""))
        for r in g.itertuples(index=False):
            out.append(("%12li  %12li  %8s  %6s  %6s" % (r.size, r.count, r.type, r.redop, "%6i" % r.root)
                        + "  %7s  %6s  %6s    N/A" % (_float_str(r.time_us, 7), _float_str(r.algbw_GBps, 6),
                                                      _float_str(r.busbw_GBps, 6))).rstrip())
        avg = float(g["busbw_GBps"].mean())
        out.append("# %-20s : %g " % ("Avg bus bandwidth", avg if math.isfinite(avg) else 0.0))
        out.append("#")
    return "\n".join(x.rstrip() for x in out) + "\n"


def nccl_tables(results, dtype: str = "float") -> tuple[pd.DataFrame, int]:
    """(rows, operations left out) for the results folder ``results`` (a path or a loaded
    :class:`~fabricsim.analysis.result.Result`)."""
    from pathlib import Path

    from ..analysis.load import load_results
    res = load_results(results) if isinstance(results, (str, Path)) else results
    coll = res.collectives
    if coll is None or coll.empty:
        src = str(getattr(res, "output_dir", None) or "<result>")
        raise ConfigError("the results have no collectives table (operations come from messages with an op tag: "
                          "a trace replay)", source=src, field="collectives")
    rows = nccl_rows(coll, dtype, res.messages)
    return rows, int(len(coll) - len(rows))
