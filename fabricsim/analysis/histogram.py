"""Log-bucketed histogram for packet latencies: constant memory, bounded relative error.

Bucket ``i`` covers ``[b**i, b**(i+1))`` ps with ``b = 1 + rel_error``; a percentile is reported
as the geometric middle of its bucket, so it is within ``rel_error / 2`` (relative) of the exact
order statistic. Memory: about ``ln(max/min) / rel_error`` counters (2,800 for 1ps..1s at 1%).

>>> h = LogHistogram(0.01)
>>> for v in range(1000, 2001): h.add(v)
>>> abs(h.percentile(50) - 1500) / 1500 < 0.005
True
"""
from __future__ import annotations

import math

import numpy as np


class LogHistogram:
    def __init__(self, rel_error: float = 0.01, max_value_ps: float = 1e15):
        self.rel_error = rel_error
        self.inv_log_base = 1.0 / math.log1p(rel_error)
        self.counts = [0] * (int(math.log(max_value_ps) * self.inv_log_base) + 2)

    def add(self, value_ps: int, n: int = 1) -> None:
        self.counts[int(math.log(max(value_ps, 1)) * self.inv_log_base)] += n

    @property
    def count(self) -> int:
        return sum(self.counts)

    def _edges(self, i):
        b = 1.0 + self.rel_error
        return b ** i, b ** (i + 1)

    def percentile(self, q: float) -> float:
        """The q-th percentile (0-100), in ps; NaN if empty."""
        c = np.asarray(self.counts, dtype=np.int64)
        total = int(c.sum())
        if total == 0:
            return float("nan")
        rank = max(1, math.ceil(q / 100.0 * total))
        i = int(np.searchsorted(np.cumsum(c), rank))
        lo, hi = self._edges(i)
        return math.sqrt(lo * hi)

    def mean(self) -> float:
        c = np.asarray(self.counts, dtype=np.float64)
        total = c.sum()
        if total == 0:
            return float("nan")
        i = np.arange(len(c))
        b = 1.0 + self.rel_error
        mids = np.sqrt(b ** i * b ** (i + 1))
        return float((c * mids).sum() / total)

    def table(self):
        """Non-empty buckets as a DataFrame: lower_ps, upper_ps, packets, cumulative_fraction."""
        import pandas as pd
        c = np.asarray(self.counts, dtype=np.int64)
        idx = np.nonzero(c)[0]
        b = 1.0 + self.rel_error
        cum = np.cumsum(c[idx])
        return pd.DataFrame({"lower_ps": b ** idx, "upper_ps": b ** (idx + 1), "packets": c[idx],
                             "cumulative_fraction": cum / max(1, cum[-1] if len(cum) else 1)})
