"""A plan's results folder: the numbers per cluster size with every assumption beside them.

* ``plan.csv`` / ``plan.parquet``: one row per cluster size: the step breakdown (``*_s``), bytes per GPU
  (``*_bytes_per_gpu``), throughput and scaling efficiency, then every scalar assumption (the seed
  among them) as columns of its own;
* ``plan.json``: ``assumptions``, ``rows`` and ``patterns`` (JSON);
* ``patterns.csv``: every simulated pattern: its key, type, messages, bytes, simulated time and how
  many other groups reused it;
* ``scaling.png``: tokens/s/GPU and the step breakdown against the cluster size (with ``csv``).

Everything is computed before the folder is touched, so a bad plan writes nothing.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

SUMMARY_COLUMNS = ("gpus", "dp", "step_s", "compute_s", "exposed_comm_s", "tokens_per_s_per_gpu",
                   "scaling_efficiency")


def _scalar(v):
    if isinstance(v, (list, dict)):
        return json.dumps(v, sort_keys=True)
    return v


def table(result):
    """The rows with the assumptions as extra columns (a pandas DataFrame)."""
    import pandas as pd
    df = pd.DataFrame(result.rows)
    for k, v in result.assumptions.items():
        col = k if k not in df.columns else f"assumed_{k}"
        df[col] = _scalar(v)
    return df


def json_safe(v):
    """``v`` with NaN/inf as None and numpy scalars as Python numbers, for JSON."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: json_safe(x) for k, x in v.items()}
    if isinstance(v, list):
        return [json_safe(x) for x in v]
    if isinstance(v, np.generic):          # numpy scalars -> Python numbers
        return v.item()
    return v


def write(result, out_dir, formats) -> list[Path]:
    """Write ``result`` into ``out_dir`` in ``formats`` (csv, parquet, json); the files written."""
    import pandas as pd
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    df = table(result)
    files = []
    if "csv" in formats:
        df.to_csv(out / "plan.csv", index=False)
        pd.DataFrame(result.patterns).to_csv(out / "patterns.csv", index=False)
        files += [out / "plan.csv", out / "patterns.csv"]
        files.append(scaling_plot(result, out / "scaling.png"))
    if "parquet" in formats:
        df.to_parquet(out / "plan.parquet", index=False)
        files.append(out / "plan.parquet")
    # plan.json whatever the formats: every assumption, and the folder's record (outpath.check_owned_dir)
    doc = {"assumptions": result.assumptions, "simulations": result.simulations, "rows": result.rows,
           "patterns": result.patterns}
    (out / "plan.json").write_text(json.dumps(json_safe(doc), indent=1, sort_keys=False) + "\n")
    files.append(out / "plan.json")
    return files


def scaling_plot(result, path) -> Path:
    """Tokens/s/GPU (left) and the step breakdown (right) per cluster size (drawn outside pyplot)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from .spec import COMM_TYPES
    rows = sorted(result.rows, key=lambda r: (r["gpus"], r["cluster"]))
    labels = [f"{r['gpus']}\n{r['topology']}" if len({x['topology'] for x in rows}) > 1 else str(r["gpus"])
              for r in rows]
    fig = Figure(figsize=(10, 4))
    FigureCanvasAgg(fig)
    a, b = fig.subplots(1, 2)
    x = range(len(rows))
    a.plot(list(x), [r["tokens_per_s_per_gpu"] for r in rows], marker="o")
    a.set_xticks(list(x), labels)
    a.set_xlabel("GPUs")
    a.set_ylabel("tokens/s/GPU")
    a.set_ylim(bottom=0)
    for i, r in enumerate(rows):
        a.annotate(f"{r['scaling_efficiency']:.0%}", (i, r["tokens_per_s_per_gpu"]), textcoords="offset points",
                   xytext=(0, 6), ha="center", fontsize=8)
    a.set_title("throughput (scaling efficiency)")
    bottom = [0.0] * len(rows)
    parts = [("compute_busy_s", "compute"), ("bubble_s", "pipeline bubble")] + \
            [(f"{t}_exposed_s", f"{t} exposed") for t in COMM_TYPES]
    for col, name in parts:
        vals = [r[col] for r in rows]
        if any(v > 0 for v in vals):
            b.bar(list(x), vals, bottom=bottom, label=name)
            bottom = [p + v for p, v in zip(bottom, vals)]
    b.set_xticks(list(x), labels)
    b.set_xlabel("GPUs")
    b.set_ylabel("step time (s)")
    b.set_title("step breakdown")
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return Path(path)


def format_table(result) -> str:
    """The rows as a small text table (what ``fabricsim plan`` prints)."""
    head = f"{'topology':<22}{'GPUs':>7}{'dp':>6}{'step s':>11}{'compute s':>11}{'exposed s':>11}" \
           f"{'tok/s/GPU':>12}{'eff':>7}"
    lines = [head]
    for r in result.rows:
        lines.append(f"{r['topology'][:21]:<22}{r['gpus']:>7}{r['dp']:>6}{r['step_s']:>11.4g}{r['compute_s']:>11.4g}"
                     f"{r['exposed_comm_s']:>11.4g}{r['tokens_per_s_per_gpu']:>12.1f}{r['scaling_efficiency']:>7.1%}")
    return "\n".join(lines)
