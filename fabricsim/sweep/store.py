"""A sweep's results folder: one partitioned Parquet dataset of points, a summary and a manifest.

Layout of ``DIR``::

    points/status=complete/part-<uuid>.parquet    the dataset: one row per finished point,
    points/status=failed/part-<uuid>.parquet      hive-partitioned by status
    points.csv          every point of the current sweep in sweep order (the dataset, flattened)
    summary.csv         mean and 95 % CI per combination (fabricsim.compare.summarize)
    summary.parquet     the same
    sweep.json          the sweep: name, identity columns, seeds, every point's id, the counts
    runs/<point_id>/    each point's full results folder (only with keep_runs)

Rows are added as points finish and written in batches (each file is written under a hidden
name and renamed: a reader never sees half a file, and Ctrl-C loses at most the rows not yet
flushed, which the runner flushes on its way out). Partitioning by status lets a resume with
``retry_failed`` drop the failed points by removing one folder, and lets readers filter on
complete points without opening the others: ``pandas.read_parquet("DIR/points")`` or
``pyarrow.dataset.dataset("DIR/points", partitioning="hive")`` read it all.

Columns of the dataset: the identity columns (one per sweep key, typed from its values: integer,
float, boolean, else the value's text), ``seed``, ``point_id``, ``reason`` (why a point failed,
else empty), every metric of :data:`fabricsim.compare.DEFAULT_METRICS` and every per-operation
metric (:data:`fabricsim.compare.OP_METRICS` for every key) as float64 (null where a run has none),
and ``status`` (the partition).
"""
from __future__ import annotations

import json
import os
import re
import time
import uuid
from pathlib import Path

__all__ = ["SweepStore", "column_type", "metric_columns"]

POINTS = "points"
MANIFEST = "sweep.json"


def metric_columns() -> list[str]:
    """Metric columns of the dataset: compare's default metrics, then every per-operation one."""
    from ..compare import DEFAULT_METRICS, OP_METRICS, op_keys
    return list(DEFAULT_METRICS) + [f"{k}_{m}" for k in op_keys() for m in OP_METRICS]


def column_type(values: list):
    """The Arrow type of an identity column from its values (see the module doc)."""
    import pyarrow as pa
    if all(isinstance(v, bool) for v in values):
        return pa.bool_()
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return pa.int64()
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return pa.float64()
    return pa.string()


def _cell(value, typ):
    import pyarrow as pa
    if value is None:
        return None
    if typ == pa.string():
        return value if isinstance(value, str) else json.dumps(value)
    if typ == pa.float64():
        return float(value)
    return value


class SweepStore:
    """The results folder of one sweep (see the module doc).

    ``key_values``: ``{identity column: [its values]}`` (for the column types)."""

    def __init__(self, path: str | Path, key_values: dict[str, list], flush_every_s: float = 2.0):
        import pyarrow as pa
        self.path = Path(path)
        self.points_dir = self.path / POINTS
        self.keys = list(key_values)
        self.metrics = metric_columns()
        self.key_types = {k: column_type(v) for k, v in key_values.items()}
        self.schema = pa.schema([(k, t) for k, t in self.key_types.items()]
                                + [("seed", pa.int64()), ("point_id", pa.string()), ("reason", pa.string())]
                                + [(m, pa.float64()) for m in self.metrics])
        self._rows: list[dict] = []
        self._last_flush = time.monotonic()
        self.flush_every_s = flush_every_s

    # --- reading ---------------------------------------------------------------------------
    def _files(self) -> list[Path]:
        if not self.points_dir.is_dir():
            return []
        return sorted(p for p in self.points_dir.glob("status=*/*.parquet") if not p.name.startswith("."))

    def read(self):
        """Every stored row as a DataFrame (``status`` from the partition), in no set order."""
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq
        tables = []
        for f in self._files():
            t = pq.read_table(f)
            status = f.parent.name.split("=", 1)[1]
            tables.append(t.append_column("status", pa.array([status] * t.num_rows, pa.string())))
        if not tables:
            return pd.DataFrame(columns=list(self.schema.names) + ["status"])
        return pa.concat_tables(tables, promote_options="permissive").to_pandas()

    def finished(self) -> dict[str, str]:
        """``{point_id: status}`` of every stored point."""
        df = self.read()
        return dict(zip(df["point_id"], df["status"]))

    def drop_failed(self) -> int:
        """Remove the failed points (to run them again); returns how many rows went."""
        import shutil
        d = self.points_dir / "status=failed"
        if not d.is_dir():
            return 0
        n = int((self.read()["status"] == "failed").sum())
        shutil.rmtree(d)
        return n

    # --- writing ---------------------------------------------------------------------------
    def add(self, row: dict) -> None:
        """Queue one finished point's row (identity, seed, point_id, status, reason, metrics);
        written by :meth:`flush`, which runs by itself every ``flush_every_s``."""
        self._rows.append(row)
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def flush(self) -> None:
        """Write the queued rows: one file per status partition, atomically."""
        import pyarrow as pa
        import pyarrow.parquet as pq
        self._last_flush = time.monotonic()
        rows, self._rows = self._rows, []
        by_status: dict[str, list] = {}
        for r in rows:
            by_status.setdefault(str(r["status"]), []).append(r)
        for status, group in by_status.items():
            cols = {}
            for name in self.schema.names:
                typ = self.schema.field(name).type
                cols[name] = pa.array([_cell(r.get(name), typ) for r in group], typ)
            table = pa.table(cols, schema=self.schema)
            d = self.points_dir / f"status={re.sub(r'[^A-Za-z0-9_.-]', '_', status)}"
            d.mkdir(parents=True, exist_ok=True)
            name = f"part-{uuid.uuid4().hex}.parquet"
            tmp = d / f".{name}.tmp"
            pq.write_table(table, tmp)
            os.replace(tmp, d / name)

    def write_manifest(self, doc: dict) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        tmp = self.path / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2, default=str) + "\n")
        os.replace(tmp, self.path / MANIFEST)

    def table(self, point_ids: list[str]):
        """The stored rows of ``point_ids`` in that order (points not stored are left out), with
        the columns identity, seed, status, reason, metrics (per-operation metrics only where some
        row has one), point_id."""
        df = self.read()
        df = df.drop_duplicates("point_id", keep="last").set_index("point_id", drop=False)
        ids = [p for p in point_ids if p in df.index]
        df = df.loc[ids].reset_index(drop=True)
        from ..compare import DEFAULT_METRICS
        ops = [m for m in self.metrics if m not in DEFAULT_METRICS and df[m].notna().any()]
        cols = self.keys + ["seed", "status", "reason"] + list(DEFAULT_METRICS) + ops + ["point_id"]
        for c in cols:
            if c not in df.columns:
                df[c] = None
        df = df[cols]
        df["reason"] = df["reason"].fillna("")
        return df

    def write_tables(self, df, include_incomplete: bool = False):
        """``points.csv``, ``summary.csv`` and ``summary.parquet`` from the table of :meth:`table`;
        returns the summary (:func:`fabricsim.compare.summarize` over the identity columns)."""
        from ..compare import summarize
        self.path.mkdir(parents=True, exist_ok=True)
        df.to_csv(self.path / "points.csv", index=False)
        summary = summarize(df.drop(columns=["point_id"]), self.keys, include_incomplete=include_incomplete)
        summary.to_csv(self.path / "summary.csv", index=False)
        summary.to_parquet(self.path / "summary.parquet", index=False)
        return summary
