"""Per-operation figures for traces whose messages carry an ``op`` tag (docs/metrics.md, "Operations").

For each operation: its messages, ranks ``n`` (distinct sources and destinations), payload bytes,
first release, last completion and time ``t``, its lower bound ``ideal_time_ps``
(:class:`~fabricsim.analysis.bound.LowerBound` over its messages alone) and the nccl-tests
bandwidths: ``algbw = S / t`` with ``S`` the buffer size per rank (the ``collective_bytes`` tag,
else derived from the bytes sent: :data:`KINDS`), ``busbw = algbw x`` the kind's bus factor.
Operations without a ``collective`` tag: phase ``dispatch`` / ``combine`` (MoE) follow the
all-to-all convention; any other has ``busbw = algbw = size_bytes / n / t``.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

TAG_COLUMNS = ("op", "phase", "layer", "microbatch", "collective", "collective_bytes")
#: MoE phases whose untagged operations are all-to-alls (and whose summary key is the phase)
MOE_PHASES = ("dispatch", "combine")


@dataclass(frozen=True)
class Kind:
    """nccl-tests conventions of one collective kind.

    ``sent(n, senders)``: payload bytes the bandwidth-optimal algorithm sends in total, in units of
    the buffer size per rank ``S`` (``n`` ranks, ``senders`` of them sending); ``bus(n)``: the bus
    bandwidth factor ``busbw / algbw``."""

    sent: Callable[[int, int], float]
    bus: Callable[[int], float]


#: kind -> conventions (nccl-tests doc/PERFORMANCE.md): ring all-reduce sends 2 (n - 1) / n x S per
#: rank; reduce-scatter, all-gather and all-to-all (n - 1) / n x S; send/recv S per sending rank;
#: a pipelined broadcast S to each of the n - 1 other ranks
KINDS: dict[str, Kind] = {
    "allreduce": Kind(lambda n, s: 2 * (n - 1), lambda n: 2 * (n - 1) / n),
    "reduce_scatter": Kind(lambda n, s: n - 1, lambda n: (n - 1) / n),
    "all_gather": Kind(lambda n, s: n - 1, lambda n: (n - 1) / n),
    "all_to_all": Kind(lambda n, s: n - 1, lambda n: (n - 1) / n),
    "sendrecv": Kind(lambda n, s: s, lambda n: 1.0),
    "broadcast": Kind(lambda n, s: n - 1, lambda n: 1.0),
}

COLUMNS = ["op", "collective", "phase", "messages", "ranks", "size_bytes", "collective_bytes",
           "first_release_ps", "last_end_ps", "time_ps", "ideal_time_ps", "completion_time_ratio",
           "algbw_bps", "busbw_bps", "completed", "slowest_message_id", "slowest_fct_ps"]


def add_tag_columns(msgs: pd.DataFrame, messages, rows=None) -> pd.DataFrame:
    """Add the tag columns (:data:`TAG_COLUMNS`) when any message carries tags. ``messages``: a
    :class:`~fabricsim.flows.MessageTable` whose rows ``rows`` are those of ``msgs`` (looked up by
    ``message_id`` if None), or a dict message id -> message."""
    if isinstance(messages, dict):
        if not any(m.tags for m in messages.values()):
            return msgs
        for col in TAG_COLUMNS:
            msgs[col] = [messages[i].tags.get(col) for i in msgs["message_id"]]
        return msgs
    tags = messages.tags
    if not any(any(x is not None for x in v) for v in tags.values()):    # stops at the first tag
        return msgs
    if rows is None:
        rows = messages.row_of(msgs["message_id"].to_numpy(dtype=np.int64))
    for col in TAG_COLUMNS:
        msgs[col] = _gather(tags[col], rows).set_axis(msgs.index) if col in tags else [None] * len(msgs)
    return msgs


def _gather(values: np.ndarray, rows) -> pd.Series:
    """``values[rows]`` (an object array of tags) as the column pandas infers from that list.
    A column of ``str`` (or of ``int``) and ``None`` only, as traces give, is built from its
    distinct values, each converted once, not once per row; any other mix (floats, whose
    ``-0.0`` and ``0.0`` are one value to a hash, ``1`` and ``1.0``, ``True`` and ``1``, NaN
    beside None, unhashable values) from the list itself."""
    kinds = set(map(type, values))
    if not (kinds <= {str, type(None)} or kinds <= {int, type(None)}):
        return pd.Series(values[rows].tolist())
    codes, uniques = pd.factorize(values)
    pick = codes[rows] + 1                          # 0: None (any NA)
    used = np.bincount(pick, minlength=len(uniques) + 1) > 0    # the values the rows hold, in order
    if not used[1:].any():
        return pd.Series(values[rows].tolist())     # only NAs (None or NaN: inferred from them)
    col = pd.Series(([None] if used[0] else []) + [u for u, k in zip(uniques, used[1:].tolist()) if k])
    pick = (np.cumsum(used) - 1)[pick]
    return pd.Series(col.to_numpy()[pick] if col.dtype == object else col.take(pick).array)


def op_kind(collective, phase) -> str:
    """The kind whose conventions an operation follows: its ``collective`` tag, else ``all_to_all``
    for MoE dispatch / combine, else "" (unknown)."""
    if collective:
        return str(collective)
    return "all_to_all" if phase in MOE_PHASES else ""


def summary_key(collective: str, phase) -> str:
    """Key of an operation in ``summary.collectives.by_kind``: the MoE phase for dispatch /
    combine, else the kind, else ``other``."""
    if phase in MOE_PHASES:
        return str(phase)
    return collective or "other"


def _first(values, default):
    """The first of ``values`` that is given (not None, NaN, "" or 0), else ``default``. Looked
    for among the distinct values in order of first appearance (the same first one: a column
    that repeats one tag, or none, is not walked row by row in Python)."""
    for v in pd.unique(np.asarray(values, dtype=object)):
        if v is not None and not (isinstance(v, float) and math.isnan(v)) and v != "" and v != 0:
            return v
    return default


def bandwidths(kind: str, size_bytes: int, ranks: int, senders: int, tagged_bytes: int, time_ps):
    """(S in bytes or None, algbw_bps, busbw_bps) of one operation (module docstring)."""
    conv = KINDS.get(kind)
    if conv is None:
        bus = size_bytes / ranks * 8e12 / time_ps if time_ps else None
        return None, bus, bus
    sent = conv.sent(ranks, senders)
    s = float(tagged_bytes) if tagged_bytes else (size_bytes / sent if sent else None)
    alg = s * 8e12 / time_ps if (time_ps and s is not None) else None
    return s, alg, (alg * conv.bus(ranks) if alg is not None else None)


def collectives_table(msgs: pd.DataFrame, bound=None) -> pd.DataFrame:
    """One row per operation; empty if the messages carry no ``op`` tag. ``bound`` (a
    :class:`~fabricsim.analysis.bound.LowerBound` of the run) gives ``ideal_time_ps``."""
    if "op" not in msgs.columns or msgs["op"].isna().all():
        return pd.DataFrame(columns=COLUMNS)
    rows = []
    for op, g in msgs.groupby("op", sort=False):
        ranks = len(np.union1d(g["src"].to_numpy(), g["dst"].to_numpy()))
        done = bool(g["completed"].all())
        first = g["release_ps"].min()
        last = g["end_ps"].max() if done else None
        t = int(last - first) if done and pd.notna(first) else None
        size = int(g["size_bytes"].sum())
        phase = g["phase"].iloc[0] if "phase" in g else None
        kind = op_kind(_first(g["collective"], "") if "collective" in g else "", phase)
        tagged = int(_first(g["collective_bytes"], 0)) if "collective_bytes" in g else 0
        s, alg, bus = bandwidths(kind, size, ranks, g["src"].nunique(), tagged, t)
        ideal = bound.of(int(first), g["message_id"]).duration_ps if bound is not None and pd.notna(first) else None
        slow = g.loc[g["fct_ps"].astype("Float64").idxmax()] if g["fct_ps"].notna().any() else None
        rows.append({
            "op": op, "collective": kind, "phase": phase, "messages": len(g), "ranks": ranks,
            "size_bytes": size, "collective_bytes": s, "first_release_ps": None if pd.isna(first) else int(first),
            "last_end_ps": None if last is None else int(last), "time_ps": t, "ideal_time_ps": ideal,
            "completion_time_ratio": ideal / t if (t and ideal is not None) else None,
            "algbw_bps": alg, "busbw_bps": bus, "completed": done,
            "slowest_message_id": None if slow is None else int(slow["message_id"]),
            "slowest_fct_ps": None if slow is None else int(slow["fct_ps"]),
        })
    out = pd.DataFrame(rows, columns=COLUMNS)
    for c in ("first_release_ps", "last_end_ps", "time_ps", "ideal_time_ps", "slowest_message_id", "slowest_fct_ps"):
        out[c] = out[c].astype("Int64")
    for c in ("collective_bytes", "completion_time_ratio", "algbw_bps", "busbw_bps"):
        out[c] = out[c].astype("float64")
    return out


def collectives_summary(table: pd.DataFrame) -> dict:
    """``summary.collectives``: operation count, median and max time, and per kind
    (:func:`summary_key`) the aggregates of docs/metrics.md."""
    t = table["time_ps"].dropna().astype("int64")
    out = {"operations": int(len(table)),
           "time_p50_ps": float(t.median()) if len(t) else None,
           "time_max_ps": int(t.max()) if len(t) else None,
           "by_kind": {}}
    keys = [summary_key(c, p) for c, p in zip(table["collective"], table["phase"])]
    for key, g in table.groupby(pd.Series(keys, index=table.index), sort=False):
        done = g[g["time_ps"].notna()]

        def mean(col, frame=done):
            v = frame[col].dropna().astype("float64")
            return float(v.mean()) if len(v) else None

        out["by_kind"][key] = {
            "collective": str(g["collective"].iloc[0]),
            "operations": int(len(g)), "completed": int(g["completed"].sum()),
            "time_mean_ps": mean("time_ps"),
            "time_max_ps": int(done["time_ps"].max()) if len(done) else None,
            "ideal_time_mean_ps": mean("ideal_time_ps", g),
            "completion_time_ratio_mean": mean("completion_time_ratio"),
            "algbw_mean_bps": mean("algbw_bps"), "busbw_mean_bps": mean("busbw_bps"),
        }
    return out
