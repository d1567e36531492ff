"""Per-operation figures for traces whose messages carry an ``op`` tag (docs/metrics.md).

For each operation: its messages, participating ranks ``n`` (distinct sources and destinations),
payload bytes, first release and last completion, completion time ``t``, algorithm bandwidth
``algbw = bytes / n / t`` (bytes per rank over time, as nccl-tests) and bus bandwidth
``busbw = algbw x (n - 1) / n`` (the all-to-all convention of nccl-tests: each rank's bytes cross
its own link once), and the slowest message.
"""
from __future__ import annotations

import pandas as pd

TAG_COLUMNS = ("op", "phase", "layer", "microbatch")


def add_tag_columns(msgs: pd.DataFrame, by_id: dict) -> pd.DataFrame:
    """Add op/phase/layer/microbatch columns when any message carries tags."""
    if not any(m.tags for m in by_id.values()):
        return msgs
    for col in TAG_COLUMNS:
        msgs[col] = [by_id[i].tags.get(col) for i in msgs["message_id"]]
    return msgs


def collectives_table(msgs: pd.DataFrame) -> pd.DataFrame:
    """One row per operation; empty if the messages carry no ``op`` tag."""
    cols = ["op", "phase", "messages", "ranks", "size_bytes", "first_release_ps", "last_end_ps", "time_ps",
            "algbw_bps", "busbw_bps", "completed", "slowest_message_id", "slowest_fct_ps"]
    if "op" not in msgs.columns or msgs["op"].isna().all():
        return pd.DataFrame(columns=cols)
    rows = []
    for op, g in msgs.groupby("op", sort=False):
        ranks = len(set(g["src"]) | set(g["dst"]))
        done = bool(g["completed"].all())
        first = g["release_ps"].min()
        last = g["end_ps"].max() if done else None
        t = int(last - first) if done and pd.notna(first) else None
        size = int(g["size_bytes"].sum())
        alg = (size / ranks) * 8e12 / t if t else None
        slow = g.loc[g["fct_ps"].astype("Float64").idxmax()] if g["fct_ps"].notna().any() else None
        rows.append({
            "op": op, "phase": g["phase"].iloc[0] if "phase" in g else None, "messages": len(g), "ranks": ranks,
            "size_bytes": size, "first_release_ps": None if pd.isna(first) else int(first),
            "last_end_ps": None if last is None else int(last), "time_ps": t,
            "algbw_bps": alg, "busbw_bps": alg * (ranks - 1) / ranks if alg else None, "completed": done,
            "slowest_message_id": None if slow is None else int(slow["message_id"]),
            "slowest_fct_ps": None if slow is None else int(slow["fct_ps"]),
        })
    out = pd.DataFrame(rows, columns=cols)
    for c in ("first_release_ps", "last_end_ps", "time_ps", "slowest_message_id", "slowest_fct_ps"):
        out[c] = out[c].astype("Int64")
    return out
